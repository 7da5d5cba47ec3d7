"""Following a job on the command line: one line per change; on a terminal, one bar that rich
redraws in place (only when something changed: no refresh thread), clipped to the terminal."""

from __future__ import annotations

import sys
from typing import Any


class Progress:
    """Epoch x of N with the last train and val loss, samples/s and an ETA from the epochs' pace;
    the step inside the running epoch; why a queued job waits; the stop reason at the end."""

    def __init__(self, interactive: bool, console: Any = None):
        self.interactive = interactive
        self.console = console  # a rich Console (tests give one); the terminal's by default
        self.last: str | None = None
        self._bar: Any = None
        self._task: Any = None

    def show(self, job: dict[str, Any]) -> None:
        text = summary(job)
        if text == self.last:
            return
        self.last = text
        if not self.interactive:
            print(f"{job['id']} {text_bar(job)} {text}", flush=True)
            return
        bar = self._bar or self._start(job["id"])
        bar.update(self._task, completed=job["epoch"], total=max(job["spec"]["epochs"], 1), description=text)
        bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()

    def _start(self, job_id: str) -> Any:
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn
        from rich.progress import Progress as Bar
        from rich.table import Column

        self._bar = Bar(
            TextColumn(job_id),
            BarColumn(bar_width=24),
            TextColumn("{task.description}", table_column=Column(no_wrap=True, overflow="ellipsis")),
            console=self.console or Console(file=sys.stdout),
            auto_refresh=False,
        )
        self._task = self._bar.add_task("", total=1)
        self._bar.start()
        return self._bar


def summary(job: dict[str, Any]) -> str:
    total, done = job["spec"]["epochs"], job["epoch"]
    text = f"epoch {done}/{total} {job['state']}"
    metrics = job.get("metrics")
    if metrics:
        text += (
            f" | train {metrics['train_loss']:.4f} val {metrics['val_loss']:.4f}"
            f" | {metrics['samples_per_second']:.0f} samples/s"
        )
        if job["state"] == "running" and done < total:
            text += f" | ETA {duration(metrics['epoch_seconds'] * (total - done))}"
    progress = job.get("progress")
    if progress and job["state"] == "running" and progress["step"] < progress["steps"]:
        text += f" | epoch {progress['epoch']} step {progress['step']}/{progress['steps']}"
        if progress.get("eta_seconds") is not None:
            text += f" ETA {duration(progress['eta_seconds'])}"
    if job.get("waiting_reason") and job["state"] == "queued":
        text += f" | waiting: {job['waiting_reason']}"
    if job["stop_reason"]:
        text += f" ({job['stop_reason']})"
    return text


def text_bar(job: dict[str, Any], width: int = 24) -> str:
    """`[######..................]`: the epochs done, for a log or a pipe."""
    total = job["spec"]["epochs"]
    filled = int(width * job["epoch"] / total) if total else width
    return f"[{'#' * filled}{'.' * (width - filled)}]"


def duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"
