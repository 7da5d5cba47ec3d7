"""resnet50 images/s on cuda through the trainer: fp32 and bf16, channels_last (always on for
resnet50 on cuda), 1..N GPUs, DDP against DataParallel. Run on a GPU host:

    python -m bench.gpu [--gpus 2] [--image-size 224] [--batch-size 64]

Prints one line per configuration and writes bench/gpu_results.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from trainjobs.contract.spec import JobSpec
from trainjobs.worker.local_run import local_request, train_locally


def measure(
    gpus: int, strategy: str, precision: str, image_size: int, batch_size: int, epochs: int, device: str = "cuda"
) -> float:
    spec = JobSpec.model_validate(
        {
            "model": {"name": "resnet50"},
            "data": {
                "name": "synthetic-images",
                "params": {
                    "num_samples": batch_size * gpus * 20,
                    "image_size": image_size,
                    "num_classes": 1000,
                    "val_fraction": 0.05,
                    "num_workers": 4 if device == "cuda" else 0,
                    "pin_memory": device == "cuda",
                },
            },
            "device": device,
            "gpus": gpus,
            "strategy": strategy,
            "precision": precision,
            "epochs": epochs,
            "batch_size": batch_size,
            "optimizer": {"name": "sgd", "lr": 0.1},
            "lr_scaling": "linear",
        }
    )
    with tempfile.TemporaryDirectory() as scratch:
        request = local_request(spec, Path(scratch), Path(scratch) / "data")
        outcome = train_locally(request)
        if outcome.state != "succeeded":
            raise RuntimeError(outcome.error)
        rates = [
            json.loads(line)["samples_per_second"]
            for line in (Path(request.run_dir) / "metrics.jsonl").read_text().splitlines()
        ]
    return statistics.median(rates[1:])


def run(
    gpus: int | None = None,
    image_size: int = 224,
    batch_size: int = 64,
    epochs: int = 3,
    device: str = "cuda",
    precisions: tuple[str, ...] = ("fp32", "bf16"),
) -> dict:
    """`python -m bench gpu`: every GPU of this host, the defaults above. `device="cpu"`: the same
    path on cpu ranks (the smoke lane's form, tests/bench/)."""
    gpus = (torch.cuda.device_count() if device == "cuda" else 1) if gpus is None else gpus
    if gpus < 1:
        raise SystemExit("no cuda device visible")
    rows = []
    for precision in precisions:
        for count in sorted({1, *range(2, gpus + 1)}):
            for strategy in ("ddp", "dp") if count > 1 and device == "cuda" else ("ddp",):
                rate = measure(count, strategy, precision, image_size, batch_size, epochs, device)
                rows.append(
                    {"precision": precision, "gpus": count, "strategy": strategy, "images_per_s": round(rate, 1)}
                )
                print(f"resnet50 {precision} {count} GPU(s) {strategy}: {rate:.1f} images/s", flush=True)
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    return {"gpu": {"device": name, "rows": rows}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    found = run(args.gpus, args.image_size, args.batch_size, args.epochs)["gpu"]
    (Path(__file__).parent / "gpu_results.json").write_text(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()
