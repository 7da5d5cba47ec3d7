"""Section 3b: start-up of jobs with their own code, beside built-in jobs."""

from __future__ import annotations

from typing import Any

from bench.code_startup import KINDS
from bench.report import Headline, table

GOAL_SECONDS = 1.5  # a cached archive's job starts within this of a built-in job's


def headlines(results: dict[str, Any]) -> list[Headline]:
    found = results["code_startup"]
    built_in = found["built-in"]["post_to_first_step"]["median_s"]
    cached = found["code, cached"]["post_to_first_step"]["median_s"]
    return [
        Headline(
            "POST to first step: code job with a cached archive less a built-in job (medians)",
            f"**{cached - built_in:+.2f} s**",
            f"≤ {GOAL_SECONDS} s",
        )
    ]


def render(results: dict[str, Any]) -> list[str]:
    found = results["code_startup"]
    return [
        "Tiny wavenet, 2 cpu ranks, a warm worker (`TRAINJOBS_WARM_LAUNCHERS=1`), every job in the sandbox; "
        f"the four kinds in turn, {found['repeats']} rounds, one stack (bench/code_startup.py). The code jobs' "
        "model is the built-in wavenet named from the archive, so only the code path differs. *New archive*: "
        "one the worker never saw (downloaded, checked, unpacked); *+ requirement*: its `requirements.txt` "
        "installs a wheel it ships (a venv, and pip in its sandbox). The upload (before the POST) is timed apart.",
        "",
        *table(
            ["job", "POST to running", "POST to first step: median", "p90", "upload (median)"],
            [
                [
                    kind,
                    f"{found[kind]['post_to_running']['median_s']} s",
                    f"**{found[kind]['post_to_first_step']['median_s']} s**",
                    f"{found[kind]['post_to_first_step']['p90_s']} s",
                    f"{found[kind]['upload_s']['median_s']} s" if kind != "built-in" else "–",
                ]
                for kind in KINDS
            ],
        ),
        "",
    ]
