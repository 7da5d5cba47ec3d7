"""Section 1f: a loss of the model's own, against the built-in path and the plain loop, taking turns."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table

GOALS = {"hook / built-in": "≥ 0.99: the hook costs nothing measurable", "service / plain": "≥ 0.99"}


def headlines(results: dict[str, Any]) -> list[Headline]:
    found = results["own_loss"]["pooled"]
    return [
        Headline(
            f"own loss: {name} throughput, all pairs pooled",
            f"**{pooled['geometric_mean']}** ({pooled['interval_95'][0]}–{pooled['interval_95'][1]})",
            GOALS[name],
        )
        for name, pooled in found.items()
    ]


def render(results: dict[str, Any]) -> list[str]:
    found = results["own_loss"]
    lines = [
        "wavenet (epochs of about 12 s) with its cross-entropy given as the model entry's own loss (a plugin, "
        "bench/support/hooked_wavenet): *hook / built-in* trains it and the plain built-in wavenet through the "
        "trainer alone (`trainjobs train`'s launcher and ranks); *service / plain* trains the hooked job through "
        "the whole service against the plain DDP loop computing the same loss inline. Taking turns every 0.2 s as "
        f"in §1c; {found['epochs']} epochs, the second timed; the side going first alternates (bench/own_loss.py).",
        "",
        *_rows_table(found["rows"]),
        "",
    ]
    for name, pooled in found["pooled"].items():
        lines.append(
            f"{name}, all {pooled['pairs']} pairs pooled: **{pooled['geometric_mean']}** (95% interval "
            f"{pooled['interval_95'][0]}–{pooled['interval_95'][1]}; one pair's spread {pooled['spread_of_pairs']})."
        )
    return [*lines, ""]


def _rows_table(rows: list[dict[str, Any]]) -> list[str]:
    columns = ["pair", "ranks", "precision", "accumulation", "clips", "first", "second", "ratio (median)", "per pair"]
    return table(
        [*columns, "offset"],
        [
            [
                row["pair"], str(row["ranks"]), row["precision"], str(row["accumulation"]), str(row["clips"]),
                f"{row['a_samples_per_s']}", f"{row['b_samples_per_s']}", f"**{row['ratio']}**",
                ", ".join(map(str, row["pair_ratios"])), f"{row['offset_s']:+.1f} s",
            ]
            for row in rows
        ],
    )  # fmt: skip
