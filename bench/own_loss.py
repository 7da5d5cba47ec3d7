"""A loss of the model's own (issue 42's benchmark), taking turns as section 1c does (bench/turns.py
says why turns, and how a rate is taken over a side's own turns):

- hook / built-in: the same wavenet trained by the trainer (`trainjobs train`'s launcher, fork
  server and ranks, bench/support/local_trainer.py) once with the trainer's own cross-entropy and
  once with the same cross-entropy given as the entry's loss (bench/support/hooked_wavenet): what
  the hook's path costs, the model and the math being the same;
- service / plain: the hooked job through the whole service against the plain DDP loop computing
  the same loss inline (bench/support/plain_ddp.py).

The hooked entry is a plugin, installed into this environment before the stack starts. `PAIRS`
pairs per configuration and comparison, the side that goes first alternating by pass."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.support.epochs import ROOT, local_epochs, timed_offset
from bench.support.process_cpu import wait_until_quiet
from bench.support.ratios import compared, pooled
from bench.support.turn_taking import processes_taking_turns, rates
from bench.support.workload import calibrated_clips, default_stack, wavenet_spec
from bench.turns import EPOCHS, pairs_row, service_and_plain
from devstack import sql_database

PAIRS = 4
CONFIGURATIONS = [(2, "fp32", 1), (2, "bf16", 4)]
COMPARISONS = ("hook / built-in", "service / plain")
HOOKED = "wavenet-hooked"
PLUGIN = Path(__file__).resolve().parent / "support" / "hooked_wavenet"


def install_hooked_wavenet() -> None:
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*command, str(PLUGIN)], check=True)
    from trainjobs.contract import catalog

    catalog.models.cache_clear()


def hooked(spec: dict) -> dict:
    return {**spec, "model": {**spec["model"], "name": HOOKED}}


def hook_and_builtin(spec: dict, scratch: str, threads: int, first_turn: str) -> dict:
    """One pair: two trainer runs of the same spec but for the loss's path, taking turns."""
    sides = {}
    for side, side_spec in (("hook", hooked(spec)), ("built-in", spec)):
        workdir = Path(scratch) / side
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir()
        (workdir / "spec.json").write_text(json.dumps(side_spec))
        command = [sys.executable, "-m", "bench.support.local_trainer", str(workdir / "spec.json"), str(workdir)]
        process = subprocess.Popen(
            [*command, str(threads)], cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL
        )
        sides[side] = (process, [process.pid])
    turns = processes_taking_turns(sides, first_turn=first_turn)
    epochs = {side: local_epochs(Path(scratch) / side / "runs" / "bench") for side in sides}
    return compared(rates(turns, "hook", epochs["hook"]), rates(turns, "built-in", epochs["built-in"])) | {
        "offset_s": timed_offset(epochs["hook"], epochs["built-in"])
    }


def run(configurations=CONFIGURATIONS, pairs: int = PAIRS, comparisons=COMPARISONS) -> dict:
    install_hooked_wavenet()
    found: dict[tuple, list[dict]] = {(name, config): [] for name in comparisons for config in configurations}
    with tempfile.TemporaryDirectory() as scratch, sql_database("sqlite", Path(scratch)) as url:
        stack, threads = default_stack(scratch, url)
        try:
            client = stack.client(stack.token("bench"))
            clips = {config: calibrated_clips(config[0], config[1], threads) for config in configurations}
            for number in range(1, pairs + 1):
                for name, config in found:
                    wait_until_quiet()
                    spec = wavenet_spec(*config, EPOCHS, clips[config])
                    if name == "hook / built-in":
                        figures = hook_and_builtin(spec, scratch, threads, ("built-in", "hook")[number % 2])
                    else:
                        first = ("plain", "service")[number % 2]
                        figures = service_and_plain(stack, client, hooked(spec), scratch, threads, first_turn=first)
                    found[name, config].append(figures)
                    print(f"own loss  pair {number}/{pairs}  {name} {config}: ratio {figures['ratio']:.3f}", flush=True)
        finally:
            stack.stop()
    rows = [pairs_row(name, config, clips[config], runs) for (name, config), runs in found.items()]
    summary = {
        name: pooled([r for row in rows if row["pair"] == name for r in row["pair_ratios"]]) for name in comparisons
    }
    return {"own_loss": {"rows": rows, "pooled": summary, "epochs": EPOCHS}}
