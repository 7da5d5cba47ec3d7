"""Rank logs of a job's latest attempt, read from the run directory the workers write to."""

from __future__ import annotations

from collections import deque
from pathlib import Path


def tail_rank_logs(run_root: Path, job_id: str, attempt: int, tail: int | None) -> str:
    """Every rank's output, each line prefixed "[rank N] ", rank by rank; with `tail`, the last
    `tail` lines of each rank."""
    attempt_dir = (run_root / job_id / f"attempt{attempt}").resolve()
    if not attempt_dir.is_relative_to(run_root.resolve()) or not attempt_dir.is_dir():
        return ""
    lines: list[str] = []
    for path in sorted(attempt_dir.glob("rank*.log"), key=lambda p: int(p.stem.removeprefix("rank"))):
        rank = path.stem.removeprefix("rank")
        with open(path, errors="replace") as file:
            kept = deque(file, maxlen=tail) if tail else list(file)
        lines += [f"[rank {rank}] {line.rstrip(chr(10))}" for line in kept]
    return "\n".join(lines) + ("\n" if lines else "")
