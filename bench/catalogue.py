"""Every benchmark, in the order of BENCHMARKS.md: its name (the CLI's, and the module
bench/<name>.py that measures it), its section, its title, where results.json keeps its figures,
and whether `make bench` runs it. The CLI (`python -m bench`) and the report (bench/report/)
both read this list and nothing else."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Benchmark:
    name: str
    section: str  # "1", "1b", ... "11": its place in BENCHMARKS.md
    title: str
    keys: tuple[str, ...]  # where bench/results.json keeps its figures
    in_make_bench: bool = True  # False: run only when named; a whole run keeps its last figures
    measured_by: str | None = None  # another benchmark's run measures it (not runnable alone)
    # Its tiny form (seconds): `run`'s options for the smoke lane (tests/bench/), which runs every
    # benchmark so, with BENCH_EPOCH_SECONDS short, and checks that its report finds every figure.
    smoke: dict[str, Any] = field(default_factory=dict)
    smoke_epoch_seconds: float = 0.5  # BENCH_EPOCH_SECONDS in its tiny form

    @property
    def runnable(self) -> bool:
        return self.measured_by is None

    @property
    def module(self) -> ModuleType:
        return importlib.import_module(f"bench.{self.name}")

    @property
    def report(self) -> ModuleType:
        """bench/report/<name>.py: `render(results) -> lines` and `headlines(results) -> rows`."""
        return importlib.import_module(f"bench.report.{self.name}")

    def measure(self, **options: Any) -> dict[str, Any]:
        """Run it (its module's `run`); its figures keyed as results.json keeps them."""
        found: dict[str, Any] = self.module.run(**options)
        return found


def _section_order(benchmark: Benchmark) -> tuple[int, str]:
    number = "".join(char for char in benchmark.section if char.isdigit())
    return int(number), benchmark.section[len(number) :]


# Overhead (sections 1 and 2, about 40 minutes) is run only when named: its rounds lie minutes
# apart, and the machine's drift over minutes (plain runs of one configuration 2 to 20% apart) is
# far above the 1% to be resolved; taking turns (1c) makes the same comparison without that
# drift. Side by side (1b): taking turns measures what it did for every configuration. Gap (1d)
# takes one configuration apart to find where a shortfall lies. GPU (6) needs a GPU host.
CATALOGUE: tuple[Benchmark, ...] = tuple(
    sorted(
        (
            Benchmark(
                "overhead",
                "1",
                "Trainer overhead: the whole service against a plain DDP loop",
                ("overhead", "scaling"),
                False,
                smoke={"epochs": 2, "repeats": 1, "configurations": [(1, "fp32", 1), (2, "fp32", 1)]},
            ),
            Benchmark(
                "sidebyside",
                "1b",
                "Side by side: two loops over the same seconds",
                ("side_by_side",),
                False,
                smoke={"configurations": [(1, "fp32", 1)], "control": (1, "fp32", 4)},
                smoke_epoch_seconds=3,
            ),
            Benchmark(
                "turns",
                "1c",
                "Taking turns: the service's job and the plain loop",
                ("taking_turns",),
                smoke={"configurations": [(1, "fp32", 1)], "controls": [(1, "fp32", 4)], "pairs": 2},
            ),
            Benchmark(
                "gap",
                "1d",
                "Where a shortfall lies: one configuration taken apart",
                ("gap",),
                False,
                smoke={"pairs": 1},
            ),
            Benchmark(
                "sandbox_cost",
                "1e",
                "The sandbox's cost on throughput",
                ("sandbox_cost",),
                smoke={"configurations": [(1, "fp32", 1)], "pairs": 1},
            ),
            Benchmark(
                "own_loss",
                "1f",
                "A loss of the model's own: the hook against the built-in path and the plain loop",
                ("own_loss",),
                smoke={"configurations": [(1, "fp32", 1)], "pairs": 1},
            ),
            Benchmark("scaling", "2", "Scaling on this machine (2 ranks / 1 rank)", ("scaling",), False, "overhead"),
            Benchmark(
                "dispatch",
                "3",
                "Start-up: POST to the end of the first optimizer step",
                ("dispatch",),
                smoke={"repeats": 1},
            ),
            Benchmark(
                "code_startup", "3b", "Start-up of jobs with their own code", ("code_startup",), smoke={"repeats": 1}
            ),
            Benchmark(
                "preemption",
                "3c",
                "A preemption: the preemptor's POST to its first step",
                ("preemption",),
                smoke={"repeats": 1},
            ),
            Benchmark(
                "api",
                "4",
                "The API under dashboard load",
                ("api",),
                smoke={"sizes": (100,), "databases": ("sqlite",), "concurrency": (1,), "seconds": 1},
            ),
            Benchmark(
                "ingest",
                "5",
                "Metrics ingestion: the collector, Redis stream to SQL",
                ("ingest",),
                smoke={"databases": ("sqlite",), "jobs": 2, "epochs": 3},
            ),
            Benchmark(
                "gpu",
                "6",
                "GPU: resnet50 through the trainer",
                ("gpu",),
                False,
                smoke={"device": "cpu", "image_size": 32, "batch_size": 2, "epochs": 2, "precisions": ("fp32",)},
            ),
            Benchmark("fleet", "7", "A fleet of hosts", ("fleet",), smoke={"rounds": 1, "megabytes": 1, "repeats": 1}),
            Benchmark(
                "search",
                "8",
                "Job search at 100,000 jobs",
                ("search",),
                smoke={"count": 300, "databases": ("sqlite",), "requests": 5},
            ),
            Benchmark("memory", "9", "Memory of a 2-rank cpu job", ("memory",)),
            Benchmark(
                "polling",
                "10",
                "Polling a job",
                ("polling",),
                smoke={"sizes": (100,), "databases": ("sqlite",), "seconds": 4, "profile": False, "api_workers": 1},
            ),
            Benchmark(
                "steps",
                "11",
                "Where a training step's time goes",
                ("steps",),
                smoke={"configurations": ((1, "fp32", 1),), "seconds": 1},
                smoke_epoch_seconds=3,
            ),
            Benchmark("sharing_rule", "12", "The sharing rule's cost", ("sharing_rule",), smoke={"repeats": 1}),
            Benchmark(
                "chaos",
                "13",
                "The chaos run: many faults over many jobs",
                ("chaos",),
                False,
                smoke={"minutes": 0.25, "seed": 1},
            ),
        ),
        key=_section_order,
    )
)

BY_NAME = {benchmark.name: benchmark for benchmark in CATALOGUE}


def named(names: list[str]) -> list[Benchmark]:
    """The benchmarks of these names, in catalogue order (KeyError for an unknown one)."""
    wanted = {BY_NAME[name].name for name in names}
    return [benchmark for benchmark in CATALOGUE if benchmark.name in wanted]
