"""Section 7: a job across two workers, and the checkpoint store."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table


def headlines(results: dict[str, Any]) -> list[Headline]:
    ratio = results["fleet"]["throughput"]["ratio"]
    return [Headline("2 nodes x 1 rank / 1 node x 2 ranks, samples/s", str(ratio), "≈ 1 on one machine")]


def render(results: dict[str, Any]) -> list[str]:
    f = results["fleet"]
    t = f["throughput"]
    return [
        "Wavenet on cpu, 2 ranks with one thread each, interleaved rounds: across 2 workers (2 nodes x 1 "
        "rank, gloo over loopback between the workers' processes) against 1 worker (1 node x 2 ranks).",
        "",
        *table(
            ["2 nodes x 1 rank", "1 node x 2 ranks", "ratio (median of rounds)", "per round"],
            [
                [
                    f"{t['two_nodes_samples_per_s']} samples/s",
                    f"{t['one_node_samples_per_s']} samples/s",
                    f"**{t['ratio']}**",
                    ", ".join(map(str, t["round_ratios"])),
                ]
            ],
        ),  # fmt: skip
        "",
        "A 100 MB checkpoint (one tensor), median of 3, written as rank 0 writes it (spooled, fsynced, "
        "hashed, put whole) and read as a resume reads it:",
        "",
        *table(
            ["store", "write", "read"],
            [[r["store"], f"{r['write_s']} s", f"{r['read_s']} s"] for r in f["checkpoint_io"]],
        ),
        "",
    ]
