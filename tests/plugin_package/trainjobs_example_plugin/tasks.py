"""Losses of their own (catalog.py names them; examples/own-task has a regression and a sequence
model): a classifier with a torchmetrics F1, and a loss that breaks the contract on purpose."""

import torch.nn.functional as F
from torch import nn

# ---- a classifier with a torchmetrics F1 (not a mean) ------------------------------------------------


def cross_entropy_with_f1(model: nn.Module, batch):
    inputs, targets = batch
    logits = model(inputs)
    return {"loss": F.cross_entropy(logits, targets), "f1": (logits.argmax(dim=1), targets)}


def f1_metrics() -> dict:
    from torchmetrics.classification import MulticlassF1Score

    return {"f1": MulticlassF1Score(num_classes=3, average="macro")}


# ---- a loss that breaks the contract, one way per `mode` (for the errors it must name) ----------


def broken_loss(model: nn.Module, batch):
    inputs, targets = batch
    logits = model(inputs)
    loss = F.cross_entropy(logits, targets)
    mode = model.module.mode if hasattr(model, "module") else model.mode
    if mode == "undeclared":
        return {"loss": loss, "surprise": 1.0}
    if mode == "missing":
        return {"loss": loss}
    if mode == "non_scalar":
        return F.cross_entropy(logits, targets, reduction="none")
    if mode == "non_finite":
        return {"loss": loss * float("inf"), "declared": 0.0}
    if mode == "no_grad":
        return {"loss": loss.detach(), "declared": 0.0}
    return {"loss": loss, "declared": "high"}  # not_a_number


class ModalLinear(nn.Linear):
    def __init__(self, in_features: int, out_features: int, mode: str):
        super().__init__(in_features, out_features)
        self.mode = mode


def modal_linear(params: dict) -> nn.Module:
    return ModalLinear(params["in_features"], params["num_classes"], params["mode"])
