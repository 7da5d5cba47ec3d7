"""Where the service's shortfall against the plain loop lies (`python -m bench gap`, BENCHMARKS.md
§1d): one configuration taken apart, each part taking turns against the same plain loop as in
§1c (bench/turns.py), a fresh pair each time, in passes over the parts:

- fork server: the plain loop itself, its ranks forked from a fork server warmed as a service
  launcher warms its own (what it preloads, its heap settings): how the service starts ranks;
- trainjobs train: the service's own launcher, fork server, ranks and trainer, started from the
  shell (`bench.support.local_trainer`): everything of a job but the service around it;
- trainjobs train + idle stack: the same, with the (idle) API and worker on its side, stopped and
  run with it: what the service costs when it has nothing to do with the job;
- service, posted at once: the job through the whole service, posted as the plain loop starts
  (as §1c did until the shortfall below was found in the moment of posting);
- service: the same, posted once the plain loop's first step is done, as §1c measures it.

Each row is a ratio to the plain loop (`python -m bench.support.plain_ddp`, as a shell starts it).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.support.epochs import ROOT, local_epochs, plain_epochs, plain_process, timed_offset
from bench.support.process_cpu import wait_until_quiet
from bench.support.ratios import compared, pooled
from bench.support.turn_taking import processes_taking_turns, rates
from bench.support.workload import calibrated_clips, default_stack, wavenet_spec
from bench.turns import EPOCHS, service_and_plain
from devstack import sql_database

CONFIGURATION = (1, "bf16", 1)  # §1c's most consistent shortfall, while its jobs were posted at once
PAIRS = 6
PARTS = ["fork server", "trainjobs train", "trainjobs train + idle stack", "service, posted at once", "service"]


def part_and_plain(part: str, spec: dict, scratch: str, threads: int, stack_roots: list[int]) -> dict:
    """One pair: `part` (not the service) and a fresh plain loop, taking turns."""
    plain, plain_result = plain_process(spec, scratch, "plain", threads)
    spec_file = Path(scratch) / "plain.spec.json"
    if part == "fork server":
        result = Path(scratch) / "forked.result.json"
        result.unlink(missing_ok=True)
        command = [
            sys.executable,
            "-m",
            "bench.support.plain_ddp",
            str(spec_file),
            str(result),
            str(threads),
            "--fork-server",
        ]
    else:
        workdir = Path(scratch) / "local"
        shutil.rmtree(workdir, ignore_errors=True)
        command = [sys.executable, "-m", "bench.support.local_trainer", str(spec_file), str(workdir), str(threads)]
    other = subprocess.Popen(command, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL)
    roots = [other.pid, *(stack_roots if part.endswith("idle stack") else [])]
    turns = processes_taking_turns({"part": (other, roots), "plain": (plain, [plain.pid])})
    part_epochs = plain_epochs(result) if part == "fork server" else local_epochs(workdir / "runs" / "bench")
    plain_ = plain_epochs(plain_result)
    return compared(rates(turns, "part", part_epochs), rates(turns, "plain", plain_)) | {
        "offset_s": timed_offset(part_epochs, plain_)
    }


def run(configuration=CONFIGURATION, pairs: int = PAIRS, parts: list[str] = PARTS, clips: int | None = None) -> dict:
    """`clips`: the data set's size, as a run of `make bench` calibrated it (its results.json), to
    probe that run's spec; by default calibrated here, now."""
    ranks, precision, accumulation = configuration
    found: dict[str, list[dict]] = {part: [] for part in parts}
    with tempfile.TemporaryDirectory() as scratch, sql_database("sqlite", Path(scratch)) as url:
        stack, threads = default_stack(scratch, url)
        try:
            client = stack.client(stack.token("bench"))
            stack_roots = [stack.api.pid, *(worker.pid for worker in stack.workers.values())]
            clips = clips or calibrated_clips(ranks, precision, threads)
            spec = wavenet_spec(ranks, precision, accumulation, EPOCHS, clips)
            for number in range(1, pairs + 1):
                for part in parts:
                    figures = _pair(stack, client, part, spec, scratch, threads, stack_roots)
                    print(
                        f"gap  pair {number}/{pairs}  {part} / plain: {figures['a_samples_per_s']:.2f} and "
                        f"{figures['b_samples_per_s']:.2f} samples/s, ratio {figures['ratio']:.3f}, "
                        f"timed epochs {figures['offset_s']:+.1f} s apart",
                        flush=True,
                    )
                    found[part].append(figures)
        finally:
            stack.stop()
    rows = [
        {
            "part": part,
            "pair_ratios": [round(run["ratio"], 4) for run in runs],
            "offsets_s": [run["offset_s"] for run in runs],
            **pooled([run["ratio"] for run in runs]),
        }
        for part, runs in found.items()
    ]
    configured = {"ranks": ranks, "precision": precision, "accumulation": accumulation}
    return {"gap": {"configuration": configured, "clips": spec["data"]["params"]["num_samples"], "rows": rows}}


def _pair(stack, client, part: str, spec: dict, scratch: str, threads: int, stack_roots: list[int]) -> dict:
    wait_until_quiet()
    if part.startswith("service"):
        return service_and_plain(stack, client, spec, scratch, threads, post_at_once=part.endswith("at once"))
    return part_and_plain(part, spec, scratch, threads, stack_roots)


def main() -> None:
    """`python -m bench.gap`: a probe, some parts of one configuration, printed and not recorded
    (`python -m bench gap` runs them all and writes BENCHMARKS.md §1d)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.gap", description=main.__doc__)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=PARTS, metavar="PART", help=f"of {PARTS}")
    parser.add_argument("--pairs", type=int, default=PAIRS)
    parser.add_argument("--ranks", type=int, choices=[1, 2], default=CONFIGURATION[0])
    parser.add_argument("--precision", choices=["fp32", "bf16"], default=CONFIGURATION[1])
    parser.add_argument("--accumulation", type=int, choices=[1, 4], default=CONFIGURATION[2])
    parser.add_argument("--clips", type=int, help="the data set's size (default: calibrated now, for epochs of 10 s)")
    args = parser.parse_args()
    result = run((args.ranks, args.precision, args.accumulation), args.pairs, args.parts, args.clips)["gap"]
    for row in result["rows"]:
        low, high = row["interval_95"]
        print(f"{row['part']} / plain: {row['geometric_mean']:.3f} ({low:.3f}-{high:.3f}), pairs {row['pair_ratios']}")


if __name__ == "__main__":
    main()
