"""torchvision's ResNet-50, randomly initialised (no weights are downloaded)."""

from __future__ import annotations

from torch import nn


def build_resnet50(params: dict) -> nn.Module:
    try:
        from torchvision.models import resnet50
    except ImportError as error:
        raise RuntimeError("resnet50 needs torchvision: install trainjobs with the 'vision' extra") from error
    return resnet50(weights=None, num_classes=params["num_classes"])
