"""What an epoch tells besides its loss: time waiting for data, peak memory, GPU use, and
progress inside the epoch, reported by rank 0 at most once an interval.

No host-device sync is added to a step: the data wait is timed around the loader's `next()`
on the host, progress counts steps on the host, and peaks are read once per epoch.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import torch

from trainjobs.contract.events import Progress
from trainjobs.worker.trainer.distributed import all_reduce_max, all_reduce_sum

Batch = TypeVar("Batch")


class EpochTelemetry:
    def __init__(
        self,
        device: torch.device,
        world_size: int,
        epochs: int,
        steps_per_epoch: int,
        report: Callable[[Progress], None] | None,
        interval_seconds: float = 10.0,
    ):
        self.device = device
        self.world_size = world_size
        self.epochs = epochs
        self.steps_per_epoch = steps_per_epoch
        self.report = report  # rank 0 only
        self.interval_seconds = interval_seconds
        self.gpu = GpuSampler(device) if device.type == "cuda" else None
        self.first_step_logged = False

    def start_epoch(self, epoch: int) -> None:
        self.epoch, self.step, self.samples = epoch, 0, 0
        self.data_wait = 0.0
        self.started = self.last_report = time.perf_counter()
        self.samples_at_last_report = 0
        _reset_peak_memory(self.device)
        if self.gpu:
            self.gpu.start()

    def batches(self, loader: Iterable[Batch]) -> Iterator[Batch]:
        """The loader's batches, with the time spent blocked in its `next()` counted."""
        iterator = iter(loader)
        while True:
            waited_from = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self.data_wait += time.perf_counter() - waited_from
            yield batch

    def optimizer_step(self, samples: int) -> None:
        """After an optimizer step (`samples`: this rank's samples so far this epoch)."""
        self.step += 1
        self.samples = samples
        if not self.first_step_logged and self.report is not None:
            # A mark in rank 0's log for start-up measurements (bench dispatch): wall-clock time.
            print(f"first optimizer step done at {time.time():.3f}", flush=True)
            self.first_step_logged = True
        if self.report is not None and time.perf_counter() - self.last_report >= self.interval_seconds:
            self._report_progress()

    def finish_epoch(self) -> dict[str, Any]:
        """The epoch's figures, over all ranks (every rank calls this: it all-reduces)."""
        training_seconds = time.perf_counter() - self.started
        if self.report is not None:
            self._report_progress()
        peak = all_reduce_max([float(_peak_memory_bytes(self.device))], self.device)[0]
        utilization = self.gpu.stop() if self.gpu else None
        if utilization is not None:
            utilization = all_reduce_sum([utilization], self.device)[0] / self.world_size
        return {
            "data_wait_fraction": min(1.0, self.data_wait / training_seconds) if training_seconds > 0 else 0.0,
            "peak_memory_bytes": int(peak),
            "gpu_utilization": utilization,
        }

    def _report_progress(self) -> None:
        assert self.report is not None
        now = time.perf_counter()
        elapsed = max(now - self.last_report, 1e-9)
        samples_per_second = (self.samples - self.samples_at_last_report) * self.world_size / elapsed
        step_seconds = (now - self.started) / self.step if self.step else None
        remaining_steps = (self.epochs - self.epoch) * self.steps_per_epoch + max(self.steps_per_epoch - self.step, 0)
        self.report(
            Progress(
                epoch=self.epoch,
                step=min(self.step, self.steps_per_epoch),
                steps=self.steps_per_epoch,
                samples_per_second=samples_per_second,
                eta_seconds=remaining_steps * step_seconds if step_seconds is not None else None,
                at=datetime.now(UTC),
            )
        )
        self.last_report, self.samples_at_last_report = now, self.samples


def _reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    # Linux: writing 5 resets this process's peak resident set size (VmHWM) to the current one.
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class GpuSampler:
    """The rank's GPU utilisation through NVML, sampled every half second in a thread; the
    epoch's mean, or None where NVML cannot be read (no nvidia-ml-py, no driver)."""

    def __init__(self, device: torch.device, every_seconds: float = 0.5):
        self.every_seconds = every_seconds
        self.handle: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            # NVML numbers GPUs physically; CUDA_VISIBLE_DEVICES may have renumbered them.
            uuid = str(torch.cuda.get_device_properties(device).uuid)
            self.handle = pynvml.nvmlDeviceGetHandleByUUID(("GPU-" + uuid).encode())
            self.nvml = pynvml
        except Exception:
            self.handle = None
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.handle is None:
            return
        self.samples, self._stop = [], threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainjobs-gpu-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> float | None:
        if self.handle is None or self._thread is None:
            return None
        self._stop.set()
        self._thread.join(timeout=5)
        return sum(self.samples) / len(self.samples) if self.samples else None

    def _run(self) -> None:
        while not self._stop.wait(self.every_seconds):
            try:
                self.samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu / 100.0)
            except Exception:
                return
