"""Section 11: where a training step's time goes, service rank against plain loop."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table


def headlines(results: dict[str, Any]) -> list[Headline]:
    return []


def render(results: dict[str, Any]) -> list[str]:
    from bench.steps import SECONDS

    lines = [
        f"`python -m bench steps`: rank 0 of a job through the service and of the plain loop, same spec, sampled "
        f"with py-spy (100 Hz, not pausing the rank) for {SECONDS} s in the second epoch; each sample is charged to "
        "the line of the training loop it was under. perf's software counters over the same span (this machine's "
        "VM exposes no hardware counters). Lines under 0.5% are left out.",
        "",
    ]
    for row in results["steps"]:
        lines += [f"**{row['ranks']} rank(s), {row['precision']}, accumulation {row['accumulation']}**", ""]
        for run in ("service", "plain"):
            lines += _run(run, row[run], SECONDS)
    return lines


def _run(run: str, figures: dict[str, Any], seconds: int) -> list[str]:
    shares = [
        [f"{100 * share:.1f}%", where, f"`{figures['code'][where]}`"]
        for where, share in figures["lines"].items()
        if share >= 0.005
    ]
    return [
        f"{run}: {figures['samples']} samples; cpu {figures['cpu_seconds']} s of {seconds}; "
        f"{figures['page_faults_per_s']} page faults/s; {figures['context_switches_per_s']} context switches/s",
        "",
        *table(["share", "line", "code"], shares),
        "",
    ]
