"""A fleet of hosts, on this one machine (`python -m bench fleet`):

- throughput of a job across 2 nodes x 1 rank against the same job on 1 node x 2 ranks (two
  workers of 2 cpu slots, each in a home of its own; one thread per rank either way), interleaved;
- time to write and to read a 100 MB checkpoint in the object store (moto's S3 server, over
  HTTP on loopback) against a local directory.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from devstack import MotoS3, Stack, sql_database, tiny_wavenet_spec, wait_for_terminal
from trainjobs.worker.trainer.checkpoints import storage_at

# Epochs of a few seconds on 2 cpu ranks here.
SPEC = tiny_wavenet_spec(
    gpus=2, epochs=4, data={"name": "synthetic-audio", "params": {"num_samples": 2048, "length": 256, "mu": 32}}
)


def samples_per_second(client, job_id: str) -> float:
    rows = client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]
    return statistics.median(row["samples_per_second"] for row in rows[1:])  # the first epoch warms up


def throughput(rounds: int = 2) -> dict:
    with tempfile.TemporaryDirectory() as home, sql_database("sqlite", Path(home)) as url:
        stack = Stack(Path(home) / "api", url, "redis://127.0.0.1:6379/0").start_api_only()
        try:
            for name in ("a", "b"):
                stack.start_worker(f"bench-{name}", slots=2, TRAINJOBS_HOME=str(Path(home) / name))
            client = stack.client(stack.token("bench"))
            two_nodes, one_node = [], []
            for _ in range(rounds):
                for nodes, figures in ((2, two_nodes), (1, one_node)):
                    job_id = client.post("/v1/jobs", json={**SPEC, "nodes": nodes}).json()["id"]
                    job = wait_for_terminal(client, job_id, timeout=600)
                    assert job["state"] == "succeeded", job
                    figures.append(samples_per_second(client, job_id))
                    print(f"fleet: {nodes} node(s): {figures[-1]:.1f} samples/s", flush=True)
        finally:
            stack.stop()
    ratios = [two / one for two, one in zip(two_nodes, one_node, strict=True)]
    return {
        "two_nodes_samples_per_s": round(statistics.median(two_nodes), 1),
        "one_node_samples_per_s": round(statistics.median(one_node), 1),
        "ratio": round(statistics.median(ratios), 3),
        "round_ratios": [round(ratio, 3) for ratio in ratios],
    }


def checkpoint_io(megabytes: int = 100, repeats: int = 3) -> list[dict]:
    state = {"model": {"weight": torch.randn(megabytes * 1024 * 1024 // 4)}}
    s3 = MotoS3().start()
    try:
        import os

        os.environ.update(s3.env)
        with tempfile.TemporaryDirectory() as local:
            results = []
            for kind, location in (("local directory", local), ("S3 (moto, loopback)", f"s3://{s3.bucket}/bench")):
                storage = storage_at(location)
                writes, reads = [], []
                for index in range(repeats):
                    start = time.perf_counter()
                    storage.write(f"bench/c{index}.pt", state)
                    writes.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    storage.load(f"bench/c{index}.pt")
                    reads.append(time.perf_counter() - start)
                    storage.delete(f"bench/c{index}.pt")
                results.append(
                    {
                        "store": kind,
                        "megabytes": megabytes,
                        "write_s": round(statistics.median(writes), 2),
                        "read_s": round(statistics.median(reads), 2),
                    }
                )
                print(f"fleet: {kind}: write {results[-1]['write_s']} s, read {results[-1]['read_s']} s", flush=True)
            return results
    finally:
        s3.stop()


def run(rounds: int = 2, megabytes: int = 100, repeats: int = 3) -> dict:
    return {"fleet": {"throughput": throughput(rounds), "checkpoint_io": checkpoint_io(megabytes, repeats)}}
