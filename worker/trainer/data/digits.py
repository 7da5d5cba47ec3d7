"""scikit-learn's handwritten digits: 1,797 8x8 images that ship inside the package."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset


def build(_params: dict, _data_root) -> TensorDataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    return TensorDataset(images, torch.tensor(bunch.target, dtype=torch.long))
