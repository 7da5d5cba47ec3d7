"""`python -m bench [turns steps dispatch api polling ingest fleet search memory overhead sidebyside gap]`:
run the benchmarks on this machine, print each figure as it comes, and write bench/results.json
and BENCHMARKS.md.

Needs what the tests need (Redis, PostgreSQL), wrk, py-spy and perf. Benchmarks print figures; nothing here
passes or fails on a time."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# Where a benchmark's figures are kept in results.json, if not under its name.
RESULT_KEYS = {"sidebyside": ("side_by_side",), "turns": ("taking_turns",), "overhead": ("overhead", "scaling")}
# What `make bench` runs.
ALL = ["turns", "steps", "dispatch", "api", "polling", "ingest", "fleet", "search", "memory"]
# Run when named; a whole run keeps their last figures. Overhead (sections 1 and 2, about 40
# minutes): its rounds lie minutes apart, and the machine's drift over minutes (plain runs of one
# configuration 2 to 20% apart) is far above the 1% to be resolved; taking turns makes the same
# comparison without that drift. Side by side (section 1b): taking turns measures what it did for
# every configuration.
# Gap (section 1d) takes one configuration apart to find where a shortfall lies.
NAMED = [*ALL, "overhead", "sidebyside", "gap"]


def result_keys(name: str) -> tuple[str, ...]:
    return RESULT_KEYS.get(name, (name,))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("which", nargs="*", help=f"which benchmarks, of {', '.join(NAMED)} [{', '.join(ALL)}]")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per overhead configuration [3]")
    parser.add_argument(
        "--config",
        action="append",
        metavar="RANKS,PRECISION,ACCUMULATION",
        help="overhead: only this configuration, e.g. 2,fp32,1 (repeatable) [all 8]",
    )
    args = parser.parse_args()
    which = args.which or ALL
    unknown = set(which) - set(NAMED)
    if unknown:
        parser.error(f"unknown benchmark(s) {sorted(unknown)}; choose from {NAMED}")
    started = time.monotonic()
    results_file = ROOT / "bench" / "results.json"
    # A partial run (some benchmarks named) updates those and keeps the others' last figures.
    results: dict = json.loads(results_file.read_text()) if args.which and results_file.exists() else {}
    # Figures of an earlier commit that later runs are compared with (they cannot be measured again).
    kept = json.loads(results_file.read_text()) if results_file.exists() else {}
    results.update({key: kept[key] for key in ("polling_before",) if key in kept})
    # A whole run (`make bench`) keeps the last figures of the benchmarks it does not run, and their runs.
    if not args.which:
        for name in [name for name in NAMED if name not in ALL]:
            if all(key in kept for key in result_keys(name)):
                results.update({key: kept[key] for key in result_keys(name)})
                results.setdefault("measured", {})[name] = kept["measured"][name]
    now = datetime.now(UTC).isoformat(timespec="seconds")
    # When and by which run each section was measured: a partial run leaves the others' as they were.
    measured = results.setdefault("measured", {})
    for name in NAMED:
        if any(key in results for key in result_keys(name)):
            measured.setdefault(name, f"{results.get('date')} (`python -m bench {' '.join(results.get('ran', []))}`)")
    # Sections kept from an earlier run name the machine of that run (machines of one kind differ).
    for name, when in measured.items():
        if " on " not in when and results.get("machine"):
            measured[name] = f"{when} on {results['machine']}"
    results.update(machine=machine(), date=now)
    commit = (
        subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        or "unknown"
    )
    for name in which:
        if name == "overhead":
            from bench import overhead

            chosen = [(int(r), p, int(a)) for r, p, a in (c.split(",") for c in args.config)] if args.config else None
            results.update(overhead.run(repeats=args.repeats, configurations=chosen or overhead.CONFIGURATIONS))
        elif name == "sidebyside":
            from bench import side_by_side

            results.update(side_by_side.run())
        elif name == "turns":
            from bench import taking_turns

            results.update(taking_turns.run())
        elif name == "gap":
            from bench import gap

            results.update(gap.run())
        elif name == "dispatch":
            from bench import dispatch

            results["dispatch"] = dispatch.run()
        elif name == "api":
            from bench import api_load

            results["api"] = api_load.run()
        elif name == "polling":
            from bench import polling

            results["polling"] = polling.run()
        elif name == "ingest":
            from bench import ingestion

            results["ingest"] = ingestion.run()
        elif name == "fleet":
            from bench import fleet

            results["fleet"] = fleet.run()
        elif name == "steps":
            from bench import step_profile

            results["steps"] = step_profile.run()
        elif name == "memory":
            from bench import memory

            results["memory"] = memory.run()
        elif name == "search":
            from bench import search

            results["search"] = search.run()
        results["minutes"] = round((time.monotonic() - started) / 60, 1)
        results["ran"] = which
        command = " ".join(sys.argv[1:]) or " ".join(which)
        measured[name] = f"{now} (`python -m bench {command}`, commit {commit}) on {results['machine']}"
        results_file.write_text(json.dumps(results, indent=2) + "\n")
        (ROOT / "BENCHMARKS.md").write_text(render(results))
    print(f"wrote bench/results.json and BENCHMARKS.md in {results['minutes']} minutes")


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory = int(
        next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
    ) // (1024 * 1024)
    return (
        f"{os.cpu_count()} cores ({cpu}), {memory} GiB, no GPU; Python {platform.python_version()}, "
        f"torch {torch.__version__}"
    )


def render(results: dict) -> str:
    lines = [
        "# Benchmarks",
        "",
        "Figures, not pass/fail: on a shared 2-core machine the same run differs by 10 to 15% from one try to "
        "the next, and machines of the same kind differ more (their CPUs do). Each section's run and machine:",
        "",
        *[f"- {name}: {when}" for name, when in results.get("measured", {}).items()],
        "",
    ]
    if "overhead" in results:
        lines += [
            "## 1. Trainer overhead (wavenet, through the whole service vs a plain DDP loop)",
            "",
            "Samples/s, median of rounds (each run's figure the median epoch after the first). Wavenet 32/64 "
            "channels, depth 6 x 2, clips of 1024 samples, batch 8, SGD, one thread per rank. Each configuration's "
            "data set is sized for epochs of about 12 s from a few timed steps (bf16 on a CPU without bf16 "
            "instructions is several times slower than fp32). Each round runs the service's job and the plain loop "
            "on the same spec, in alternating order; the ratio is the median of the rounds' ratios. The service's "
            "stack runs with the settings' defaults. Run when named, not by `make bench`: `python -m bench overhead` "
            "(all 8 configurations, about 40 minutes) or `--config 2,fp32,1`. Its rounds lie minutes apart, and "
            "the machine drifts by more than 1% over minutes (the last column): section 1c, taking turns, takes that "
            "drift out.",
            "",
            "| ranks | precision | accumulation | clips (epoch) | service | plain DDP | ratio (median of rounds) "
            "| per round | plain runs: spread |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['ranks']} | {r['precision']} | {r['accumulation']} | "
            f"{r.get('clips', 1126)} ({r.get('epoch_seconds', '~11')} s) | {r['service_samples_per_s']} | "
            f"{r['plain_samples_per_s']} | **{r['ratio']}** | {', '.join(map(str, r.get('round_ratios', [])))} | "
            f"{spread(r.get('plain_runs'))} |"
            for r in results["overhead"]
        ]
        lines += [
            "",
            "*Plain runs: spread*: the fastest of a configuration's plain-loop runs over its slowest, the same "
            "script on the same spec minutes apart. It is the noise the interleaved ratio carries; section 1c "
            "has the two loops take turns over the same stretch of time instead.",
        ]
        lines.append("")
        if all("service_cpu" in r for r in results["overhead"]):
            lines += [
                "Where the cores went while each run trained (bench/process_cpu.py: every process's CPU time "
                "from /proc, from POST to the job's end, or over the plain script's life; median of rounds), in "
                "cores on average, and the share of the ranks' time spent waiting for a core. Each run starts "
                'on a quiet machine. "launcher" is the job\'s launcher, fork server and resource tracker (for the '
                'plain script, its resource tracker); "rest" includes this benchmark\'s own process, which polls '
                "the job twice a second.",
                "",
                "| ranks | precision | accumulation | run | ranks | launcher | worker | API | Redis | SQL | rest "
                "| ranks waiting |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|",
            ]
            for r in results["overhead"]:
                for run in ("service", "plain"):
                    cpu = r[f"{run}_cpu"]
                    cores = " | ".join(
                        f"{cpu[f'{role}_cores']:.3f}"
                        for role in ("ranks", "launcher", "worker", "api", "redis", "sql", "other")
                    )
                    lines.append(
                        f"| {r['ranks']} | {r['precision']} | {r['accumulation']} | {run} | {cores} | "
                        f"{100 * cpu['ranks_waiting_fraction']:.1f}% |"
                    )
            lines.append("")
    if results.get("side_by_side"):
        lines += render_side_by_side(results["side_by_side"])
    if results.get("taking_turns"):
        lines += render_taking_turns(results["taking_turns"])
    if results.get("gap"):
        lines += render_gap(results["gap"])
    if results.get("scaling"):
        lines += [
            "## 2. Scaling on this 2-core machine (2 ranks / 1 rank)",
            "",
            "One thread per rank (the worker has a cpu slot per core, and each slot gets its share of the "
            "cores), as the plain loop is given.",
            "",
            "| precision | accumulation | service | plain DDP |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {s['precision']} | {s['accumulation']} | {s['service_2_over_1']} | {s['plain_2_over_1']} |"
            for s in results["scaling"]
        ]
        lines.append("")
    if "dispatch" in results and "service_warm" in results["dispatch"]:
        d = results["dispatch"]
        warm, cold = d["service_warm"], d["service_cold"]
        shell = d["shell_plain_spawn"]
        lines += [
            "## 3. Start-up: POST to the end of the first optimizer step (`python -m bench dispatch`)",
            "",
            "Tiny wavenet, 2 cpu ranks, the worker idle; 10 jobs each, median and p90. Rank 0 marks its first "
            "optimizer step in its log with the wall-clock time. *Warm*: the worker had a launcher waiting "
            "(`TRAINJOBS_WARM_LAUNCHERS=1`, the default); *cold*: it starts one with the job (`=0`), as every job "
            "did before. *Shell*: `python -m bench.plain_ddp` (a plain `torch.multiprocessing.spawn` script) "
            "started from the shell, to its own first step.",
            "",
            "| path | POST to running | POST (or shell) to first step: median | p90 |",
            "|---|---|---|---|",
            f"| service, warm | {warm['post_to_running']['median_s']} s | "
            f"**{warm['post_to_first_step']['median_s']} s** | {warm['post_to_first_step']['p90_s']} s |",
            f"| service, cold | {cold['post_to_running']['median_s']} s | "
            f"{cold['post_to_first_step']['median_s']} s | {cold['post_to_first_step']['p90_s']} s |",
            f"| shell, plain spawn script | – | {shell['median_s']} s | {shell['p90_s']} s |",
            "",
        ]
    if "memory" in results:
        m = results["memory"]
        lines += [
            "## 9. Memory of a 2-rank cpu job (`python -m bench memory`)",
            "",
            "PSS summed over the job's process tree, median of 8 samples while it trains (wavenet, 2 cpu ranks).",
            "",
            "| service (launcher, fork server, ranks, waiting launchers) | plain spawn script (script, ranks) | over |",
            "|---|---|---|",
            f"| {m['service_pss_mib']} MiB | {m['plain_pss_mib']} MiB | **{m['service_over_plain_mib']} MiB** |",
            "",
        ]
    if "api" in results:
        lines += [
            "## 4. API under dashboard load (wrk, `python -m bench api`)",
            "",
            "| database | jobs stored | request | clients | req/s | p50 | p99 | non-2xx/3xx |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['database']} | {r['jobs']:,} | {r['request']} | {r['clients']} | {r['requests_per_s']} | "
            f"{r['p50']} | {r['p99']} | {r['errors']} |"
            for r in results["api"]
        ]
        lines += [
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
    if "polling" in results:
        lines += render_polling(results["polling"], results.get("polling_before"))
    if "ingest" in results:
        lines += [
            "## 5. Metrics ingestion (collector, Redis stream to SQL; `python -m bench ingest`)",
            "",
            "| database | events | events/s persisted | report-to-row lag p50 | max |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['database']} | {r['events']} | {r['events_per_s']} | {r['lag_ms_p50']} ms | {r['lag_ms_max']} ms |"
            for r in results["ingest"]
        ]
        lines.append("")
    if "fleet" in results:
        f = results["fleet"]
        t = f["throughput"]
        lines += [
            "## 7. A fleet of hosts (`python -m bench fleet`)",
            "",
            "Wavenet on cpu, 2 ranks with one thread each, interleaved rounds: across 2 workers (2 nodes x 1 "
            "rank, gloo over loopback between the workers' processes) against 1 worker (1 node x 2 ranks).",
            "",
            "| 2 nodes x 1 rank | 1 node x 2 ranks | ratio (median of rounds) | per round |",
            "|---|---|---|---|",
            f"| {t['two_nodes_samples_per_s']} samples/s | {t['one_node_samples_per_s']} samples/s | "
            f"**{t['ratio']}** | {', '.join(map(str, t['round_ratios']))} |",
            "",
            "A 100 MB checkpoint (one tensor), median of 3, written as rank 0 writes it (spooled, fsynced, "
            "hashed, put whole) and read as a resume reads it:",
            "",
            "| store | write | read |",
            "|---|---|---|",
        ]
        lines += [f"| {r['store']} | {r['write_s']} s | {r['read_s']} s |" for r in f["checkpoint_io"]]
        lines.append("")
    if "search" in results:
        lines += [
            "## 8. Job search at 100,000 jobs (`python -m bench search`)",
            "",
            "`GET /v1/jobs?…&limit=50` from one client, one request at a time (each figure is the request's own "
            "cost), 200 requests per row, against a real API process. One owner holds all the jobs (every filter "
            "walks that owner's history); labels: `team` one of 10 values, `sweep` one of 1,000, "
            "`priority=high` on 1%. PostgreSQL analysed after the bulk load, as autovacuum would have.",
            "",
            "| database | caller | query | items | p50 | p99 |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['database']} | {r['caller']} | `{r['query']}` | {r['page']} | {r['p50_ms']} ms | {r['p99_ms']} ms |"
            for r in results["search"]
        ]
        lines += [
            "",
            "A label filter walks the `job_labels` index of its rarest label (owner, key, value, created_at, id) "
            "newest first and stops after a page; with several labels the rarest is found by counting each "
            "label's index entries up to 1,000. `no filter` is the API's own cost for a page of 50 documents. "
            "A name is a substring that no index serves: it filters the owner's history newest first and "
            "scans all of it when fewer than a page match (the slow row). Narrow it with a label or a state.",
            "",
        ]
    if "steps" in results:
        lines += render_steps(results["steps"])
    lines += [
        "## 6. GPU",
        "",
        "`python -m bench.gpu_resnet50` measures resnet50 images/s on cuda (fp32, bf16, channels_last, "
        "1..N GPUs, DDP vs DP) through the trainer. Not run: no GPU machine was lent to the session that wrote it.",
        "",
    ]
    return "\n".join(lines)


def spread(runs: list[float] | None) -> str:
    return f"{100 * (max(runs) / min(runs) - 1):.1f}%" if runs else "–"


def render_side_by_side(rows: list[dict]) -> list[str]:
    from bench.side_by_side import EPOCHS

    lines = [
        "## 1b. Side by side: the service's 1-rank job and the plain loop over the same seconds "
        "(`python -m bench sidebyside`)",
        "",
        "A shared 2-core machine's speed drifts over seconds (on 2026-12-04, a probe run by hand on an AMD EPYC "
        "machine of this kind, not by this benchmark: a fixed matrix product on one core ran at 0.81 to 1.14 of "
        "its median in half-second windows, with no steal time), so runs a minute apart differ by more than "
        "1%. Here the two loops train at the same moment, each rank on one of the 2 cores, and are "
        f"timed over the same seconds: the windows are the service's epochs after the first (of {EPOCHS}, about "
        "12 s each; the end from rank 0's end-of-epoch progress report), and the plain loop's samples over each "
        "window come from its record of every optimizer step. The ratio is the median of the windows' ratios. "
        "The last row is the control: two plain loops side by side, one's epochs as windows. It shows what is "
        "left of the noise: each core has its own neighbours on the host, so two identical loops still differ "
        "by a few %, and a service row inside the control's spread shows no difference this method can see. "
        "This measures the work inside the rank; the cores the service's own processes take land on both ranks "
        "here, and are in section 1's CPU table.",
        "",
        "| pair | ranks | precision | accumulation | clips | first | second | ratio (median) | per window |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['pair']} | {r['ranks']} | {r['precision']} | {r['accumulation']} | {r['clips']} | "
        f"{r['a_samples_per_s']} | {r['b_samples_per_s']} | **{r['ratio']}** | "
        f"{', '.join(map(str, r['window_ratios']))} |"
        for r in rows
    ]
    lines.append("")
    return lines


def with_interval(ratios: list[float]) -> str:
    """A configuration's pairs as the pooled row shows all of them: geometric mean (95% bootstrap interval)."""
    from bench.taking_turns import pooled

    figures = pooled(ratios)
    low, high = figures["interval_95"]
    return f"{figures['geometric_mean']:.3f} ({low:.3f} – {high:.3f})"


