"""Whether any live worker could ever hold a job: the reasons the worker and the sharing rule share."""

import time

from trainjobs.contract.workers import WorkerStatus
from trainjobs.jobs.scheduling import waiting_reason


def worker(slots: int, device: str = "cpu") -> WorkerStatus:
    return WorkerStatus(
        hostname=f"{device}-{slots}", device=device, slots=slots, busy=0, jobs=[], last_seen=time.time()
    )


def test_a_job_that_some_live_worker_can_hold_has_no_reason_to_wait():
    assert waiting_reason("cpu", 2, [worker(1), worker(2)]) is None


def test_a_job_wider_than_every_live_worker_says_how_wide_the_largest_is():
    reason = waiting_reason("cpu", 3, [worker(1), worker(2), worker(8, device="cuda")])
    assert reason == "needs 3 cpu devices; the largest live cpu worker has 2"


def test_a_job_without_a_live_worker_of_its_device_type_says_so():
    assert waiting_reason("cuda", 1, [worker(4)]) == "no live cuda worker"


def test_a_job_needing_more_workers_than_hold_it_says_how_many_do():
    reason = waiting_reason("cpu", 2, [worker(2), worker(1)], nodes=2)
    assert reason == "needs 2 cpu workers with 2 devices each; 1 live cpu worker has that many"
