import torch
from torch import nn
from torch.utils.data import TensorDataset


def logistic(params: dict) -> nn.Module:
    return nn.Linear(params["in_features"], params["num_classes"])


def blobs(params: dict, _data_root) -> TensorDataset:
    generator = torch.Generator().manual_seed(params["seed"])
    centers = torch.randn(params["classes"], params["dims"], generator=generator) * 3
    labels = torch.randint(params["classes"], (params["num_samples"],), generator=generator)
    points = centers[labels] + torch.randn(params["num_samples"], params["dims"], generator=generator)
    return TensorDataset(points, labels)
