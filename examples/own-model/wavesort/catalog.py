"""The entries trainjobs reads: what params each takes, and which function builds it.

A job names them as "wavesort.catalog:CLASSIFIER" and "wavesort.catalog:WAVES" (with `code`
set), or as "wave-classifier" and "waves" once the package is installed as a plugin.
This module imports no torch: the worker validates a job's params with it before any rank starts.
"""

from pydantic import Field

from trainjobs.contract.catalog import DataInfo, DatasetEntry, DatasetParams, ModelEntry, ModelParams, SpecError


class WavesParams(DatasetParams):
    num_samples: int = Field(512, ge=16, le=1_000_000)
    length: int = Field(128, ge=16, le=65_536, description="samples per wave")
    classes: int = Field(4, ge=2, le=64, description="one frequency band per class")
    noise: float = Field(0.3, ge=0.0, le=10.0, description="std of the Gaussian noise added")

    def describe(self) -> DataInfo:
        return DataInfo(kind="classification", num_classes=self.classes, input_shape=(1, self.length))


class ClassifierParams(ModelParams):
    channels: int = Field(16, ge=1, le=1024)
    layers: int = Field(3, ge=1, le=16, description="dilated convolutions, dilation 1, 2, 4, ...")
    num_classes: int | None = Field(None, description="from the dataset when omitted")

    def resolve(self, data: DataInfo) -> "ClassifierParams":
        if data.kind != "classification":
            raise SpecError("model.name", "the wave classifier needs a classification dataset")
        if self.num_classes is not None and self.num_classes != data.num_classes:
            raise SpecError("model.params.num_classes", f"the dataset has {data.num_classes} classes")
        return self.model_copy(update={"num_classes": data.num_classes})


CLASSIFIER = ModelEntry(ClassifierParams, "wavesort.build:classifier", "dilated 1-D convolutions over a wave")
WAVES = DatasetEntry(WavesParams, "wavesort.build:waves", "noisy sine waves; the class is the frequency band")
