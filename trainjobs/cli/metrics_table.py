"""`trainjobs metrics JOB`: a row per epoch, a column per figure (the built-in ones, then the
model's own), then the learning rate and the epoch's speed. On a terminal too narrow for every
figure the last ones are left out, saying so; `--figures` chooses which to show."""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any

from trainjobs.cli.output import print_json, print_table
from trainjobs.cli.registry import Commands, UsageError, add_json, client_for
from trainjobs.contract.figures import figure_names


def register(commands: Commands) -> None:
    metrics = commands.add("metrics", show_metrics, "print a job's per-epoch metrics: a column per figure", client=True)
    metrics.add_argument("job_id")
    metrics.add_argument(
        "--figures", metavar="NAME,...", help="the figures to show, comma-separated: val_loss,val_mae [all that fit]"
    )
    add_json(metrics)


def show_metrics(args: argparse.Namespace) -> None:
    with client_for(args) as client:
        rows = [row.model_dump(mode="json") for row in client.metrics(args.job_id)]
    if args.json:
        print_json({"items": rows})
        return
    print_metrics(rows, args.figures)


TAIL = ("LR", "SECONDS", "SAMPLES/S")
TAIL_WIDTH = 30  # what LR, SECONDS and SAMPLES/S take with their gaps
CELL = 8  # a figure's cell: 4 decimals and a sign or a gap


def chosen_figures(rows: list[dict[str, Any]], asked: str | None) -> list[str]:
    """The figures to show: those asked for (each must be one the job reports), else all."""
    reported = figure_names(rows)
    if not asked:
        return reported
    chosen = [name.strip() for name in asked.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in reported]
    if unknown:
        raise UsageError(f"--figures {', '.join(unknown)}: the job reports {', '.join(reported) or 'none yet'}")
    return chosen


def fitting(figures: list[str], width: int) -> list[str]:
    """As many of the figures, in order, as a terminal `width` wide shows beside the epoch and the tail."""
    room, shown = width - len("EPOCH  ") - TAIL_WIDTH, []
    for name in figures:
        room -= max(len(name), CELL) + 2
        if room < 0:
            break
        shown.append(name)
    return shown


def print_metrics(rows: list[dict[str, Any]], asked: str | None) -> None:
    figures = chosen_figures(rows, asked)
    if sys.stdout.isatty():
        shown = fitting(figures, shutil.get_terminal_size().columns)
        if len(shown) < len(figures):
            left_out = figures[len(shown) :]
            print(
                f"{len(left_out)} figures left out ({', '.join(left_out)}): --figures NAME,... chooses", file=sys.stderr
            )
        figures = shown
    columns = ("EPOCH", *(name.upper() for name in figures), *TAIL)
    print_table(
        columns,
        (
            (
                row["epoch"],
                *(f"{row[name]:.4f}" if row.get(name) is not None else "-" for name in figures),
                f"{row['lr']:.3g}",
                f"{row['epoch_seconds']:.2f}",
                f"{row['samples_per_second']:.1f}",
            )
            for row in rows
        ),
        right=columns,
    )
