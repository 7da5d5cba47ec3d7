"""Section 9: the memory of a 2-rank cpu job, service against plain script."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table


def headlines(results: dict[str, Any]) -> list[Headline]:
    over = results["memory"]["service_over_plain_mib"]
    return [Headline("memory of a 2-rank job over the plain script (PSS)", f"**{over} MiB**", "≤ +150 MiB")]


def render(results: dict[str, Any]) -> list[str]:
    m = results["memory"]
    return [
        "PSS summed over the job's process tree, median of 8 samples while it trains (wavenet, 2 cpu ranks).",
        "",
        *table(
            ["service (launcher, fork server, ranks, waiting launchers)", "plain spawn script (script, ranks)", "over"],
            [[f"{m['service_pss_mib']} MiB", f"{m['plain_pss_mib']} MiB", f"**{m['service_over_plain_mib']} MiB**"]],
        ),
        "",
    ]
