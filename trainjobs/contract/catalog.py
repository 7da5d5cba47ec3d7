"""Built-in models and datasets, as far as the service needs to know them: their params.

The worker owns the code that builds them (worker/trainer); this module only describes and
validates params, so the API can reject a bad spec without importing torch. A dataset says what
it holds (`DataInfo`), and a model fills its data-describing params (`mu`, `num_classes`, input
size) from that when the spec omits them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class StrictModel(BaseModel):
    """Unknown fields are refused and no value is coerced from another type ("3" is not 3)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class DataInfo(BaseModel):
    """What a dataset holds, for the model params that default to it."""

    kind: Literal["audio", "classification"]
    num_classes: int | None = None
    input_shape: tuple[int, ...] | None = None
    mu: int | None = None


class SpecError(ValueError):
    """A spec that names a model, dataset or param that does not fit; `field` is its dotted path."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# ---- datasets ---------------------------------------------------------------------------------


class DatasetParams(StrictModel):
    val_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    seed: int = 0
    num_workers: int = Field(0, ge=0, le=64)
    pin_memory: bool = False

    def describe(self) -> DataInfo:
        raise NotImplementedError


class SyntheticAudioParams(DatasetParams):
    """Sine mixtures with noise, mu-law encoded: next-sample prediction is learnable."""

    num_samples: int = Field(256, ge=2, le=1_000_000)
    length: int = Field(1024, ge=8, le=1_000_000)
    mu: int = Field(256, ge=2, le=65_536)

    def describe(self) -> DataInfo:
        return DataInfo(kind="audio", mu=self.mu, input_shape=(self.length,))


class SyntheticImagesParams(DatasetParams):
    """Images whose class sets a per-class mean pattern under noise: learnable."""

    num_samples: int = Field(256, ge=2, le=1_000_000)
    image_size: int = Field(32, ge=4, le=512)
    num_classes: int = Field(10, ge=2, le=10_000)

    def describe(self) -> DataInfo:
        shape = (3, self.image_size, self.image_size)
        return DataInfo(kind="classification", num_classes=self.num_classes, input_shape=shape)


class DigitsParams(DatasetParams):
    """scikit-learn's 8x8 handwritten digits (1,797 images), shipped inside the package."""

    def describe(self) -> DataInfo:
        return DataInfo(kind="classification", num_classes=10, input_shape=(1, 8, 8))


DATASETS: dict[str, type[DatasetParams]] = {
    "synthetic-audio": SyntheticAudioParams,
    "synthetic-images": SyntheticImagesParams,
    "digits": DigitsParams,
}


# ---- models -----------------------------------------------------------------------------------


class ModelParams(StrictModel):
    def resolve(self, data: DataInfo) -> "ModelParams":
        """Fill the params that describe the data from the dataset; refuse a mismatch."""
        raise NotImplementedError


class WaveNetParams(ModelParams):
    mu: int | None = Field(None, ge=2, le=65_536)
    n_residue: int = Field(32, ge=1, le=1024)
    n_skip: int = Field(64, ge=1, le=4096)
    dilation_depth: int = Field(8, ge=1, le=16)
    n_repeat: int = Field(2, ge=1, le=16)

    def resolve(self, data: DataInfo) -> "WaveNetParams":
        if data.kind != "audio":
            raise SpecError("model.name", "wavenet needs an audio dataset")
        if self.mu is not None and self.mu != data.mu:
            raise SpecError("model.params.mu", f"is {self.mu} but the dataset is encoded with mu={data.mu}")
        return self.model_copy(update={"mu": data.mu})


class MlpParams(ModelParams):
    hidden: list[int] = Field(default_factory=lambda: [64], max_length=16)
    in_features: int | None = Field(None, ge=1)
    num_classes: int | None = Field(None, ge=2)

    def resolve(self, data: DataInfo) -> "MlpParams":
        if data.kind != "classification":
            raise SpecError("model.name", "mlp needs a classification dataset")
        if any(width < 1 or width > 65_536 for width in self.hidden):
            raise SpecError("model.params.hidden", "each width must be between 1 and 65536")
        in_features = 1
        for size in data.input_shape or ():
            in_features *= size
        for name, ours, theirs in (("in_features", self.in_features, in_features),
                                   ("num_classes", self.num_classes, data.num_classes)):
            if ours is not None and ours != theirs:
                raise SpecError(f"model.params.{name}", f"is {ours} but the dataset gives {theirs}")
        return self.model_copy(update={"in_features": in_features, "num_classes": data.num_classes})


MODELS: dict[str, type[ModelParams]] = {
    "wavenet": WaveNetParams,
    "mlp": MlpParams,
}
