"""BENCHMARKS.md, written from bench/results.json: a summary table of the headline figures, the
runs the figures came from (each once, by letter), then each section in number order. Each
benchmark's section is its own module here, bench/report/<name>.py, with `render(results)` (the
section's lines) and `headlines(results)` (its rows of the summary table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

INTRO = (
    "Figures, not pass/fail: on a shared 2-core machine the same run differs by 10 to 15% from one try to the "
    "next, and machines of the same kind differ more (their CPUs do). A ratio counts only from runs interleaved "
    "in one session (taking turns, section 1c). `make bench` runs the benchmarks marked in bench/catalogue.py; "
    "`python -m bench NAME` runs one, and keeps the others' last figures."
)


@dataclass(frozen=True)
class Headline:
    figure: str
    value: str
    goal: str  # the anchor or goal it is read against ("–": none)


def render(results: dict[str, Any]) -> str:
    from bench.catalogue import CATALOGUE

    runs = _runs(results)
    sections = [b for b in CATALOGUE if b.name == "gpu" or any(key in results for key in b.keys)]
    lines = [
        "# Benchmarks",
        "",
        INTRO,
        "",
        "| figure | value | anchor or goal | section | run |",
        "|---|---|---|---|---|",
    ]
    for benchmark in sections:
        run = runs.get(_measured(results, benchmark.name), "–")
        for row in benchmark.report.headlines(results):
            lines.append(f"| {row.figure} | {row.value} | {row.goal} | §{benchmark.section} | {run} |")
    lines += ["", "Runs:", ""]
    notes = results.get("run_notes", {})  # a run's measured line -> what else ran beside it, written by hand
    lines += [
        f"- **{letter}**: {measured}" + (f" {notes[measured]}" if measured in notes else "")
        for measured, letter in runs.items()
    ]
    lines.append("")
    for benchmark in sections:
        letter = runs.get(_measured(results, benchmark.name))
        lines += [f"## {benchmark.section}. {benchmark.title}", ""]
        if letter:
            how = benchmark.measured_by or benchmark.name
            lines += [f"Run {letter} (`python -m bench {how}`).", ""]
        lines += benchmark.report.render(results)
    return "\n".join(lines)


def _measured(results: dict[str, Any], name: str) -> str | None:
    from bench.catalogue import BY_NAME

    measured = results.get("measured", {})
    return measured.get(name) or measured.get(BY_NAME[name].measured_by or "")


def _runs(results: dict[str, Any]) -> dict[str, str]:
    """Each distinct run, once, lettered in the order the sections name them."""
    from bench.catalogue import CATALOGUE

    letters: dict[str, str] = {}
    for benchmark in CATALOGUE:
        measured = _measured(results, benchmark.name)
        if measured and measured not in letters:
            letters[measured] = chr(ord("A") + len(letters))
    return letters


def table(header: list[str], rows: list[list[object]]) -> list[str]:
    """A markdown table."""
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows],
    ]
