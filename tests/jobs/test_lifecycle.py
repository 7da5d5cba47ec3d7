"""A job's life (trainjobs.jobs.lifecycle) on real SQL: each transition starts only from the
states the state machine allows, and nothing else in the code writes a job's columns."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from devstack import job_sessions, tiny_wavenet_spec
from trainjobs.contract.events import StateChange
from trainjobs.contract.spec import JobSpec
from trainjobs.contract.states import JOB_STATES
from trainjobs.jobs import lifecycle
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import dispatch_intents, job_events, jobs
from trainjobs.jobs.tables import JobRow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def sessions(database_url, namespace):
    return job_sessions(database_url, namespace)


def new_job(sessions, state: str = "queued", attempt: int = 1) -> str:
    with transaction(sessions) as session:
        job = lifecycle.submit(session, "alice", JobSpec.model_validate(tiny_wavenet_spec()), None)
        job.state, job.attempt = state, attempt  # the state a test starts from
        dispatch_intents.remove(session, job.id)  # as once its message went out
        return job.id


def events_of(sessions, job_id: str) -> list[str]:
    with transaction(sessions) as session:
        return [event.kind for event in job_events.after(session, job_id, 0)]


def attempt_transition(session, job: JobRow, name: str) -> None:
    match name:
        case "cancel":
            lifecycle.cancel(session, job)
        case "finish":
            lifecycle.finish(session, job, job.attempt, StateChange(state="succeeded", stop_reason="completed"))
        case "requeue":
            lifecycle.requeue(session, job, "requeued: worker w was lost")
        case "explain_waiting":
            lifecycle.explain_waiting(session, job, "no live cpu worker")
        case "refuse":
            lifecycle.refuse(session, job, "worker w cannot build this spec")
        case "delete":
            lifecycle.delete(session, job)


@pytest.mark.parametrize("name", ["cancel", "finish", "requeue", "explain_waiting", "refuse", "delete"])
def test_a_transition_is_refused_from_every_state_it_does_not_start_from(sessions, name):
    allowed = lifecycle.TRANSITIONS[name].from_states
    for state in JOB_STATES:
        job_id = new_job(sessions, state)
        with transaction(sessions) as session:
            job = jobs.get(session, job_id, for_update=True)
            if state in allowed:
                attempt_transition(session, job, name)
            else:
                with pytest.raises(lifecycle.TransitionRefused):
                    attempt_transition(session, job, name)


def test_claim_takes_only_a_queued_job(sessions):
    for state in JOB_STATES:
        job_id = new_job(sessions, state)
        with transaction(sessions) as session:
            claimed = lifecycle.claim(session, job_id, "w1", lease_seconds=30)
            assert (claimed is not None) == (state == "queued"), state


def test_cancelling_a_job_that_is_already_cancelling_changes_nothing(sessions):
    job_id = new_job(sessions, "running")
    with transaction(sessions) as session:
        lifecycle.cancel(session, jobs.get(session, job_id, for_update=True))
    before = events_of(sessions, job_id)
    with transaction(sessions) as session:
        job = jobs.get(session, job_id, for_update=True)
        lifecycle.cancel(session, job)
        assert job.state == "cancelling"
    assert events_of(sessions, job_id) == before


def test_a_final_state_reported_by_an_older_attempt_is_refused(sessions):
    job_id = new_job(sessions, "running", attempt=2)
    with transaction(sessions) as session:
        job = jobs.get(session, job_id, for_update=True)
        with pytest.raises(lifecycle.TransitionRefused, match="stale"):
            lifecycle.finish(session, job, 1, StateChange(state="failed", stop_reason="error"))
        assert job.state == "running"


def test_requeue_raises_the_attempt_clears_the_lease_and_dispatches_again(sessions):
    job_id = new_job(sessions)
    with transaction(sessions) as session:
        lifecycle.claim(session, job_id, "w1", lease_seconds=30)
    with transaction(sessions) as session:
        job = jobs.get(session, job_id, for_update=True)
        lifecycle.requeue(session, job, "requeued: worker w1 was lost")
    with transaction(sessions) as session:
        job = jobs.get(session, job_id)
        assert (job.state, job.attempt, job.lease_owner, job.worker) == ("queued", 2, None, None)
        assert dispatch_intents.exists(session, job_id)
    assert events_of(sessions, job_id) == ["state", "state", "state"]  # submit, claim, requeue


def test_the_design_document_s_state_table_lists_every_transition():
    design = (ROOT / "docs" / "design.md").read_text()
    table = design[design.index("## A job's life") :]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]*) \| ([^|]*) \|", table, flags=re.MULTILINE)
    documented = {
        name: (set(re.findall(r"`(\w+)`", froms)), set(re.findall(r"`(\w+)`", tos))) for name, froms, tos in rows
    }
    expected = {t.name: (set(t.from_states), set(t.to_states)) for t in lifecycle.TRANSITIONS.values()}
    assert documented == expected


# ---- nothing else writes a job's columns ------------------------------------------------------

JOB_COLUMNS = set(JobRow.__table__.columns.keys())
# The job-life module, and the SQL it runs (its UPDATE statements and the event counter).
WRITERS = {
    "trainjobs/jobs/lifecycle.py",
    "trainjobs/jobs/repositories/jobs.py",
    "trainjobs/jobs/repositories/job_events.py",
}
WRITING_CALLS = {
    ("jobs", "claim"),
    ("jobs", "renew_lease"),
    ("jobs", "add"),
    ("jobs", "remove"),
    ("job_events", "append"),
    ("timeline", "state_changed"),
    ("timeline", "metrics_recorded"),
    ("timeline", "checkpoint_recorded"),
}


def _assigned(target: ast.expr) -> list[ast.expr]:
    """What an assignment writes to: `job.x`, each of a tuple's, and for `job.x[k]` the
    `job.x` it changes (not the `k` that only names the item: `seen[job.id] = ...` writes no job)."""
    if isinstance(target, ast.Tuple | ast.List):
        return [part for element in target.elts for part in _assigned(element)]
    if isinstance(target, ast.Starred):
        return _assigned(target.value)
    if isinstance(target, ast.Subscript):
        return _assigned(target.value)
    return [target]


def job_column_writes(tree: ast.AST) -> list[str]:
    """Assignments to a job row's columns, calls of the writing functions, setattr, update(JobRow)."""
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for part in _assigned(target):
                if (
                    isinstance(part, ast.Attribute)
                    and part.attr in JOB_COLUMNS
                    and isinstance(part.value, ast.Name)
                    and part.value.id in ("job", "row", "locked")
                ):
                    found.append(f"line {part.lineno}: {part.value.id}.{part.attr} =")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if (func.value.id, func.attr) in WRITING_CALLS:
                found.append(f"line {node.lineno}: {func.value.id}.{func.attr}(...)")
        elif isinstance(func, ast.Name) and func.id == "setattr":
            found.append(f"line {node.lineno}: setattr")
        elif (
            isinstance(func, ast.Name)
            and func.id == "update"
            and any(isinstance(arg, ast.Name) and arg.id == "JobRow" for arg in node.args)
        ):
            found.append(f"line {node.lineno}: update(JobRow)")
    return found


def test_no_module_but_the_job_life_module_writes_a_job_s_columns():
    offenders = {}
    for folder in ("service", "worker", "trainjobs"):
        for path in (ROOT / folder).rglob("*.py"):
            relative = str(path.relative_to(ROOT))
            if relative in WRITERS or relative == "trainjobs/jobs/timeline.py":
                continue
            writes = job_column_writes(ast.parse(path.read_text()))
            if writes:
                offenders[relative] = writes
    assert offenders == {}


def test_the_column_write_search_finds_a_write():
    # The search above must be able to fail: it finds the kinds of write it looks for.
    code = "\n".join(
        [
            "job.state = 'failed'",
            "jobs.claim(s, 'j', 'w', 1)",
            "s.execute(update(JobRow).values(x=1))",
            "setattr(job, 'a', 1)",
            "job.metrics['loss'] = 1.0",
            "seen[job.id] = job",
        ]
    )
    assert len(job_column_writes(ast.parse(code))) == 5
