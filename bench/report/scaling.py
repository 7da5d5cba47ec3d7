"""Section 2: scaling from 1 rank to 2 on this machine (measured by the overhead run)."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table


def headlines(results: dict[str, Any]) -> list[Headline]:
    return []


def render(results: dict[str, Any]) -> list[str]:
    return [
        "One thread per rank (the worker has a cpu slot per core, and each slot gets its share of the "
        "cores), as the plain loop is given.",
        "",
        *table(
            ["precision", "accumulation", "service", "plain DDP"],
            [
                [s["precision"], s["accumulation"], s["service_2_over_1"], s["plain_2_over_1"]]
                for s in results["scaling"]
            ],
        ),
        "",
    ]
