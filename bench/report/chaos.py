"""Section 13: the chaos run."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table
from devstack.chaos.invariants import PROMISES


def _count(value: Any) -> int:
    return len(value) if isinstance(value, list) else int(value)


def headlines(results: dict[str, Any]) -> list[Headline]:
    found = results["chaos"]
    broken = sum(_count(found[name]) for name in PROMISES)
    return [
        Headline(
            f"chaos run: promises broken over {found['jobs']} jobs and {sum(found['faults'].values())} faults",
            f"**{broken}**",
            "0 (issue 36)",
        )
    ]


def render(results: dict[str, Any]) -> list[str]:
    found = results["chaos"]
    return [
        f"`python -m bench chaos --minutes {found['seconds'] // 60} --seed {found['seed']}` (bench/chaos.py, "
        "devstack/chaos/): its own PostgreSQL and Redis, the API in two processes, three workers of 2 cpu slots "
        "on hosts of their own (network namespaces, separate homes, run folders on 64 MiB tmpfs), checkpoints in "
        "a folder all hosts mount. A seeded stream of jobs from three owners (kinds below; 15% cancelled on "
        "purpose 1-10 s after submission) and a seeded fault every 6 s on average. The same seed replays the "
        "same kinds, moments and durations; what a fault hits is chosen by a seeded position among the "
        "candidates of that moment. A job run twice at once is seen from outside: every 0.1 s, each live rank "
        "process and the job and attempt its log belongs to.",
        "",
        *table(["promise", "count"], [[name, f"**{_count(found[name])}**"] for name in PROMISES]),
        "",
        *_faults_and_jobs(found),
        "",
        "Jobs that failed, each with its error (a job fails where its own launcher or rank is killed, or its "
        "rank cannot write its folder; a lost worker or network requeues it instead):",
        "",
        *[f"- `{job}`: {why}" for job, why in sorted(found["failed, why"].items())],
        "",
        f"Dead letters: {len(found['dead letters'])}"
        + ("." if not found["dead letters"] else ", each with its reason:"),
        *[f"- `{letter}`" for letter in found["dead letters"]],
        "",
    ]


def _faults_and_jobs(found: dict[str, Any]) -> list[str]:
    faults = sorted(found["faults"].items(), key=lambda item: -item[1])
    missed = found["faults_without_target"]
    jobs = [
        str(found["jobs"]),
        ", ".join(f"{kind} {count}" for kind, count in sorted(found["job_kinds"].items())),
        ", ".join(f"{state} {count}" for state, count in sorted(found["ended"].items())),
        str(found["attempts"]),
        str(found["preemptions"]),
    ]
    return [
        *table(["fault", "injected", "found nothing to hit"], [[k, str(n), str(missed.get(k, 0))] for k, n in faults]),
        "",
        *table(["jobs", "by kind", "ended by state", "attempts", "preemptions"], [jobs]),
    ]
