"""Section 12: the sharing rule's cost, and how it grows with the queue."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table
from bench.sharing_rule import SIZES


def headlines(results: dict[str, Any]) -> list[Headline]:
    found = results["sharing_rule"]
    return [
        Headline("one sharing decision at 10,000 queued jobs", f"**{found['10000_decision']['ms']} ms**", "≤ 10 ms")
    ]


def render(results: dict[str, Any]) -> list[str]:
    found = results["sharing_rule"]
    return [
        f"`trainjobs.jobs.sharing.decide` over {found['running']} running jobs of {found['owners']} owners on "
        f"{found['workers']} workers of 8 devices, every running job old enough to be preempted, random sizes and "
        "priorities (bench/sharing_rule.py); best of 5 runs, the rule alone. *Decision*: as a worker or the leader "
        "decides (it stops once nothing more can start or be preempted); *whole queue*: as the waiting reasons and "
        "`GET /v1/queue` need it.",
        "",
        *table(
            ["queued jobs", "decision", "jobs looked at", "preemptions", "whole queue"],
            [
                [
                    f"{size:,}",
                    f"**{found[f'{size}_decision']['ms']} ms**",
                    str(found[f"{size}_decision"]["looked_at"]),
                    str(found[f"{size}_decision"]["preemptions"]),
                    f"{found[f'{size}_whole']['ms']} ms",
                ]
                for size in SIZES
            ],
        ),
        "",
        "How it grows: a decision looks at the queue only until nothing more can start or be preempted, so its cost "
        "follows the free devices and the preemptions it makes, not the queue's length (it still reads every queued "
        "job once to group them by priority and owner: O(n), then O(k log owners) for the k jobs looked at). The "
        "whole queue costs O(n log owners).",
        "",
    ]
