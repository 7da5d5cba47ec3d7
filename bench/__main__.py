"""`python -m bench [NAME ...]`: run the benchmarks on this machine (those `make bench` runs, or
the ones named), print each figure as it comes, and write bench/results.json and BENCHMARKS.md.
The benchmarks, their sections and their order are bench/catalogue.py's.

Needs what the tests need (Redis, PostgreSQL), wrk, py-spy and perf. Benchmarks print figures;
nothing here passes or fails on a time."""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.catalogue import CATALOGUE, Benchmark, named
from bench.report import render
from bench.support.machine import commit, machine

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results.json"
KEPT_FROM_EARLIER = ("polling_before",)  # figures of an earlier commit that later runs compare with


def main() -> None:
    args = _arguments()
    chosen = named(args.which) if args.which else [b for b in CATALOGUE if b.in_make_bench]
    started = time.monotonic()
    results = _results_to_update(whole_run=not args.which)
    command = " ".join(sys.argv[1:]) or " ".join(b.name for b in chosen)
    run = f"{datetime.now(UTC).isoformat(timespec='seconds')} (`python -m bench {command}`, commit {commit()})"
    results["machine"] = machine()
    for benchmark in chosen:
        results.update(benchmark.measure(**_options(benchmark, args)))
        for measured in [benchmark, *(b for b in CATALOGUE if b.measured_by == benchmark.name)]:
            results["measured"][measured.name] = f"{run} on {results['machine']}"
        results["minutes"] = round((time.monotonic() - started) / 60, 1)
        RESULTS.write_text(json.dumps(results, indent=2) + "\n")
        (ROOT / "BENCHMARKS.md").write_text(render(results))
    print(f"wrote bench/results.json and BENCHMARKS.md in {results['minutes']} minutes")


def _arguments() -> argparse.Namespace:
    runnable = [benchmark.name for benchmark in CATALOGUE if benchmark.runnable]
    by_default = [benchmark.name for benchmark in CATALOGUE if benchmark.in_make_bench]
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "which", nargs="*", help=f"which benchmarks, of {', '.join(runnable)} [{', '.join(by_default)}]"
    )
    parser.add_argument("--repeats", type=int, help="rounds or repeats, for a benchmark that has them [its own]")
    parser.add_argument(
        "--config",
        action="append",
        metavar="RANKS,PRECISION,ACCUMULATION",
        help="overhead, turns, own_loss, sandbox_cost: only this configuration, e.g. 2,fp32,1 (repeatable) [theirs]",
    )
    parser.add_argument(
        "--pairs", type=int, help="turns, own_loss, sandbox_cost, gap: pairs per configuration [theirs]"
    )
    parser.add_argument("--minutes", type=float, help="chaos: how long faults are injected [30]")
    parser.add_argument("--seed", type=int, help="chaos: the seed of its jobs and faults [36]")
    args = parser.parse_args()
    unknown = set(args.which) - set(runnable)
    if unknown:
        parser.error(f"unknown benchmark(s) {sorted(unknown)}; choose from {runnable}")
    return args


def _options(benchmark: Benchmark, args: argparse.Namespace) -> dict[str, Any]:
    """The options given that this benchmark's `run` takes."""
    given: dict[str, Any] = {"minutes": args.minutes, "seed": args.seed, "repeats": args.repeats, "pairs": args.pairs}
    if args.config:
        given["configurations"] = [(int(r), p, int(a)) for r, p, a in (c.split(",") for c in args.config)]
    accepted = inspect.signature(benchmark.module.run).parameters
    return {name: value for name, value in given.items() if value is not None and name in accepted}


def _results_to_update(whole_run: bool) -> dict[str, Any]:
    """What this run starts from: a partial run (benchmarks named) updates those and keeps the
    others' last figures; a whole run (`make bench`) starts anew but keeps the last figures of
    the benchmarks it does not run, with their runs, and the earlier commits' figures."""
    kept: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results = dict(kept) if not whole_run else {key: kept[key] for key in KEPT_FROM_EARLIER if key in kept}
    results.setdefault("measured", {})
    if whole_run:
        for benchmark in CATALOGUE:
            if not benchmark.in_make_bench and all(key in kept for key in benchmark.keys):
                results.update({key: kept[key] for key in benchmark.keys})
                results["measured"][benchmark.name] = kept.get("measured", {}).get(benchmark.name, "an earlier run")
    return results


if __name__ == "__main__":
    main()
