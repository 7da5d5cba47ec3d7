"""The API and the worker give way on the CPU to the ranks of the jobs beside them
(trainjobs/cpu_priority.py), through a real stack: the API's processes run at
TRAINJOBS_SERVICE_NICE, and so do the API's and the worker's session groups where the kernel has
them (each leads its session here, as under a service manager or in a container); a job's
launcher and ranks keep the normal priority."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import (
    HALF_SECOND_EPOCHS,
    child_pids,
    find_launcher,
    rank_pids,
    tiny_wavenet_spec,
    wait_for_terminal,
)
from trainjobs.cpu_priority import session_group_nice

pytestmark = pytest.mark.e2e


def nice_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[16])  # field 19 of proc(5): nice


def group_nice_of(pid: int) -> int | None:
    return session_group_nice(Path(f"/proc/{pid}/autogroup"))


def test_the_api_and_the_worker_give_way_and_a_jobs_launcher_and_ranks_keep_normal_priority(stack_on, sqlite_url):
    # 7, not the default, so that what is seen is the setting at work.
    stack = stack_on(sqlite_url, TRAINJOBS_SERVICE_NICE="7", TRAINJOBS_API_WORKERS="2")
    client = stack.client(stack.token())
    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(epochs=8, data=HALF_SECOND_EPOCHS)).json()["id"]
    ranks = rank_pids(job_id)
    launcher = find_launcher(job_id)
    worker = next(iter(stack.workers.values())).pid
    api_processes = [stack.api.pid, *child_pids(stack.api.pid)]  # the supervisor and its servers

    assert [nice_of(pid) for pid in api_processes] == [7] * len(api_processes)
    # The worker keeps its own: the launchers it starts, and their ranks, would inherit it.
    assert nice_of(worker) == 0
    assert [nice_of(pid) for pid in (launcher, *ranks.values())] == [0, 0, 0]
    if group_nice_of(worker) is not None:  # a kernel that schedules sessions as groups
        assert (group_nice_of(stack.api.pid), group_nice_of(worker)) == (7, 7)
        assert [group_nice_of(pid) for pid in (launcher, *ranks.values())] == [0, 0, 0]
    assert wait_for_terminal(client, job_id)["state"] == "succeeded"


def test_a_process_that_does_not_lead_its_session_leaves_its_session_group_alone():
    """Started from a shell, the API must not lower the shell's session group (and every command
    run in it): here the shell is the test run, whose group is read before and after."""
    before = session_group_nice()
    if before is None:
        pytest.skip("this kernel does not schedule sessions as groups")
    script = "from trainjobs.cpu_priority import give_way_to_jobs as g; print(g(5, whole_process=True))"
    changed = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    after = session_group_nice()
    if after != before:  # undo it for the rest of the run before failing
        Path("/proc/self/autogroup").write_text(str(before))
    assert changed == "['process nice 5']"
    assert after == before


def test_a_process_that_leads_its_session_lowers_its_group_and_zero_changes_nothing():
    script = (
        "from trainjobs.cpu_priority import give_way_to_jobs as g, session_group_nice as s; "
        "print(g({nice}, whole_process=False), s())"
    )
    if session_group_nice() is None:
        pytest.skip("this kernel does not schedule sessions as groups")

    def run(nice: int) -> str:
        return subprocess.run(
            [sys.executable, "-c", script.format(nice=nice)],
            capture_output=True,
            text=True,
            check=True,
            start_new_session=True,
        ).stdout.strip()

    assert run(9) == "['session group nice 9'] 9"
    assert run(0) == "[] 0"
