"""Builds what a spec names, from the catalog's entries (built-in or installed plugins).

Builders are imported from the dotted names that installed entries declare; a request only
chooses among those names.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any

from torch import nn
from torch.utils.data import Dataset

from trainjobs.contract import catalog
from trainjobs.worker.trainer.data.split import split_train_val


def _import_builder(dotted: str):
    module, _, function = dotted.partition(":")
    return getattr(import_module(module), function)


def build_datasets(name: str, params: dict[str, Any], data_root: Path) -> tuple[Dataset, Dataset, Dataset]:
    """(full, train, validation) for a validated spec's dataset."""
    full = _import_builder(catalog.datasets()[name].builder)(params, data_root)
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
    return _import_builder(catalog.models()[name].builder)(filled)


def uses_channels_last(name: str) -> bool:
    return catalog.models()[name].channels_last
