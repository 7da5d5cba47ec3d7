"""The job spec: the body of `POST /v1/jobs`, and what the worker trains.

`JobSpec.model_validate` checks the structure (unknown fields, ranges, types without coercion)
and then the catalog: the model and dataset exist, their params are valid, and the model params
that describe the data are filled from the dataset. A validated spec therefore has every default
filled, which is what the job document shows back.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from trainjobs.contract import catalog
from trainjobs.contract.catalog import SpecError, StrictModel
from trainjobs.contract.code import CODE_ID, is_entry_reference

# Characters that would act on a terminal or reorder the text around them where a name is shown:
# C0/C1 controls (escape sequences among them) and the bidirectional overrides and isolates.
UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _printable(text: str) -> str:
    if UNPRINTABLE.search(text):
        raise ValueError("must not contain control or bidirectional-override characters")
    return text


PrintableText = Annotated[str, AfterValidator(_printable)]

# A label key as Kubernetes spells a name segment: lower-case letters, digits and . _ / -, starting
# and ending with a letter or digit, so that `label=k=v` in a query string never needs quoting.
LABEL_KEY = re.compile(r"[a-z0-9](?:[a-z0-9._/-]{0,61}[a-z0-9])?")
MAX_LABELS = 32
MAX_LABEL_VALUE = 256


def _labels(labels: dict[str, str]) -> dict[str, str]:
    if len(labels) > MAX_LABELS:
        raise ValueError(f"at most {MAX_LABELS} labels, got {len(labels)}")
    for key, value in labels.items():
        if not LABEL_KEY.fullmatch(key):
            raise ValueError(
                f"label key {key!r} must be 1-63 characters of a-z 0-9 . _ / -, "
                "starting and ending with a letter or digit"
            )
        if len(value) > MAX_LABEL_VALUE:
            raise ValueError(f"label {key!r}: a value is at most {MAX_LABEL_VALUE} characters")
        if UNPRINTABLE.search(value):
            raise ValueError(f"label {key!r}: a value must not contain control or bidirectional-override characters")
    return labels


Labels = Annotated[dict[str, str], AfterValidator(_labels)]


class ModelRef(StrictModel):
    name: str = Field(min_length=1, max_length=128)
    params: dict[str, Any] = Field(default_factory=dict)


class DataRef(StrictModel):
    name: str = Field(min_length=1, max_length=128)
    params: dict[str, Any] = Field(default_factory=dict)


class OptimizerSpec(StrictModel):
    name: Literal["sgd", "adamw"]
    lr: float = Field(gt=0.0, allow_inf_nan=False)
    momentum: float = Field(0.9, ge=0.0, lt=1.0)
    weight_decay: float = Field(0.0, ge=0.0)


class SchedulerSpec(StrictModel):
    """Per-step schedule over fractional epochs: linear warm-up, then cosine to 0 or step decay.

    `step_size` and `gamma` belong to "step" alone: they are filled (1 and 0.1) only there, so an
    omitted scheduler reads back as `{"name": "none", "warmup_epochs": 0}` as the contract says.
    """

    name: Literal["none", "cosine", "step"] = "none"
    warmup_epochs: int = Field(0, ge=0)
    step_size: int | None = Field(None, ge=1, description="step: epochs between decays [1]")
    gamma: float | None = Field(None, gt=0.0, le=1.0, description="step: factor at each decay [0.1]")

    @model_validator(mode="after")
    def _fill_step_params(self) -> SchedulerSpec:
        if self.name == "step":
            self.step_size = self.step_size or 1
            self.gamma = self.gamma or 0.1
        elif self.step_size is not None or self.gamma is not None:
            raise ValueError("step_size and gamma apply to the 'step' scheduler only")
        return self

    @model_serializer(mode="wrap")
    def _drop_unset_step_params(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}


class EarlyStoppingSpec(StrictModel):
    patience: int = Field(ge=1)
    min_delta: float = Field(0.0, ge=0.0)


class ObjectiveSpec(StrictModel):
    """The figure that says which epoch is best: early stopping watches it and the best checkpoint
    is the best by it."""

    metric: str = Field("val_loss", pattern=r"^(train|val)_[a-z][a-z0-9_]{0,39}$")
    mode: Literal["min", "max"] = "min"

    def improves(self, value: float, best: float, min_delta: float) -> bool:
        """Whether `value` beats `best` by more than `min_delta` in this objective's direction."""
        return value < best - min_delta if self.mode == "min" else value > best + min_delta

    @property
    def worst(self) -> float:
        """What any first value beats."""
        return math.inf if self.mode == "min" else -math.inf


