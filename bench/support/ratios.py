"""Ratios of two loops' rates: one pair's, and many pairs' pooled with a bootstrap interval."""

from __future__ import annotations

import math
import random
import statistics


def compared(a_rates: list[float], b_rates: list[float]) -> dict:
    """One pair's rounds (epochs after the first, paired by number) and its ratio (their
    geometric mean)."""
    rounds = list(zip(a_rates[1:], b_rates[1:], strict=False))
    ratios = [a / b for a, b in rounds]
    return {
        "a_samples_per_s": statistics.median(a for a, _ in rounds),
        "b_samples_per_s": statistics.median(b for _, b in rounds),
        "ratio": statistics.geometric_mean(ratios),
        "round_ratios": [round(ratio, 3) for ratio in ratios],
    }


def pooled(ratios: list[float], resamples: int = 10_000) -> dict:
    """Geometric mean of pair ratios, with a 95% bootstrap interval (pairs resampled)."""
    rng = random.Random(0)
    means = sorted(statistics.geometric_mean(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return {
        "pairs": len(ratios),
        "geometric_mean": round(statistics.geometric_mean(ratios), 4),
        "interval_95": [round(means[int(0.025 * resamples)], 4), round(means[int(0.975 * resamples)], 4)],
        "spread_of_pairs": round(statistics.stdev(math.log(r) for r in ratios), 4) if len(ratios) > 1 else None,
    }
