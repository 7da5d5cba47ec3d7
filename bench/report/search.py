"""Section 8: job search at 100,000 jobs."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table


def headlines(results: dict[str, Any]) -> list[Headline]:
    labelled = [row for row in results["search"] if "label" in row["query"]]
    if not labelled:
        return []
    worst = max(labelled, key=lambda row: row["p99_ms"])
    return [Headline("a label filter at 100,000 jobs, p99 (slowest query)", f"{worst['p99_ms']} ms", "–")]


def render(results: dict[str, Any]) -> list[str]:
    return [
        "`GET /v1/jobs?…&limit=50` from one client, one request at a time (each figure is the request's own "
        "cost), 200 requests per row, against a real API process. One owner holds all the jobs (every filter "
        "walks that owner's history); labels: `team` one of 10 values, `sweep` one of 1,000, "
        "`priority=high` on 1%. PostgreSQL analysed after the bulk load, as autovacuum would have.",
        "",
        *table(
            ["database", "caller", "query", "items", "p50", "p99"],
            [
                [r["database"], r["caller"], f"`{r['query']}`", r["page"], f"{r['p50_ms']} ms", f"{r['p99_ms']} ms"]
                for r in results["search"]
            ],
        ),
        "",
        "A label filter walks the `job_labels` index of its rarest label (owner, key, value, created_at, id) "
        "newest first and stops after a page; with several labels the rarest is found by counting each "
        "label's index entries up to 1,000. `no filter` is the API's own cost for a page of 50 documents. "
        "A name is a substring that no index serves: it filters the owner's history newest first and "
        "scans all of it when fewer than a page match (the slow row). Narrow it with a label or a state.",
        "",
    ]
