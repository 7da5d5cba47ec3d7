"""The catalog of models and datasets, as far as the service needs to know them: their params.

Each entry pairs a params class (pydantic, torch-free: the API validates a spec with it) with
the dotted name of the builder that the worker imports to build the thing. Built-ins are listed
in `trainjobs.contract.builtins`; installed packages add entries through the entry-point groups
`trainjobs.models` and `trainjobs.datasets`, each entry point naming a `ModelEntry` or
`DatasetEntry` object. A request only ever names an entry; code is imported only from what is
installed, never from a path a request supplies.

A dataset says what it holds (`DataInfo`); a model fills its data-describing params (`mu`,
`num_classes`, input size) from that when the spec omits them.
"""

from __future__ import annotations

import logging
import posixpath
import re
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)


class StrictModel(BaseModel):
    """Unknown fields are refused, no value is coerced from another type ("3" is not 3), and
    every float is finite: Python's JSON reads 1e999 as infinity and accepts NaN, neither of
    which is JSON that SQL, the stream or a client can take back."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class DataInfo(BaseModel):
    """What a dataset holds, for the model params that default to it. None: known only once the
    worker reads the files (a folder's classes), in which case the worker fills it."""

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


def _inside_data_root(path: str) -> str:
    normal = posixpath.normpath(path)
    if path.startswith("/") or normal == ".." or normal.startswith("../"):
        raise ValueError("must be a path inside TRAINJOBS_DATA_ROOT (relative, without leading '..')")
    return normal


DataPath = Annotated[str, Field(min_length=1, max_length=1024), AfterValidator(_inside_data_root)]
"""A path relative to TRAINJOBS_DATA_ROOT. Checked here lexically (the API may run on another host
than the data); the worker checks again after resolving symlinks."""


class DatasetParams(StrictModel):
    val_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    seed: int = Field(0, ge=0)
    num_workers: int = Field(0, ge=0, le=64)
    pin_memory: bool = False

    def describe(self) -> DataInfo:
        raise NotImplementedError


class ModelParams(StrictModel):
    def resolve(self, data: DataInfo) -> ModelParams:
        """Fill the params that describe the data from the dataset; refuse a mismatch."""
        return self


# What the trainer's own loss (cross-entropy on (input, target) pairs) reports each epoch.
BUILT_IN_FIGURES = ("train_loss", "val_loss", "val_accuracy")
FIGURE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
MAX_TASK_METRICS = 16


@dataclass(frozen=True)
class ModelEntry:
    """`loss` and `metrics`: the model's own task (docs/own-code.md, "Your own task"). `loss`
    names a function `loss(model, batch)`; `metrics` the values it returns besides "loss";
    `val_metrics` a function returning torchmetrics objects by name (a subset of `metrics`),
    updated over the validation set and synced over the ranks at its end."""

    params: type[ModelParams]
    builder: str  # "package.module:function", called with the params dict
    description: str = ""
    channels_last: bool = False  # convolutional on images: channels_last memory on cuda
    loss: str | None = None  # "package.module:function"; None: the trainer's cross-entropy
    metrics: tuple[str, ...] = ()
    val_metrics: str | None = None  # "package.module:function" () -> {name: torchmetrics.Metric}

    def __post_init__(self) -> None:
        if self.loss is None and (self.metrics or self.val_metrics):
            raise ValueError("a ModelEntry's metrics come from its loss: give loss= too")
        if not isinstance(self.metrics, tuple) or len(self.metrics) > MAX_TASK_METRICS:
            raise ValueError(f"a ModelEntry's metrics are a tuple of at most {MAX_TASK_METRICS} names")
        for name in self.metrics:
            if not isinstance(name, str) or not FIGURE_NAME.match(name) or name == "loss":
                raise ValueError(f"metric name {name!r}: a name is [a-z][a-z0-9_]{{0,39}}, and not 'loss'")
        if len(set(self.metrics)) != len(self.metrics):
            raise ValueError(f"a ModelEntry's metrics repeat a name: {self.metrics}")

    @property
    def figures(self) -> tuple[str, ...]:
        """The figures each epoch of this model reports (what an objective may name). A
        torchmetrics name is a validation figure only; the API does not know which names those
        are (they come from running code), so it accepts both prefixes for every name."""
        if self.loss is None:
            return BUILT_IN_FIGURES
        names = ("loss", *self.metrics)
        return tuple(f"{phase}_{name}" for phase in ("train", "val") for name in names)


@dataclass(frozen=True)
class DatasetEntry:
    params: type[DatasetParams]
    builder: str  # "package.module:function", called with (params, data_root)
    description: str = ""


@cache
def models() -> dict[str, ModelEntry]:
    from trainjobs.contract.builtins import MODELS

    return {**MODELS, **_plugins("trainjobs.models", ModelEntry, MODELS)}


@cache
def datasets() -> dict[str, DatasetEntry]:
    from trainjobs.contract.builtins import DATASETS

    return {**DATASETS, **_plugins("trainjobs.datasets", DatasetEntry, DATASETS)}


Entry = TypeVar("Entry", ModelEntry, DatasetEntry)


def _plugins(group: str, kind: type[Entry], builtins: dict[str, Entry]) -> dict[str, Entry]:
    found: dict[str, Entry] = {}
    for point in entry_points(group=group):
        if point.name in builtins:
            log.warning("plugin %s:%s ignored: the name is built in", group, point.name)
            continue
        try:
            entry = point.load()
        except Exception:
            log.exception("plugin %s:%s failed to load; skipped", group, point.name)
            continue
        if not isinstance(entry, kind):
            log.warning("plugin %s:%s is not a %s; skipped", group, point.name, kind.__name__)
            continue
        found[point.name] = entry
    return found


@cache
def describe_params(params: type[BaseModel]) -> list[dict[str, Any]]:
    """Each param's name, JSON type, default and description, for GET /v1/models and /datasets."""
    schema = params.model_json_schema()
    described = []
    for name, prop in schema.get("properties", {}).items():
        json_type = prop.get("type") or " | ".join(
            option.get("type", "?") for option in prop.get("anyOf", []) if option.get("type") != "null"
        )
        described.append(
            {
                "name": name,
                "type": json_type,
                "default": prop.get("default"),
                "required": name in schema.get("required", []),
                "description": prop.get("description"),
            }
        )
    return described
