"""Dataset registry: a name from the spec to (train, validation) datasets, and the task's loss."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.data import Dataset

from worker.trainer.data.digits import digits
from worker.trainer.data.split import split_train_val
from worker.trainer.data.synthetic_audio import SyntheticAudio
from worker.trainer.data.synthetic_images import SyntheticImages

BUILDERS: dict[str, Callable[[dict[str, Any]], Dataset]] = {
    "synthetic-audio": lambda p: SyntheticAudio(p["num_samples"], p["length"], p["mu"], p["seed"]),
    "synthetic-images": lambda p: SyntheticImages(p["num_samples"], p["image_size"], p["num_classes"], p["seed"]),
    "digits": lambda p: digits(),
}


def build_datasets(name: str, params: dict[str, Any]) -> tuple[Dataset, Dataset]:
    full = BUILDERS[name](params)
    return split_train_val(full, params["val_fraction"], params["seed"])
