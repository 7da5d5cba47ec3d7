"""Section 6: resnet50 on a GPU host, through the trainer."""

from __future__ import annotations

from typing import Any

from bench.report import Headline, table


def headlines(results: dict[str, Any]) -> list[Headline]:
    return []


def render(results: dict[str, Any]) -> list[str]:
    lines = [
        "`python -m bench gpu` (or `python -m bench.gpu --gpus N`) measures resnet50 images/s on cuda (fp32, "
        "bf16, channels_last, 1..N GPUs, DDP against DP) through the trainer.",
        "",
    ]
    gpu = results.get("gpu")
    if not gpu:
        return [*lines, "Not run: no GPU machine was lent to the sessions that wrote it.", ""]
    return [
        *lines,
        f"On {gpu['device']}:",
        "",
        *table(
            ["precision", "GPUs", "strategy", "images/s"],
            [[r["precision"], r["gpus"], r["strategy"], r["images_per_s"]] for r in gpu["rows"]],
        ),
        "",
    ]
