"""Section 1: the trainer's overhead, through the whole service against a plain DDP loop."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table

METHOD = (
    "Samples/s, median of rounds (each run's figure the median epoch after the first). Wavenet 32/64 "
    "channels, depth 6 x 2, clips of 1024 samples, batch 8, SGD, one thread per rank. Each configuration's "
    "data set is sized for epochs of about 12 s from a few timed steps (bf16 on a CPU without bf16 "
    "instructions is several times slower than fp32). Each round runs the service's job and the plain loop "
    "on the same spec, in alternating order; the ratio is the median of the rounds' ratios. The service's "
    "stack runs with the settings' defaults. Run when named, not by `make bench`: `python -m bench overhead` "
    "(all 8 configurations, about 40 minutes) or `--config 2,fp32,1`. Its rounds lie minutes apart, and "
    "the machine drifts by more than 1% over minutes (the last column): section 1c, taking turns, takes that "
    "drift out."
)
SPREAD = (
    "*Plain runs: spread*: the fastest of a configuration's plain-loop runs over its slowest, the same "
    "script on the same spec minutes apart. It is the noise the interleaved ratio carries; section 1c "
    "has the two loops take turns over the same stretch of time instead."
)
ROLES = ("ranks", "launcher", "worker", "api", "redis", "sql", "other")


def headlines(results: dict[str, Any]) -> list[Headline]:
    ratios = [row["ratio"] for row in results.get("overhead", [])]
    if not ratios:
        return []
    return [Headline("service / plain, rounds minutes apart (8 configurations)", f"{min(ratios)}–{max(ratios)}", "–")]


def render(results: dict[str, Any]) -> list[str]:
    rows = results["overhead"]
    lines = [
        METHOD,
        "",
        *table(
            [
                "ranks",
                "precision",
                "accumulation",
                "clips (epoch)",
                "service",
                "plain DDP",
                "ratio (median of rounds)",
                "per round",
                "plain runs: spread",
            ],
            [
                [
                    r["ranks"],
                    r["precision"],
                    r["accumulation"],
                    f"{r.get('clips', 1126)} ({r.get('epoch_seconds', '~11')} s)",
                    r["service_samples_per_s"],
                    r["plain_samples_per_s"],
                    f"**{r['ratio']}**",
                    ", ".join(map(str, r.get("round_ratios", []))),
                    spread(r.get("plain_runs")),
                ]
                for r in rows
            ],
        ),  # fmt: skip
        "",
        SPREAD,
        "",
    ]
    if all("service_cpu" in r for r in rows):
        lines += cpu_table(rows)
    return lines


def cpu_table(rows: list[dict[str, Any]]) -> list[str]:
    cells = []
    for r in rows:
        for run in ("service", "plain"):
            cpu = r[f"{run}_cpu"]
            cores = [f"{cpu[f'{role}_cores']:.3f}" for role in ROLES]
            waiting = f"{100 * cpu['ranks_waiting_fraction']:.1f}%"
            cells.append([r["ranks"], r["precision"], r["accumulation"], run, *cores, waiting])
    return [
        "Where the cores went while each run trained (bench/support/process_cpu.py: every process's CPU time "
        "from /proc, from POST to the job's end, or over the plain script's life; median of rounds), in "
        "cores on average, and the share of the ranks' time spent waiting for a core. Each run starts "
        'on a quiet machine. "launcher" is the job\'s launcher, fork server and resource tracker (for the '
        'plain script, its resource tracker); "rest" includes this benchmark\'s own process, which polls '
        "the job twice a second.",
        "",
        *table(
            [
                "ranks",
                "precision",
                "accumulation",
                "run",
                "ranks",
                "launcher",
                "worker",
                "API",
                "Redis",
                "SQL",
                "rest",
                "ranks waiting",
            ],
            cells,
        ),  # fmt: skip
        "",
    ]


def spread(runs: list[float] | None) -> str:
    return f"{100 * (max(runs) / min(runs) - 1):.1f}%" if runs else "–"
