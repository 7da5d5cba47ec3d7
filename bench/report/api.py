"""Section 4: the API under dashboard load (wrk)."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table


def headlines(results: dict[str, Any]) -> list[Headline]:
    return []


def render(results: dict[str, Any]) -> list[str]:
    return [
        *table(
            ["database", "jobs stored", "request", "clients", "req/s", "p50", "p99", "non-2xx/3xx"],
            [
                [
                    r["database"],
                    f"{r['jobs']:,}",
                    r["request"],
                    r["clients"],
                    r["requests_per_s"],
                    r["p50"],
                    r["p99"],
                    r["errors"],
                ]
                for r in results["api"]
            ],
        ),  # fmt: skip
        "",
        "Each cell is a 3-second wrk run; wrk, the API (one uvicorn process) and the database share the "
        "machine's 2 cores, so at 50 and 200 clients requests queue behind the API's 8 request threads "
        "(`TRAINJOBS_API_THREADS`). The table holds finished jobs and the newest 100 queued (no worker runs). "
        "Compare rows across table sizes: the same request costs about the same with 1,000 and 100,000 jobs "
        "(primary-key reads, keyset pages on `(owner, created_at, id)`, no COUNT or OFFSET).",
        "",
        "What had made p99 grow: anyio's 40 request threads, all holding the GIL in turn on 2 cores "
        "(PostgreSQL, 1,000 jobs, GET job at 200 clients, 2026-12-03: 238 req/s, p99 2.22 s with 40 threads; "
        "406 req/s, p99 0.62 s with 4), and the waiting-reason check, which read the 500 oldest queued jobs "
        "every 5 s and labelled at most those; it now asks SQL only for jobs whose reason differs and writes "
        "500 a pass.",
        "",
    ]
