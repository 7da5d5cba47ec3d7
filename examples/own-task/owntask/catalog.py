"""The entries trainjobs reads. A job names them as "owntask.catalog:REGRESSOR" and so on, with
`code` set (a code archive of this folder), or as "regressor" once installed as a plugin. Each
model entry names its loss and the figures it returns besides "loss". No torch here: the API and
the worker validate params with this module before any rank starts."""

from pydantic import Field

from trainjobs.contract.catalog import DatasetEntry, DatasetParams, ModelEntry, ModelParams


class LinearTargetsParams(DatasetParams):
    num_samples: int = Field(1024, ge=4, le=10_000_000)
    dims: int = Field(8, ge=1, le=4096)
    noise: float = Field(0.1, ge=0.0, le=100.0)


class RegressorParams(ModelParams):
    dims: int = Field(8, ge=1, le=4096, description="the dataset's dims")
    hidden: int = Field(32, ge=1, le=4096)


class MaskedSequencesParams(DatasetParams):
    num_samples: int = Field(1024, ge=4, le=10_000_000)
    max_length: int = Field(32, ge=2, le=4096)
    vocabulary: int = Field(16, ge=2, le=100_000)


class TokenModelParams(ModelParams):
    vocabulary: int = Field(16, ge=2, le=100_000, description="the dataset's vocabulary")
    width: int = Field(32, ge=1, le=4096)


REGRESSOR = ModelEntry(
    RegressorParams,
    "owntask.regression:regressor",
    "an MLP regressor: mse, and its mae",
    loss="owntask.regression:loss",
    metrics=("mae",),
)
LINEAR_TARGETS = DatasetEntry(LinearTargetsParams, "owntask.regression:linear_targets", "y = x·w + noise, dict items")
TOKEN_MODEL = ModelEntry(
    TokenModelParams,
    "owntask.sequences:token_model",
    "a per-token classifier with a token-weighted loss",
    loss="owntask.sequences:loss",
    metrics=("token_accuracy",),
)
MASKED_SEQUENCES = DatasetEntry(MaskedSequencesParams, "owntask.sequences:masked_sequences", "padded token sequences")
