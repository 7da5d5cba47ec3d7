"""The plugin's catalog entries: torch-free, so the API can validate specs that name them."""

from pydantic import Field

from trainjobs.contract.catalog import DataInfo, DatasetEntry, DatasetParams, ModelEntry, ModelParams, SpecError


class BlobsParams(DatasetParams):
    num_samples: int = Field(200, ge=10)
    dims: int = Field(5, ge=1, le=100, description="features per sample")
    classes: int = Field(3, ge=2, le=20)

    def describe(self) -> DataInfo:
        return DataInfo(kind="classification", num_classes=self.classes, input_shape=(self.dims,))


class SleepyBlobsParams(BlobsParams):
    sleep_seconds: float = Field(0.001, ge=0.0, le=1.0, description="each sample takes this long to load")


class LogisticParams(ModelParams):
    in_features: int | None = None
    num_classes: int | None = None

    def resolve(self, data: DataInfo) -> "LogisticParams":
        if data.kind != "classification":
            raise SpecError("model.name", "logistic needs a classification dataset")
        return self.model_copy(update={"in_features": data.input_shape[0], "num_classes": data.num_classes})


LOGISTIC = ModelEntry(LogisticParams, "trainjobs_example_plugin.build:logistic", "a linear classifier")
BLOBS = DatasetEntry(BlobsParams, "trainjobs_example_plugin.build:blobs", "Gaussian blobs, one per class")
SLEEPY_BLOBS = DatasetEntry(SleepyBlobsParams, "trainjobs_example_plugin.build:sleepy_blobs", "blobs that load slowly")
LEAKY = ModelEntry(LogisticParams, "trainjobs_example_plugin.build:leaky", "a linear classifier that leaves traces")


# ---- tasks of their own (tasks.py) -----------------------------------------------------------------


class BrokenLossParams(LogisticParams):
    mode: str = "undeclared"


TASKS = "trainjobs_example_plugin.tasks"
F1_CLASSIFIER = ModelEntry(
    LogisticParams,
    "trainjobs_example_plugin.build:logistic",
    "a linear classifier with a macro F1",
    loss=f"{TASKS}:cross_entropy_with_f1",
    metrics=("f1",),
    val_metrics=f"{TASKS}:f1_metrics",
)
BROKEN_LOSS = ModelEntry(
    BrokenLossParams,
    f"{TASKS}:modal_linear",
    "a loss that breaks the contract",
    loss=f"{TASKS}:broken_loss",
    metrics=("declared",),
)
