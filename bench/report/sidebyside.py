"""Section 1b: the service's 1-rank job and the plain loop training over the same seconds."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table


def headlines(results: dict[str, Any]) -> list[Headline]:
    return []


def render(results: dict[str, Any]) -> list[str]:
    from bench.sidebyside import EPOCHS

    rows = results["side_by_side"]
    return [
        "A shared 2-core machine's speed drifts over seconds (on 2026-12-04, a probe run by hand on an AMD EPYC "
        "machine of this kind, not by this benchmark: a fixed matrix product on one core ran at 0.81 to 1.14 of "
        "its median in half-second windows, with no steal time), so runs a minute apart differ by more than "
        "1%. Here the two loops train at the same moment, each rank on one of the 2 cores, and are "
        f"timed over the same seconds: the windows are the service's epochs after the first (of {EPOCHS}, about "
        "12 s each; the end from rank 0's end-of-epoch progress report), and the plain loop's samples over each "
        "window come from its record of every optimizer step. The ratio is the median of the windows' ratios. "
        "The last row is the control: two plain loops side by side, one's epochs as windows. It shows what is "
        "left of the noise: each core has its own neighbours on the host, so two identical loops still differ "
        "by a few %, and a service row inside the control's spread shows no difference this method can see. "
        "This measures the work inside the rank; the cores the service's own processes take land on both ranks "
        "here, and are in section 1's CPU table.",
        "",
        *table(
            ["pair", "ranks", "precision", "accumulation", "clips", "first", "second", "ratio (median)", "per window"],
            [
                [
                    r["pair"],
                    r["ranks"],
                    r["precision"],
                    r["accumulation"],
                    r["clips"],
                    r["a_samples_per_s"],
                    r["b_samples_per_s"],
                    f"**{r['ratio']}**",
                    ", ".join(map(str, r["window_ratios"])),
                ]
                for r in rows
            ],
        ),  # fmt: skip
        "",
    ]
