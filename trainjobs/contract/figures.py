"""An epoch's figures in the order every table shows them: the CLI's `metrics`, the metrics CSV
and the dashboard's choice of chart. A figure is a `train_`/`val_` value (the built-in ones first,
then a model's own in the order it reports them); the epoch's other fields follow."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

BUILT_IN_FIRST = ("train_loss", "val_loss", "val_accuracy")
EPOCH_FIELDS = (
    "lr",
    "epoch_seconds",
    "samples_per_second",
    "data_wait_fraction",
    "peak_memory_bytes",
    "gpu_utilization",
)


def is_figure(name: str) -> bool:
    return name.startswith(("train_", "val_"))


def figure_names(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every figure any of the rows reports (a value that is not None), in table order."""
    seen: dict[str, None] = {}
    for row in rows:
        for name, value in row.items():
            if is_figure(name) and value is not None:
                seen.setdefault(name)
    own = [name for name in seen if name not in BUILT_IN_FIRST]
    trains, vals = (
        [name for name in own if name.startswith("train_")],
        [name for name in own if name.startswith("val_")],
    )
    return [name for name in BUILT_IN_FIRST if name in seen] + trains + vals


def table_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """epoch, the figures, the epoch's fields, then any other key (sorted): a CSV's header."""
    figures = figure_names(rows)
    known = {"epoch", *figures, *EPOCH_FIELDS}
    others = sorted({name for row in rows for name in row if name not in known and not is_figure(name)})
    return ["epoch", *figures, *EPOCH_FIELDS, *others]
