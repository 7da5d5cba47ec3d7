"""Section 10: polling a job, open loop and closed loop, before and after."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table

OPEN_LOOP = (
    "Open loop: 200 pollers, each on its own connection and its own job, send `GET /v1/jobs/{id}` once a "
    "second on a fixed schedule for 20 s (after 3 s not counted); latency from when each request was due. "
    "The pollers (one asyncio process) share the 2 cores with the API, Redis and the database."
)


def headlines(results: dict[str, Any]) -> list[Headline]:
    polling, before = results["polling"], results.get("polling_before") or {}
    worst_p99 = max(row["p99_ms"] for row in polling["open_loop"])
    rows = [Headline("GET job, 200 pollers once a second: p99, worst cell", f"**{worst_p99} ms**", "≤ 10 ms")]
    old = {(r["database"], r["jobs"], r["answer"]): r["requests_per_s"] for r in before.get("closed_loop", [])}
    factors = [
        r["requests_per_s"] / old[key]
        for r in polling["closed_loop"]
        if (key := (r["database"], r["jobs"], r["answer"])) in old
    ]
    if factors:
        rows.append(Headline("GET job, wrk: req/s after / before, lowest cell", f"{min(factors):.1f}x", "≥ 3x"))
    return rows


def render(results: dict[str, Any]) -> list[str]:
    polling, before = results["polling"], results.get("polling_before")
    open_rows = [
        [r["database"], f"{r['jobs']:,}", r["answer"], r["requests_per_s"], f"{r['p50_ms']} ms",
         f"**{r['p99_ms']} ms**", f"{r['max_ms']} ms", f"{r['other_answers']}{other_statuses(r)}"]
        for r in polling["open_loop"]
    ]  # fmt: skip
    lines = [
        OPEN_LOOP,
        "",
        *table(["database", "jobs stored", "answer", "req/s", "p50", "p99", "max", "other answers"], open_rows),
        "",
        *_closed_loop(polling, before),
    ]
    if before:
        lines += ["", f"Before: {before.get('measured', 'not recorded')}."]
    for label, profiles in (("after", polling.get("profiles")), ("before", (before or {}).get("profiles"))):
        for database, top in (profiles or {}).items():
            lines += _profile(label, database, top)
    lines.append("")
    return lines


def _closed_loop(polling: dict[str, Any], before: dict[str, Any] | None) -> list[str]:
    old = {(r["database"], r["jobs"], r["answer"]): r for r in (before or {}).get("closed_loop", [])}
    closed = []
    for r in polling["closed_loop"]:
        was = old.get((r["database"], r["jobs"], r["answer"]), {})
        closed.append(
            [r["database"], f"{r['jobs']:,}", r["answer"], f"**{r['requests_per_s']}**", r["p50"], r["p99"],
             was.get("requests_per_s", "–"), was.get("p99", "–")]
        )  # fmt: skip
    return [
        "Closed loop: wrk, 50 connections on one job, 5 s. *Before*: the same benchmark on the commit named "
        "below, before the job cache and the API's several processes.",
        "",
        *table(["database", "jobs stored", "answer", "req/s", "p50", "p99", "before: req/s", "before: p99"], closed),
        "",
        f"After: {polling.get('api_workers', '?')} API processes (`TRAINJOBS_API_WORKERS`, the default: the "
        "cores); section 4 has the same requests through one process, from the same run. The machine's speed "
        "drifts between runs (section 3's shell script is the yardstick), so compare the before column with care.",
    ]


def _profile(label: str, database: str, top: list[dict[str, Any]]) -> list[str]:
    return [
        "",
        f"Profile {label}, {database}, 100,000 jobs, closed-loop GET (200), py-spy on the API processes: "
        "share of samples with the frame on top of the stack (idle threads left out).",
        "",
        *table(["frame", "share"], [[f"`{row['frame']}`", f"{row['share']:.1%}"] for row in top]),
    ]


def other_statuses(row: dict[str, Any]) -> str:
    """ " (200: 20)": which statuses the unexpected answers had (runs before they were recorded: none)."""
    statuses = row.get("other_statuses") or {}
    return f" ({', '.join(f'{status}: {count}' for status, count in statuses.items())})" if statuses else ""
