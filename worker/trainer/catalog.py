"""Builds what a spec names: an entry of the catalog (built-in or an installed plugin), or, for a
job with its own code, an entry of its archive (`package.module:attribute`), which only a rank
imports, inside its sandbox, with the archive first on its import path.

An entry names its builder by a dotted name ("package.module:function"): built-ins and plugins
from what is installed, a code entry from its archive.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn
from torch.utils.data import Dataset

from trainjobs.contract import catalog
from trainjobs.contract.catalog import DataInfo, DatasetEntry, ModelEntry, SpecError
from trainjobs.contract.code import is_entry_reference
from trainjobs.contract.spec import DataRef, JobSpec, ModelRef, validate_params
from trainjobs.worker.trainer.data.split import split_train_val
from trainjobs.worker.trainer.task import Task, TaskError, cross_entropy

EntryT = TypeVar("EntryT", ModelEntry, DatasetEntry)


def _import_attribute(dotted: str):
    module, _, attribute = dotted.partition(":")
    return getattr(import_module(module), attribute)


def model_entry(name: str) -> ModelEntry:
    return _entry(name, catalog.models(), ModelEntry, "model.name")


def dataset_entry(name: str) -> DatasetEntry:
    return _entry(name, catalog.datasets(), DatasetEntry, "data.name")


def _entry(name: str, installed: dict[str, EntryT], kind: type[EntryT], field: str) -> EntryT:
    if not is_entry_reference(name):
        return installed[name]
    try:
        entry = _import_attribute(name)
    except (ImportError, AttributeError) as error:
        raise SpecError(field, f"{name!r} is not in the job's code: {error}") from None
    if not isinstance(entry, kind):
        raise SpecError(field, f"{name!r} is a {type(entry).__name__}, not a trainjobs {kind.__name__}")
    return entry


def resolve_code_entries(spec: JobSpec) -> JobSpec:
    """The spec with the params of its code entries validated and filled, as the API does for
    installed ones (SpecError names the bad param: the job fails saying so, and is not retried)."""
    if not (spec.from_code(spec.model.name) or spec.from_code(spec.data.name)):
        return spec
    data_params = validate_params(dataset_entry(spec.data.name).params, spec.data.params, "data.params")
    model_params = validate_params(model_entry(spec.model.name).params, spec.model.params, "model.params")
    info = _described(data_params)
    if info is not None:
        model_params = model_params.resolve(info)
    return spec.model_copy(
        update={
            "data": DataRef(name=spec.data.name, params=data_params.model_dump(mode="json")),
            "model": ModelRef(name=spec.model.name, params=model_params.model_dump(mode="json")),
        }
    )


def _described(params: Any) -> DataInfo | None:
    try:
        return params.describe()
    except NotImplementedError:  # a dataset of the job's own that does not say what it holds
        return None


def build_datasets(name: str, params: dict[str, Any], data_root: Path) -> tuple[Dataset, Dataset, Dataset]:
    """(full, train, validation) for a validated spec's dataset."""
    full = _import_attribute(dataset_entry(name).builder)(params, data_root)
    train, val = split_train_val(full, params["val_fraction"], params["seed"])
    return full, train, val


def build_model(name: str, params: dict[str, Any], dataset: Dataset | None = None) -> nn.Module:
    """Params the API could not know (a folder's classes, a packed file's mu) come from the
    dataset, which exposes them as attributes of the same name."""
    filled = {
        key: getattr(dataset, key, None) if value is None and dataset is not None else value
        for key, value in params.items()
    }
    missing = [key for key, value in filled.items() if value is None]
    if missing:
        raise ValueError(f"model.params {missing} are not given and the dataset does not say")
    return _import_attribute(model_entry(name).builder)(filled)


def uses_channels_last(name: str) -> bool:
    return model_entry(name).channels_last


def build_task(name: str, device: torch.device) -> Task:
    """The model's loss and the figures it reports: its entry's own, or the trainer's
    cross-entropy (train_loss; val_loss and val_accuracy)."""
    entry = model_entry(name)
    if entry.loss is None:
        return Task(cross_entropy, "the trainer's cross-entropy", ("loss",), ("loss", "accuracy"))
    try:
        function = _import_attribute(entry.loss)
        made = _import_attribute(entry.val_metrics)() if entry.val_metrics else {}
    except (ImportError, AttributeError) as error:
        raise SpecError("model.name", f"{name!r}: its loss or val_metrics cannot be imported: {error}") from None
    names = ("loss", *entry.metrics)
    unknown = sorted(set(made) - set(entry.metrics))
    if unknown:
        raise TaskError(f"{entry.val_metrics} made {unknown}, which the entry's metrics do not declare")
    train_names = tuple(figure for figure in names if figure not in made)
    return Task(function, entry.loss, train_names, names, {key: metric.to(device) for key, metric in made.items()})
