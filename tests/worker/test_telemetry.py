"""What each epoch reports besides its loss, on the real trainer: data-loading wait, memory."""

from __future__ import annotations

import pytest

from tests.worker.local_training import run_locally


def sleepy_spec(num_workers: int) -> dict:
    return {
        "model": {"name": "mlp", "params": {"hidden": [2048, 2048]}},
        "data": {
            "name": "sleepy-blobs",
            "params": {"num_samples": 300, "sleep_seconds": 0.003, "num_workers": num_workers},
        },
        "device": "cpu",
        "gpus": 1,
        "epochs": 2,
        "batch_size": 20,
        "optimizer": {"name": "sgd", "lr": 0.01},
        "lr_scaling": "none",
    }


def test_a_slow_loader_shows_a_high_data_wait_and_loader_workers_bring_it_down(plugin_installed, tmp_path):
    alone = run_locally(tmp_path, "alone", sleepy_spec(num_workers=0))
    # 3 ms a sample: a batch waits 60 ms alone, 15 ms with 4 workers, against 15-50 ms of compute
    # (the latter on 2 busy cores), so the fraction stands apart even with other tests running.
    helped = run_locally(tmp_path, "helped", sleepy_spec(num_workers=4))
    assert alone.outcome.state == helped.outcome.state == "succeeded"
    waited_alone = max(row["data_wait_fraction"] for row in alone.metrics)
    waited_helped = [row["data_wait_fraction"] for row in helped.metrics][-1]  # its workers warmed up
    assert waited_alone > 0.4, alone.metrics
    assert waited_helped < 0.6 * waited_alone, (waited_alone, waited_helped)


def test_every_epoch_reports_its_data_wait_memory_and_gpu_use_within_their_ranges(tmp_path):
    from tests.worker.local_training import mlp_spec

    run = run_locally(tmp_path, "figures", mlp_spec(epochs=2))
    assert (run.outcome.state, run.outcome.stop_reason) == ("succeeded", "completed")
    assert [row["epoch"] for row in run.metrics] == [1, 2]
    for row in run.metrics:
        assert 0.0 <= row["data_wait_fraction"] <= 1.0
        assert 10 * 2**20 < row["peak_memory_bytes"] < 64 * 2**30  # a process with torch loaded
        assert row["gpu_utilization"] is None  # cpu


def test_a_local_run_keeps_its_events_as_the_service_stream_carries_them(tmp_path):
    from tests.worker.local_training import mlp_spec
    from trainjobs.contract.events import EpochMetrics, JobEvent, Progress

    run = run_locally(tmp_path, "events", mlp_spec(epochs=2))
    assert run.outcome.state == "succeeded", run.outcome
    lines = (tmp_path / "runs" / "events" / "events.jsonl").read_text().splitlines()
    events = [JobEvent.model_validate_json(line) for line in lines]
    assert {(event.job_id, event.attempt) for event in events} == {("events", 1)}
    payloads = [event.payload() for event in events]
    epoch_ends = [p.epoch for p in payloads if isinstance(p, Progress) and p.step == p.steps]
    metrics = [p.model_dump(mode="json") for p in payloads if isinstance(p, EpochMetrics)]
    assert epoch_ends == [1, 2]  # each epoch's last progress report: where it ended, wall clock
    assert metrics == run.metrics  # the same figures as metrics.jsonl


class FakeNvml:
    """NVML on a host with 4 GPUs, each busy at its own rate (no NVML library can run here)."""

    UUIDS = [f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd" for index in range(4)]

    def __init__(self):
        self.asked: list[str] = []

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid: bytes) -> str:
        assert uuid.decode() in self.UUIDS, uuid
        return uuid.decode()

    def nvmlDeviceGetUtilizationRates(self, handle: str):
        from types import SimpleNamespace

        self.asked.append(handle)
        return SimpleNamespace(gpu=10 * (self.UUIDS.index(handle) + 1))


def test_gpu_use_is_read_from_nvml_for_the_rank_s_own_gpu_and_no_other(monkeypatch):
    """In a job leased GPUs 1 and 3, its rank 1 is cuda:1 (the host's GPU 3, UUID ...3): NVML numbers
    GPUs by the host, so the sampler must find its GPU by UUID, not by CUDA's index."""
    import sys
    import time
    from types import SimpleNamespace

    import torch

    from trainjobs.worker.trainer.telemetry import GpuSampler

    nvml = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    leased = {0: 1, 1: 3}  # the job's cuda:i -> the host's GPU (the CUDA runtime cannot run here)
    uuid_of = {index: FakeNvml.UUIDS[host].removeprefix("GPU-") for index, host in leased.items()}
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(uuid=uuid_of[device.index]))

    sampler = GpuSampler(torch.device("cuda", 1), every_seconds=0.01)
    sampler.start()
    time.sleep(0.2)
    utilization = sampler.stop()
    assert nvml.asked and set(nvml.asked) == {FakeNvml.UUIDS[3]}
    assert utilization == pytest.approx(0.4)  # GPU 3's rate, not GPU 1's (cuda:1's index in NVML's numbering)
