"""Section 3c: a preemption, from the preemptor's POST to its first optimizer step."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table


def headlines(results: dict[str, Any]) -> list[Headline]:
    found = results["preemption"]
    step, write = found["victim_step_s"], found["checkpoint_write_s"]
    return [
        Headline(
            "a preemptor's POST to its first step, a victim holding the devices (median)",
            f"**{found['post_to_first_step_s']} s**",
            f"the victim's step ({step} s) + its checkpoint write ({write} s) + a start",
        )
    ]


def render(results: dict[str, Any]) -> list[str]:
    found = results["preemption"]
    write = found["checkpoint_write_s"]
    return [
        "A running wavenet job of priority 10 (2 cpu ranks, fp32) holds the worker's 2 slots; a tiny wavenet job "
        "of priority 90 is posted. The leader's sweep (every `TRAINJOBS_SWEEP_INTERVAL_SECONDS`, 5 s by default) "
        "preempts the victim, whose ranks finish the step they are in and write a checkpoint; the job goes back to "
        "the queue and the preemptor starts on a warm launcher. Medians of "
        f"{len(found['rounds'])} rounds (bench/preemption.py).",
        "",
        *table(
            ["POST to the preemptor's first step", "the victim's optimizer step", "its checkpoint write"],
            [
                [
                    f"**{found['post_to_first_step_s']} s**",
                    f"{found['victim_step_s']} s",
                    f"{write} s",
                ]
            ],
        ),
        "",
        "What the rest is (one run traced by hand, preemptor posted at 0 s): the leader's next sweep preempts the "
        "victim (0.1-0.5 s: the tests' stack sweeps every 0.5 s), its ranks stop and its checkpoint is recorded "
        "(about 0.6 s later), the preemptor is claimed at once (0.1 s later), and its first step waits for a new "
        "warm launcher: the victim took the waiting one when it started, and the worker starts the next when it "
        "learns of the preemption, about 2.5 s of imports on this machine. Not built: keeping a launcher warm while "
        "jobs run, which would take that off at the cost of CPU during a running job's epochs.",
        "",
    ]
