"""The scheduling rule, as the pure functions the worker and the waiting-reason sweep share."""

import time

from trainjobs.contract.workers import WorkerStatus
from trainjobs.jobs.scheduling import QueuedJob, first_in_line, waiting_reason


def job(name: str, needed: int, device: str = "cpu") -> QueuedJob:
    return QueuedJob(id=name, device=device, needed=needed)


def worker(slots: int, device: str = "cpu") -> WorkerStatus:
    return WorkerStatus(
        hostname=f"{device}-{slots}", device=device, slots=slots, busy=0, jobs=[], last_seen=time.time()
    )


def test_the_message_s_own_job_runs_when_nothing_older_waits():
    assert first_in_line(job("new", 1), [], slots=2) == job("new", 1)


def test_the_oldest_job_this_worker_could_hold_goes_first():
    older = [job("too-wide", 4), job("oldest-that-fits", 2), job("younger", 1)]
    assert first_in_line(job("new", 1), older, slots=2).id == "oldest-that-fits"


def test_an_older_job_no_worker_of_this_size_can_hold_blocks_nothing():
    assert first_in_line(job("new", 1), [job("too-wide", 3)], slots=2).id == "new"


def test_a_job_that_some_live_worker_can_hold_has_no_reason_to_wait():
    assert waiting_reason("cpu", 2, [worker(1), worker(2)]) is None


def test_a_job_wider_than_every_live_worker_says_how_wide_the_largest_is():
    reason = waiting_reason("cpu", 3, [worker(1), worker(2), worker(8, device="cuda")])
    assert reason == "needs 3 cpu devices; the largest live cpu worker has 2"


def test_a_job_without_a_live_worker_of_its_device_type_says_so():
    assert waiting_reason("cuda", 1, [worker(4)]) == "no live cuda worker"
