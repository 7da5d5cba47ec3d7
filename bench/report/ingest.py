"""Section 5: metrics ingestion, from the Redis stream into SQL."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table


def headlines(results: dict[str, Any]) -> list[Headline]:
    slowest = min(results["ingest"], key=lambda row: row["events_per_s"])
    return [Headline("events persisted per second, slowest database", f"{slowest['events_per_s']}", "–")]


def render(results: dict[str, Any]) -> list[str]:
    return [
        *table(
            ["database", "events", "events/s persisted", "report-to-row lag p50", "max"],
            [
                [r["database"], r["events"], r["events_per_s"], f"{r['lag_ms_p50']} ms", f"{r['lag_ms_max']} ms"]
                for r in results["ingest"]
            ],
        ),
        "",
    ]
