"""`trainjobs metrics`' table (trainjobs/cli/metrics_table.py): a column per figure, the built-in
ones first; on a narrow terminal the last ones left out, saying so; --figures chooses."""

import pytest

from trainjobs.cli.metrics_table import chosen_figures, fitting, print_metrics
from trainjobs.cli.registry import UsageError

ROWS = [
    {"epoch": 1, "train_loss": 1.0, "val_loss": 2.0, "val_accuracy": None, "train_mae": 0.5, "val_mae": 0.25,
     "lr": 0.1, "epoch_seconds": 1.0, "samples_per_second": 10.0},
]  # fmt: skip


def test_every_reported_figure_is_a_column_the_built_in_first_and_a_null_one_left_out():
    assert chosen_figures(ROWS, None) == ["train_loss", "val_loss", "train_mae", "val_mae"]


def test_figures_asked_for_are_shown_in_the_order_asked_and_an_unknown_one_is_a_usage_error():
    assert chosen_figures(ROWS, "val_mae, train_loss") == ["val_mae", "train_loss"]
    with pytest.raises(UsageError, match="--figures val_f1: the job reports train_loss, val_loss, train_mae, val_mae"):
        chosen_figures(ROWS, "val_f1")


def test_a_narrow_terminal_shows_the_first_figures_that_fit():
    figures = [f"val_figure_{index}" for index in range(12)]
    assert fitting(figures, 10_000) == figures
    shown = fitting(figures, 80)
    assert 0 < len(shown) < len(figures) and shown == figures[: len(shown)]


def test_the_table_prints_a_cell_per_figure(capsys):
    print_metrics(ROWS, None)
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["EPOCH", "TRAIN_LOSS", "VAL_LOSS", "TRAIN_MAE", "VAL_MAE", "LR", "SECONDS", "SAMPLES/S"]
    assert row.split()[1:5] == ["1.0000", "2.0000", "0.5000", "0.2500"]
