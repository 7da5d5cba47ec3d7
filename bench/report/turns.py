"""Section 1c: the service's job and the plain loop alive at once, taking turns on the machine."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table
from bench.support.ratios import pooled

POOLED = (
    "All pairs pooled: the geometric mean of the pairs' ratios, with a 95% bootstrap interval (pairs "
    "resampled), and the spread of one pair's ratio (standard deviation of its logarithm). The control's "
    "spread is what two identical processes differ by on this machine: the floor under any one pair."
)


def headlines(results: dict[str, Any]) -> list[Headline]:
    service = results["taking_turns"]["pooled"].get("service")
    worst = min(row["ratio"] for row in results["taking_turns"]["rows"] if row["pair"] == "service / plain")
    if service is None:
        return []
    low, high = service["interval_95"]
    return [
        Headline(
            "service / plain throughput, all pairs pooled",
            f"**{service['geometric_mean']}** ({low}–{high})",
            "1.0: no tax for the service",
        ),
        Headline("the lowest configuration's median of pairs", str(worst), "≥ 0.99"),
    ]


def render(results: dict[str, Any]) -> list[str]:
    turns = results["taking_turns"]
    return [
        *_method(turns),
        "",
        *table(
            [
                "pair",
                "ranks",
                "precision",
                "accumulation",
                "clips",
                "first",
                "second",
                "ratio (median of pairs)",
                "geometric mean (95% interval)",
                "per pair",
                "offset",
            ],
            [_row(row) for row in turns["rows"]],
        ),  # fmt: skip
        "",
        POOLED,
        "",
        *table(["pairs of", "pairs", "geometric mean", "95% interval", "spread of one pair"], _pooled_rows(turns)),
        "",
    ]


def _row(r: dict[str, Any]) -> list[object]:
    offset = "–" if r.get("offset_s") is None else format(r["offset_s"], "+.1f") + " s"
    return [
        r["pair"], r["ranks"], r["precision"], r["accumulation"], r["clips"], r["a_samples_per_s"],
        r["b_samples_per_s"], f"**{r['ratio']}**", with_interval(r["pair_ratios"]),
        ", ".join(map(str, r["pair_ratios"])), offset,
    ]  # fmt: skip


def _pooled_rows(turns: dict[str, Any]) -> list[list[object]]:
    rows: list[list[object]] = []
    for name, figures in turns["pooled"].items():
        spread = "–" if figures["spread_of_pairs"] is None else f"{100 * figures['spread_of_pairs']:.1f}%"
        low, high = figures["interval_95"]
        label = "service / plain" if name == "service" else "plain / plain (control)"
        rows.append([label, figures["pairs"], f"**{figures['geometric_mean']}**", f"{low} – {high}", spread])
    return rows


def with_interval(ratios: list[float]) -> str:
    """A configuration's pairs as the pooled row shows all of them: geometric mean (95% bootstrap interval)."""
    figures = pooled(ratios)
    low, high = figures["interval_95"]
    return f"{figures['geometric_mean']:.3f} ({low:.3f} – {high:.3f})"


def _method(turns: dict[str, Any]) -> list[str]:
    alternates = (
        ", and which side takes the first turn alternates from pass to pass (the service, or the control's first "
        "process, in odd passes)"
        if turns.get("first_turn_alternates")
        else ""
    )
    return [
        "Runs minutes apart (section 1) differ by more than 1% on a shared machine, and so do two loops "
        "training at the same moment on the two cores (section 1b, when run). Here the service's job and the "
        "plain loop (`python -m bench.support.plain_ddp`, as a shell starts it) are alive at once and take "
        f"turns on the whole machine, {turns['turn_seconds']} s each: one side runs while every process group of "
        "the other is stopped (SIGSTOP, SIGCONT). The service's side is all of it: the API, the worker, the job's "
        "launcher, fork server and ranks, so what the service does while a job trains is paid in its own turns. "
        "What it does on a clock (sweeps, heartbeats, lease renewals, its servers' housekeeping) falls due in the "
        "plain loop's turns too and is done in its own, so per second of training it pays about twice what a job "
        "running alone pays for it: these rows lean against the service. The i-th rank of either side is pinned "
        "to core i. A loop's rate over an epoch is its samples over the seconds of its own turns inside the "
        "epoch's wall-clock window (the service's from rank 0's reports, replayed from the job's event stream). "
        f"Each pair is a fresh plain process and a fresh job of {turns['epochs']} epochs of about 12 s (of "
        "turns); its ratio is over the epochs after the first. A configuration's pairs lie minutes apart (one "
        f"pass over all configurations per pair){alternates}; its ratio is the median of its pairs', beside "
        "their geometric mean with a 95% bootstrap interval (pairs resampled; with so few pairs, narrower than "
        "the truth: read it against the control rows'). The plain / plain rows are the control: two plain "
        "processes taking turns the same way. The job is posted once the plain loop's first optimizer step is "
        "done, so that both train from about the same moment (a warm worker starts a job's ranks within a "
        "second, the plain script takes seconds); *offset*: how long after the plain loop's timed epoch the "
        "job's began (median of pairs).",
    ]