def render_taking_turns(turns: dict) -> list[str]:
    lines = [
        "## 1c. Taking turns: the service's job and the plain loop alive at once, a turn each "
        "(`python -m bench turns`)",
        "",
        "Runs minutes apart (section 1) differ by more than 1% on a shared machine, and so do two loops "
        "training at the same moment on the two cores (section 1b, when run). Here the service's job and the "
        "plain loop (`python -m bench.plain_ddp`, as a shell starts it) are alive at once and take turns on the "
        f"whole machine, {turns['turn_seconds']} s each: one side runs while every process group of the other is "
        "stopped (SIGSTOP, SIGCONT). The service's side is all of it: the API, the worker, the job's launcher, "
        "fork server and ranks, so what the service does while a job trains is paid in its own turns. What it "
        "does on a clock (sweeps, heartbeats, lease renewals, its servers' housekeeping) falls due in the plain "
        "loop's turns too and is done in its own, so per second of training it pays about twice what a job "
        "running alone pays for it: these rows lean against the service. The i-th "
        "rank of either side is pinned to core i. A loop's rate over an epoch is its samples over the seconds of "
        "its own turns inside the epoch's wall-clock window (the service's from rank 0's reports, replayed "
        f"from the job's event stream). Each pair is a fresh plain process and a fresh job of {turns['epochs']} "
        "epochs of about 12 s (of turns); its ratio is over the epochs after the first. A configuration's pairs "
        "lie minutes apart (one pass over all configurations per pair)"
        + (
            ", and which side takes the first turn alternates from pass to pass (the service, or the control's first "
            "process, in odd passes)"
            if turns.get("first_turn_alternates")
            else ""
        )
        + "; its ratio is the median of its pairs', "
        "beside their geometric mean with a 95% bootstrap interval (pairs resampled; with so few pairs, narrower than "
        "the truth: read it against the control rows'). "
        "The plain / plain rows are the control: two plain processes taking turns the same way. The job is "
        "posted once the plain loop's first optimizer step is done, so that both train from about the same "
        "moment (a warm worker starts a job's ranks within a second, the plain script takes seconds); "
        "*offset*: how long after the plain loop's timed epoch the job's began (median of pairs).",
        "",
        "| pair | ranks | precision | accumulation | clips | first | second | ratio (median of pairs) "
        "| geometric mean (95% interval) | per pair | offset |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['pair']} | {r['ranks']} | {r['precision']} | {r['accumulation']} | {r['clips']} | "
        f"{r['a_samples_per_s']} | {r['b_samples_per_s']} | **{r['ratio']}** | {with_interval(r['pair_ratios'])} | "
        f"{', '.join(map(str, r['pair_ratios']))} | "
        f"{'–' if r.get('offset_s') is None else format(r['offset_s'], '+.1f') + ' s'} |"
        for r in turns["rows"]
    ]
    lines += [
        "",
        "All pairs pooled: the geometric mean of the pairs' ratios, with a 95% bootstrap interval (pairs "
        "resampled), and the spread of one pair's ratio (standard deviation of its logarithm). The control's "
        "spread is what two identical processes differ by on this machine: the floor under any one pair.",
        "",
        "| pairs of | pairs | geometric mean | 95% interval | spread of one pair |",
        "|---|---|---|---|---|",
    ]
    for name, pooled in turns["pooled"].items():
        spread_of_pair = "–" if pooled["spread_of_pairs"] is None else f"{100 * pooled['spread_of_pairs']:.1f}%"
        low, high = pooled["interval_95"]
        lines.append(
            f"| {'service / plain' if name == 'service' else 'plain / plain (control)'} | {pooled['pairs']} | "
            f"**{pooled['geometric_mean']}** | {low} – {high} | {spread_of_pair} |"
        )
    lines.append("")
    return lines


