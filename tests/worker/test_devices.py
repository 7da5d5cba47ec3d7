"""Device leases and which GPUs a rank sees (the GPU itself cannot exist here; this is the rule)."""

import threading

from trainjobs.worker.devices import DevicePool
from trainjobs.worker.trainer.distributed import gpu_visibility


def test_leases_never_share_a_device_and_release_returns_them():
    pool = DevicePool("cuda", [0, 1, 2, 3])
    first, second = pool.lease_devices(2, "a"), pool.lease_devices(1, "b")
    assert set(first.ids).isdisjoint(second.ids)
    assert pool.lease_devices(2, "c") is None and pool.busy == 3 and pool.jobs() == ["a", "b"]
    pool.release(first)
    third = pool.lease_devices(2, "c")
    assert third is not None and set(third.ids).isdisjoint(second.ids)


def test_a_job_leased_here_already_gets_no_second_lease_and_its_first_is_kept():
    pool = DevicePool("cpu", [0, 1])
    first = pool.lease_devices(1, "a")
    assert pool.lease_devices(1, "a") is None  # two messages for one job, handled at once
    assert pool.busy == 1 and pool.jobs() == ["a"]
    pool.release(first)
    assert pool.busy == 0 and pool.jobs() == []


def test_concurrent_leases_hand_out_each_device_once():
    pool = DevicePool("cpu", list(range(8)))
    leases, barrier = [], threading.Barrier(8)

    def take(index):
        barrier.wait()
        leases.append(pool.lease_devices(1, f"job{index}"))

    threads = [threading.Thread(target=take, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(device for lease in leases for device in lease.ids) == list(range(8))


def test_each_ddp_rank_sees_only_its_leased_gpu_and_dataparallel_sees_all():
    assert gpu_visibility(0, 2, [2, 3]) == ("2", 0)
    assert gpu_visibility(1, 2, [2, 3]) == ("3", 0)
    assert gpu_visibility(0, 1, [4, 5, 6]) == ("4,5,6", 0)  # strategy dp: one process, all GPUs
    assert gpu_visibility(1, 2, None) == (None, 1)  # trainjobs train: the shell's GPUs
