import torch.nn.functional as F


def cross_entropy(model, batch):
    """What the plain loop computes (bench/support/plain_ddp.py), as a model's own loss."""
    inputs, targets = batch
    return F.cross_entropy(model(inputs), targets)