class CheckpointPolicy(StrictModel):
    every_epochs: int = Field(1, ge=1)
    keep_last: int = Field(3, ge=1)


EXAMPLE_SPEC: dict[str, Any] = {
    "name": "wavenet-demo",
    "labels": {"team": "speech", "sweep": "12"},
    "model": {"name": "wavenet", "params": {"n_residue": 16, "n_skip": 32, "dilation_depth": 6, "n_repeat": 2}},
    "data": {"name": "synthetic-audio", "params": {"num_samples": 256, "length": 512, "mu": 64}},
    "device": "cpu",
    "gpus": 2,
    "epochs": 3,
    "batch_size": 8,
    "optimizer": {"name": "adamw", "lr": 0.002},
    "lr_scaling": "none",
    "scheduler": {"name": "cosine", "warmup_epochs": 1},
    "checkpoint": {"every_epochs": 1, "keep_last": 3},
}


class JobSpec(StrictModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [EXAMPLE_SPEC]})

    name: PrintableText | None = Field(None, min_length=1, max_length=128)
    labels: Labels = Field(
        default_factory=dict, description="for grouping and search (`GET /v1/jobs?label=k=v`): at most 32"
    )
    model: ModelRef
    data: DataRef
    device: Literal["cuda", "cpu"] = "cuda"
    gpus: int = Field(1, ge=1, le=64)
    nodes: int = Field(1, ge=1, le=64, description="hosts the job spans: gpus / nodes ranks on each of `nodes` workers")
    strategy: Literal["ddp", "dp"] = "ddp"
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    accumulation_steps: int = Field(1, ge=1, le=1024)
    epochs: int = Field(ge=1, le=100_000)
    batch_size: int = Field(ge=1, le=1_000_000)
    optimizer: OptimizerSpec
    lr_scaling: Literal["linear", "sqrt", "none"] = "linear"
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)
    objective: ObjectiveSpec = Field(
        default_factory=ObjectiveSpec,
        description="the figure that says which epoch is best (early stopping, the best checkpoint): "
        "val_loss, val_accuracy or train_loss for a built-in or installed model",
    )
    early_stopping: EarlyStoppingSpec | None = None
    checkpoint: CheckpointPolicy = Field(default_factory=CheckpointPolicy)
    resume_from: str | None = Field(None, min_length=1, max_length=200)
    init_from: str | None = Field(None, min_length=1, max_length=200)
    seed: int = Field(0, ge=0, le=2**32 - 1)
    grad_clip_norm: float | None = Field(None, gt=0.0)
    max_runtime_seconds: int | None = Field(None, ge=1)
    priority: int = Field(
        50, ge=0, le=100, description="higher starts first and may preempt lower; at most the owner's max_priority"
    )
    preemptible: bool = Field(
        True, description="false: never preempted; only owners allowed to (allow_non_preemptible) may submit it"
    )
    code: str | None = Field(
        None,
        pattern=CODE_ID.pattern,
        description="a code archive this job's owner uploaded (POST /v1/code); with it, model.name and data.name "
        "may name an entry inside it: package.module:attribute",
    )

    @model_validator(mode="after")
    def _check_against_catalog(self) -> JobSpec:
        try:
            self._resolve_catalog()
            self._check_device_rules()
            self._check_effective_values()
        except SpecError as error:
            raise ValueError(str(error)) from None
        return self

    def _resolve_catalog(self) -> None:
        """Built-in and installed entries are checked here, their params validated and filled. An
        entry of the job's own code (`package.module:attribute`, with `code` set) is not: nothing
        here imports a request's code. Its params are checked by the job's ranks, in their sandbox."""
        datasets, models = catalog.datasets(), catalog.models()
        data_info = None
        if not self.from_code(self.data.name):
            if self.data.name not in datasets:
                raise SpecError("data.name", f"unknown dataset {self.data.name!r}; known: {sorted(datasets)}")
            data_params = validate_params(datasets[self.data.name].params, self.data.params, "data.params")
            try:
                data_info = data_params.describe()
            except NotImplementedError:  # a plugin's dataset that does not say what it holds
                data_info = None
            self.data.params = data_params.model_dump(mode="json")
        if not self.from_code(self.model.name):
            if self.model.name not in models:
                raise SpecError("model.name", f"unknown model {self.model.name!r}; known: {sorted(models)}")
            model_params = validate_params(models[self.model.name].params, self.model.params, "model.params")
            if data_info is not None:  # else the worker fills them from the dataset it builds
                model_params = model_params.resolve(data_info)
            self.model.params = model_params.model_dump(mode="json")
            figures = models[self.model.name].figures  # a code model's: its ranks check it
            if self.objective.metric not in figures:
                raise SpecError(
                    "objective.metric",
                    f"model {self.model.name!r} reports {', '.join(figures)}; not {self.objective.metric!r}",
                )

    def from_code(self, name: str) -> bool:
        """Whether `name` is an entry of the job's own code archive."""
        return self.code is not None and is_entry_reference(name)

    def _check_device_rules(self) -> None:
        if self.device == "cpu" and self.precision == "fp16":
            raise SpecError("precision", "fp16 needs device 'cuda'; on cpu use 'bf16' or 'fp32'")
        if self.strategy == "dp" and self.device != "cuda":
            raise SpecError("strategy", "'dp' (nn.DataParallel) runs on cuda only; use 'ddp' on cpu")
        if self.gpus % self.nodes:
            raise SpecError("nodes", f"gpus ({self.gpus}) must divide evenly over nodes ({self.nodes})")
        if self.nodes > 1 and self.strategy == "dp":
            raise SpecError("nodes", "'dp' (nn.DataParallel) runs in one process on one host; use 'ddp' across nodes")
        if self.resume_from and self.init_from:
            raise SpecError("init_from", "give either resume_from or init_from, not both")

    def _check_effective_values(self) -> None:
        """What the fields make together must be finite too: each field alone may be (1e308), and
        scaled by gpus x accumulation_steps the learning rate would not be."""
        if not math.isfinite(self.effective_lr):
            raise SpecError(
                "optimizer.lr",
                f"scaled by lr_scaling {self.lr_scaling!r} over {self.gpus * self.accumulation_steps} "
                "(gpus x accumulation_steps) it is not a finite number",
            )

    # ---- what the spec implies ----------------------------------------------------------------

    @property
    def world_size(self) -> int:
        """DDP ranks. DataParallel runs one process that drives all `gpus`."""
        return 1 if self.strategy == "dp" else self.gpus

    @property
    def ranks_per_node(self) -> int:
        return self.world_size // self.nodes

    @property
    def devices_per_node(self) -> int:
        return devices_per_node(self.gpus, self.nodes)

    @property
    def global_batch_size(self) -> int:
        return global_batch_size(self.batch_size, self.gpus, self.accumulation_steps)

    @property
    def effective_lr(self) -> float:
        return scaled_lr(self.optimizer.lr, self.lr_scaling, self.gpus * self.accumulation_steps)


def devices_per_node(gpus: int, nodes: int) -> int:
    """Devices a job leases on each of its nodes' workers. DataParallel runs one rank but drives
    every GPU it asks for, so this counts `gpus`, not ranks."""
    return gpus // nodes


def global_batch_size(batch_size: int, gpus: int, accumulation_steps: int) -> int:
    """Samples per optimizer step over the whole job."""
    return batch_size * gpus * accumulation_steps


def scaled_lr(base_lr: float, rule: str, k: int) -> float:
    """The learning rate for k = gpus x accumulation_steps times the base batch (Goyal et al.:
    linear; Krizhevsky: sqrt)."""
    return base_lr * {"linear": k, "sqrt": math.sqrt(k), "none": 1}[rule]


ParamsT = TypeVar("ParamsT", bound=BaseModel)


def validate_params(params_type: type[ParamsT], params: dict[str, Any], field: str) -> ParamsT:
    try:
        return params_type.model_validate(params)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise SpecError(f"{field}.{where}" if where else field, first["msg"]) from None
