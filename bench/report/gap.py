"""Section 1d: one configuration taken apart, to find where a shortfall lies."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table


def headlines(results: dict[str, Any]) -> list[Headline]:
    return []


def render(results: dict[str, Any]) -> list[str]:
    gap = results["gap"]
    config = gap["configuration"]
    rows = []
    for row in gap["rows"]:
        low, high = row["interval_95"]
        spread = "–" if row["spread_of_pairs"] is None else f"{100 * row['spread_of_pairs']:.1f}%"
        offsets = ", ".join(f"{offset:+.1f}" for offset in row.get("offsets_s", [])) or "–"
        rows.append(
            [row["part"], row["pairs"], f"**{row['geometric_mean']}**", f"{low} – {high}", spread,
             ", ".join(map(str, row["pair_ratios"])), offsets]
        )  # fmt: skip
    return [
        f"{config['ranks']} rank, {config['precision']}, accumulation {config['accumulation']} ({gap['clips']} "
        "clips), section 1c's most consistent shortfall while its jobs were posted at once. Each part takes "
        "turns against a fresh plain loop as in section 1c, in passes over the parts. *fork server*: the plain "
        "loop itself, its ranks forked from a fork server warmed as a service launcher warms its own (preloads, "
        "heap settings). *trainjobs train*: the service's launcher, fork server, ranks and trainer started from "
        "the shell, with the worker's threads per rank (`python -m bench.support.local_trainer`). *+ idle "
        "stack*: the same, with the idle API and worker on its side (stopped and run with it). *service, posted "
        "at once*: the job through the whole service, posted as the plain loop starts. *service*: the same, "
        "posted once the plain loop's first step is done (as in section 1c). *Offsets*: how long after the plain "
        "loop's timed epoch the part's began, per pair.",
        "",
        *table(
            [
                "part / plain",
                "pairs",
                "geometric mean",
                "95% interval",
                "spread of one pair",
                "per pair",
                "offsets (s)",
            ],
            rows,
        ),  # fmt: skip
        "",
    ]
