"""`make gpu-check`: every CUDA path of the trainer through a real stack on this host (the API, one
worker leasing this host's GPUs, every job's ranks in the sandbox), one row each, in one table;
exit 1 when any row fails. Without an NVIDIA GPU it says so and exits 0.

Rows: 1 GPU ddp in fp32, fp16 (its scaler) and bf16; channels-last resnet50 bf16 with
cudnn.benchmark, its images/s; 2 GPUs with NCCL, ddp and dp (where the host has 2); two 1-GPU jobs
side by side, each on its own GPU; each row checks that the job succeeded and reported
`gpu_utilization` and `peak_memory_bytes` for every epoch. Sized for under 8 minutes on one H100.

Not yet in it (docs/operating.md lists them): a skipped step on an inf and the scaler's state
resumed, a preemption and exact resume on GPU, and the throughput against a plain DDP script
taking turns (`python -m bench turns` on a GPU host)."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def gpus_here() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def spec(gpus: int, precision: str, strategy: str = "ddp", model: str = "mlp", epochs: int = 2) -> dict:
    if model == "resnet50":
        data = {"name": "synthetic-images", "params": {"num_samples": 64 * 20, "image_size": 224, "num_classes": 1000}}
        return {
            **{"model": {"name": "resnet50"}, "data": data, "device": "cuda", "gpus": gpus, "strategy": strategy},
            **{"precision": precision, "epochs": epochs, "batch_size": 64, "optimizer": {"name": "sgd", "lr": 0.1}},
        }
    from devstack import tiny_wavenet_spec

    return tiny_wavenet_spec(device="cuda", gpus=gpus, strategy=strategy, precision=precision, epochs=epochs)


def check(client, job_ids: list[str]) -> tuple[bool, str]:
    from devstack import wait_for_terminal

    notes = []
    for job_id in job_ids:
        job = wait_for_terminal(client, job_id, timeout=300)
        if job["state"] != "succeeded":
            return False, f"{job_id}: {job['state']}: {job['error']}"
        rows = client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]
        if not rows or any(row.get("gpu_utilization") is None or not row.get("peak_memory_bytes") for row in rows):
            return False, f"{job_id}: an epoch without gpu_utilization or peak_memory_bytes"
        notes.append(f"{rows[-1]['samples_per_second']:.0f} samples/s")
    return True, ", ".join(notes)


def main() -> int:
    count = gpus_here()
    if count == 0:
        print("make gpu-check: no NVIDIA GPU on this host (torch.cuda.is_available() is False): nothing checked")
        return 0
    from devstack import REDIS_URL, Stack, sql_database

    rows = [
        ("1 GPU ddp fp32", [spec(1, "fp32")]),
        ("1 GPU ddp fp16 + scaler", [spec(1, "fp16")]),
        ("1 GPU ddp bf16", [spec(1, "bf16")]),
        ("resnet50 bf16 channels-last", [spec(1, "bf16", model="resnet50")]),
    ]
    if count >= 2:
        rows += [
            ("2 GPUs ddp NCCL", [spec(2, "fp32")]),
            ("2 GPUs dp", [spec(2, "fp32", "dp")]),
            ("two 1-GPU jobs side by side", [spec(1, "fp32", epochs=4), spec(1, "fp32", epochs=4)]),
        ]
    failed = 0
    with tempfile.TemporaryDirectory() as scratch, sql_database("sqlite", Path(scratch)) as url:
        stack = Stack(Path(scratch) / "stack", url, REDIS_URL).start_api_only()
        try:
            stack.start_worker("gpu", gpus=",".join(str(gpu) for gpu in range(count)), TRAINJOBS_SANDBOX="required")
            client = stack.client(stack.token("gpu-check"))
            print(f"{'row':34} {'result':6} {'seconds':>7}  notes")
            for name, specs in rows:
                started = time.monotonic()
                ok, notes = check(client, [client.post("/v1/jobs", json=each).json()["id"] for each in specs])
                failed += not ok
                print(f"{name:34} {'ok' if ok else 'FAILED':6} {time.monotonic() - started:7.1f}  {notes}", flush=True)
        finally:
            stack.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
