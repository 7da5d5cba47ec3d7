"""Section 1e: the sandbox's cost on throughput, sandboxed / unsandboxed, taking turns."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table


def headlines(results: dict[str, Any]) -> list[Headline]:
    pooled = results["sandbox_cost"]["pooled"]
    low, high = pooled["interval_95"]
    return [
        Headline(
            "sandboxed / unsandboxed throughput, all pairs pooled",
            f"**{pooled['geometric_mean']}** ({low}–{high})",
            "1.0: the sandbox costs nothing",
        )
    ]


def render(results: dict[str, Any]) -> list[str]:
    found = results["sandbox_cost"]
    pooled = found["pooled"]
    return [
        "The same wavenet job (epochs of about 12 s) through two stacks alive at once, one whose worker sandboxes "
        "every job (bubblewrap) and one with `TRAINJOBS_SANDBOX=off`, taking turns on the machine every 0.2 s as "
        f"in §1c; {found['epochs']} epochs, the second timed; the side going first alternates (bench/sandbox_cost.py).",
        "",
        *table(
            ["ranks", "precision", "accumulation", "clips", "sandboxed", "unsandboxed", "ratio per pair"],
            [
                [
                    str(row["ranks"]),
                    row["precision"],
                    str(row["accumulation"]),
                    str(row["clips"]),
                    f"{row['sandboxed_samples_per_s']} samples/s",
                    f"{row['unsandboxed_samples_per_s']} samples/s",
                    ", ".join(map(str, row["pair_ratios"])),
                ]
                for row in found["rows"]
            ],
        ),  # fmt: skip
        "",
        f"All {pooled['pairs']} pairs pooled: **{pooled['geometric_mean']}** (95% interval "
        f"{pooled['interval_95'][0]}–{pooled['interval_95'][1]}; one pair's spread {pooled['spread_of_pairs']}).",
        "",
    ]
