"""Section 3: start-up, from POST to the end of the job's first optimizer step."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table

GOAL_SECONDS = 1.5


def headlines(results: dict[str, Any]) -> list[Headline]:
    warm = results["dispatch"]["service_warm"]["post_to_first_step"]
    return [Headline("POST to first optimizer step, warm worker (median)", f"**{warm['median_s']} s**", "≤ 1.5 s")]


def render(results: dict[str, Any]) -> list[str]:
    d = results["dispatch"]
    warm, cold, shell = d["service_warm"], d["service_cold"], d["shell_plain_spawn"]
    return [
        "Tiny wavenet, 2 cpu ranks, the worker idle; 10 jobs each, median and p90. Rank 0 marks its first "
        "optimizer step in its log with the wall-clock time. *Warm*: the worker had a launcher waiting "
        "(`TRAINJOBS_WARM_LAUNCHERS=1`, the default); *cold*: it starts one with the job (`=0`), as every job "
        "did before. *Shell*: `python -m bench.support.plain_ddp` (a plain `torch.multiprocessing.spawn` "
        "script) started from the shell, to its own first step.",
        "",
        *table(
            ["path", "POST to running", "POST (or shell) to first step: median", "p90"],
            [
                [
                    "service, warm",
                    f"{warm['post_to_running']['median_s']} s",
                    f"**{warm['post_to_first_step']['median_s']} s**",
                    f"{warm['post_to_first_step']['p90_s']} s",
                ],
                [
                    "service, cold",
                    f"{cold['post_to_running']['median_s']} s",
                    f"{cold['post_to_first_step']['median_s']} s",
                    f"{cold['post_to_first_step']['p90_s']} s",
                ],
                ["shell, plain spawn script", "–", f"{shell['median_s']} s", f"{shell['p90_s']} s"],
            ],
        ),  # fmt: skip
        "",
    ]
