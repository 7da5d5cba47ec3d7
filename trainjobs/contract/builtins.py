"""The built-in models and datasets: their params, and where the worker finds their builders."""

from __future__ import annotations

from pydantic import Field

from trainjobs.contract.catalog import (
    DataInfo,
    DataPath,
    DatasetEntry,
    DatasetParams,
    ModelEntry,
    ModelParams,
    SpecError,
)

# ---- datasets ---------------------------------------------------------------------------------


class SyntheticAudioParams(DatasetParams):
    num_samples: int = Field(256, ge=2, le=1_000_000)
    length: int = Field(1024, ge=8, le=1_000_000, description="samples per clip")
    mu: int = Field(256, ge=2, le=65_536, description="mu-law levels")

    def describe(self) -> DataInfo:
        return DataInfo(kind="audio", mu=self.mu, input_shape=(self.length,))


class SyntheticImagesParams(DatasetParams):
    num_samples: int = Field(256, ge=2, le=1_000_000)
    image_size: int = Field(32, ge=4, le=512)
    num_classes: int = Field(10, ge=2, le=10_000)

    def describe(self) -> DataInfo:
        return DataInfo(
            kind="classification", num_classes=self.num_classes, input_shape=(3, self.image_size, self.image_size)
        )


class DigitsParams(DatasetParams):
    def describe(self) -> DataInfo:
        return DataInfo(kind="classification", num_classes=10, input_shape=(1, 8, 8))


class ImageFolderParams(DatasetParams):
    root: DataPath = Field(description="a folder with one sub-folder of images per class")
    image_size: int = Field(32, ge=4, le=1024, description="images are resized to this square")

    def describe(self) -> DataInfo:
        # The number of classes is the number of sub-folders: known once the worker looks.
        return DataInfo(kind="classification", input_shape=(3, self.image_size, self.image_size))


class WavFolderParams(DatasetParams):
    root: DataPath = Field(description="a folder of 16-bit PCM .wav files")
    length: int = Field(1024, ge=8, le=1_000_000, description="samples per clip")
    mu: int = Field(256, ge=2, le=65_536, description="mu-law levels")

    def describe(self) -> DataInfo:
        return DataInfo(kind="audio", mu=self.mu, input_shape=(self.length,))


class Hdf5Params(DatasetParams):
    path: DataPath = Field(description="an HDF5 file written by `trainjobs data pack`")
    mu: int | None = Field(
        None, ge=2, le=65_536, description="mu-law levels the file was packed with [read from the file]"
    )

    def describe(self) -> DataInfo:
        return DataInfo(kind="audio", mu=self.mu)


DATASETS: dict[str, DatasetEntry] = {
    "synthetic-audio": DatasetEntry(
        SyntheticAudioParams,
        "trainjobs.worker.trainer.data.synthetic_audio:build",
        "sums of sines with noise, mu-law encoded (learnable, generated)",
    ),
    "synthetic-images": DatasetEntry(
        SyntheticImagesParams,
        "trainjobs.worker.trainer.data.synthetic_images:build",
        "per-class patterns under noise (learnable, generated)",
    ),
    "digits": DatasetEntry(
        DigitsParams,
        "trainjobs.worker.trainer.data.digits:build",
        "scikit-learn's 1,797 8x8 handwritten digits, shipped in the package",
    ),
    "image-folder": DatasetEntry(
        ImageFolderParams,
        "trainjobs.worker.trainer.data.folders:build_image_folder",
        "images under TRAINJOBS_DATA_ROOT, a sub-folder per class",
    ),
    "wav-folder": DatasetEntry(
        WavFolderParams,
        "trainjobs.worker.trainer.data.folders:build_wav_folder",
        "WAV files under TRAINJOBS_DATA_ROOT, cut into clips and mu-law encoded",
    ),
    "hdf5": DatasetEntry(
        Hdf5Params,
        "trainjobs.worker.trainer.data.hdf5:build",
        "mu-law clips packed once by `trainjobs data pack` (no decoding per epoch)",
    ),
}


# ---- models -----------------------------------------------------------------------------------


def _fill(params: ModelParams, name: str, theirs: object) -> dict[str, object]:
    """A data-describing param: the spec's value if given (it must agree), else the dataset's."""
    ours = getattr(params, name)
    if ours is not None and theirs is not None and ours != theirs:
        raise SpecError(f"model.params.{name}", f"is {ours} but the dataset gives {theirs}")
    return {name: ours if ours is not None else theirs}


class WaveNetParams(ModelParams):
    mu: int | None = Field(None, ge=2, le=65_536, description="output classes [the dataset's mu]")
    n_residue: int = Field(32, ge=1, le=1024, description="residual channels")
    n_skip: int = Field(64, ge=1, le=4096, description="skip channels")
    dilation_depth: int = Field(8, ge=1, le=16, description="dilations 1, 2, ... 2^(depth-1) per stack")
    n_repeat: int = Field(2, ge=1, le=16, description="stacks of dilated layers")

    def resolve(self, data: DataInfo) -> WaveNetParams:
        if data.kind != "audio":
            raise SpecError("model.name", "wavenet needs an audio dataset")
        return self.model_copy(update=_fill(self, "mu", data.mu))


class MlpParams(ModelParams):
    hidden: list[int] = Field(default_factory=lambda: [64], max_length=16, description="hidden layer widths")
    in_features: int | None = Field(None, ge=1, description="[the dataset's input size]")
    num_classes: int | None = Field(None, ge=2, description="[the dataset's classes]")

    def resolve(self, data: DataInfo) -> MlpParams:
        if data.kind != "classification":
            raise SpecError("model.name", "mlp needs a classification dataset")
        if any(width < 1 or width > 65_536 for width in self.hidden):
            raise SpecError("model.params.hidden", "each width must be between 1 and 65536")
        in_features = None
        if data.input_shape:
            in_features = 1
            for size in data.input_shape:
                in_features *= size
        return self.model_copy(
            update={**_fill(self, "in_features", in_features), **_fill(self, "num_classes", data.num_classes)}
        )


class ResNet50Params(ModelParams):
    num_classes: int | None = Field(None, ge=2, description="[the dataset's classes]")

    def resolve(self, data: DataInfo) -> ResNet50Params:
        if data.kind != "classification" or (data.input_shape and data.input_shape[0] != 3):
            raise SpecError("model.name", "resnet50 needs a dataset of 3-channel images")
        return self.model_copy(update=_fill(self, "num_classes", data.num_classes))


MODELS: dict[str, ModelEntry] = {
    "wavenet": ModelEntry(
        WaveNetParams,
        "trainjobs.worker.trainer.models.wavenet:build",
        "dilated causal convolutions (van den Oord et al. 2016) over mu-law audio",
    ),
    "mlp": ModelEntry(MlpParams, "trainjobs.worker.trainer.models.mlp:build", "a multilayer perceptron"),
    "resnet50": ModelEntry(
        ResNet50Params,
        "trainjobs.worker.trainer.models.resnet:build_resnet50",
        "torchvision's ResNet-50, randomly initialised (needs the 'vision' extra)",
        channels_last=True,
    ),
}
