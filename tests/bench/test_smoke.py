"""The benchmarks' smoke lane: every benchmark of bench/catalogue.py runs in its tiny form
(`Benchmark.smoke`, epochs of about half a second: `smoke_epoch_seconds`) and must yield every figure its report section
reads. Figures are not judged here (timings belong to the benchmarks); a benchmark that no longer
runs, or whose report looks for a figure it no longer yields, fails like any other code."""

from __future__ import annotations

import pytest

from bench.catalogue import CATALOGUE, Benchmark
from bench.report import render

pytestmark = pytest.mark.e2e

RUNNABLE = [benchmark for benchmark in CATALOGUE if benchmark.runnable]


def _reported_by(benchmark: Benchmark) -> list[Benchmark]:
    """The sections one run fills: its own and those it measures for (overhead: scaling)."""
    return [each for each in CATALOGUE if each is benchmark or each.measured_by == benchmark.name]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("benchmark", RUNNABLE, ids=lambda benchmark: benchmark.name)
def test_each_benchmark_runs_in_its_tiny_form_and_yields_every_figure_its_report_reads(benchmark, monkeypatch):
    monkeypatch.setenv("BENCH_EPOCH_SECONDS", str(benchmark.smoke_epoch_seconds))
    found = benchmark.measure(**benchmark.smoke)
    for section in _reported_by(benchmark):
        missing = set(section.keys) - set(found)
        assert not missing, f"{benchmark.name} yielded no {sorted(missing)}"
        assert section.report.render(found), f"section {section.section} rendered nothing"
        section.report.headlines(found)  # reads the headline figures: a KeyError fails here
    page = render({**found, "measured": {benchmark.name: "the smoke run"}})
    assert f"## {benchmark.section}. {benchmark.title}" in page


def test_every_benchmark_has_a_tiny_form_that_its_run_accepts():
    import inspect

    for benchmark in RUNNABLE:
        accepted = inspect.signature(benchmark.module.run).parameters
        unknown = set(benchmark.smoke) - set(accepted)
        assert not unknown, f"{benchmark.name}: run() takes no {sorted(unknown)}"