def other_statuses(row: dict) -> str:
    """ " (200: 20)": which statuses the unexpected answers had (runs before they were recorded: none)."""
    statuses = row.get("other_statuses") or {}
    return f" ({', '.join(f'{status}: {count}' for status, count in statuses.items())})" if statuses else ""


def render_polling(polling: dict, before: dict | None) -> list[str]:
    lines = [
        "## 10. Polling a job (`python -m bench polling`)",
        "",
        "Open loop: 200 pollers, each on its own connection and its own job, send `GET /v1/jobs/{id}` once a "
        "second on a fixed schedule for 20 s (after 3 s not counted); latency from when each request was due. "
        "The pollers (one asyncio process) share the 2 cores with the API, Redis and the database.",
        "",
        "| database | jobs stored | answer | req/s | p50 | p99 | max | other answers |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['database']} | {r['jobs']:,} | {r['answer']} | {r['requests_per_s']} | {r['p50_ms']} ms | "
        f"**{r['p99_ms']} ms** | {r['max_ms']} ms | {r['other_answers']}{other_statuses(r)} |"
        for r in polling["open_loop"]
    ]
    lines += [
        "",
        "Closed loop: wrk, 50 connections on one job, 5 s. *Before*: the same benchmark on the commit named, "
        "before the changes of issue 16 part 2.",
        "",
        "| database | jobs stored | answer | req/s | p50 | p99 | before: req/s | before: p99 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    old = {(r["database"], r["jobs"], r["answer"]): r for r in (before or {}).get("closed_loop", [])}
    for r in polling["closed_loop"]:
        was = old.get((r["database"], r["jobs"], r["answer"]), {})
        lines.append(
            f"| {r['database']} | {r['jobs']:,} | {r['answer']} | **{r['requests_per_s']}** | {r['p50']} | "
            f"{r['p99']} | {was.get('requests_per_s', '–')} | {was.get('p99', '–')} |"
        )
    lines += [
        "",
        f"After: {polling.get('api_workers', '?')} API processes (`TRAINJOBS_API_WORKERS`, the default: the "
        "cores); section 4 has the same requests through one process, from the same run. The machine's speed "
        "drifts between runs (section 3's shell script is the yardstick), so compare the before column with care.",
    ]
    if before:
        lines += ["", f"Before: {before.get('measured', 'not recorded')}."]
    for label, profiles in (("after", polling.get("profiles")), ("before", (before or {}).get("profiles"))):
        for database, top in (profiles or {}).items():
            lines += [
                "",
                f"Profile {label}, {database}, 100,000 jobs, closed-loop GET (200), py-spy on the API processes: "
                "share of samples with the frame on top of the stack (idle threads left out).",
                "",
                "| frame | share |",
                "|---|---|",
                *[f"| `{row['frame']}` | {row['share']:.1%} |" for row in top],
            ]
    lines.append("")
    return lines


def render_steps(rows: list[dict]) -> list[str]:
    from bench.step_profile import SECONDS, source_line

    lines = [
        "## 11. Where a training step's time goes (service rank against plain loop)",
        "",
        f"`python -m bench steps`: rank 0 of a job through the service and of the plain loop, same spec, sampled "
        f"with py-spy (100 Hz, not pausing the rank) for {SECONDS} s in the second epoch; each sample is charged to "
        "the line of the training loop it was under. perf's software counters over the same span (this machine's "
        "VM exposes no hardware counters). Lines under 0.5% are left out.",
        "",
    ]
    for row in rows:
        lines.append(f"**{row['ranks']} rank(s), {row['precision']}, accumulation {row['accumulation']}**")
        lines.append("")
        for run in ("service", "plain"):
            figures = row[run]
            lines += [
                f"{run}: {figures['samples']} samples; cpu {figures['cpu_seconds']} s of {SECONDS}; "
                f"{figures['page_faults_per_s']} page faults/s; {figures['context_switches_per_s']} context switches/s",
                "",
                "| share | line | code |",
                "|---|---|---|",
            ]
            lines += [
                f"| {100 * share:.1f}% | {where} | `{source_line(where)}` |"
                for where, share in figures["lines"].items()
                if share >= 0.005
            ]
            lines.append("")
    return lines


def render_gap(gap: dict) -> list[str]:
    config = gap["configuration"]
    lines = [
        "## 1d. Where the shortfall lies: one configuration taken apart (`python -m bench gap`)",
        "",
        f"{config['ranks']} rank, {config['precision']}, accumulation {config['accumulation']} ({gap['clips']} "
        "clips), section 1c's most consistent shortfall while its jobs were posted at once. Each part takes "
        "turns against a fresh plain loop as in section 1c, in passes over the parts. *fork server*: the plain "
        "loop itself, its ranks forked from a fork server warmed as a service launcher warms its own (preloads, "
        "heap settings). *trainjobs train*: the service's launcher, fork server, ranks and trainer started from "
        "the shell, with the worker's threads per rank (`python -m bench.local_trainer`). *+ idle stack*: the "
        "same, with the idle API and worker on its side (stopped and run with it). *service, posted at once*: "
        "the job through the whole service, posted as the plain loop starts. *service*: the same, posted once "
        "the plain loop's first step is done (as in section 1c). *Offsets*: how long after the plain loop's "
        "timed epoch the part's began, per pair.",
        "",
        "| part / plain | pairs | geometric mean | 95% interval | spread of one pair | per pair | offsets (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in gap["rows"]:
        low, high = row["interval_95"]
        spread_of_pair = "–" if row["spread_of_pairs"] is None else f"{100 * row['spread_of_pairs']:.1f}%"
        offsets = ", ".join(f"{offset:+.1f}" for offset in row.get("offsets_s", [])) or "–"
        lines.append(
            f"| {row['part']} | {row['pairs']} | **{row['geometric_mean']}** | {low} – {high} | {spread_of_pair} | "
            f"{', '.join(map(str, row['pair_ratios']))} | {offsets} |"
        )
    lines.append("")
    return lines


if __name__ == "__main__":
    main()
