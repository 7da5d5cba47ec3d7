"""A masked sequence model: token sequences of varying length, padded to `max_length`; each
token's target is a fixed function of it and its predecessor, and a mask says which tokens are
real. The loss is averaged over real tokens, not over sequences: it returns a (sum, count) pair,
which the trainer normalises over the whole accumulation group and every rank."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset


class MaskedSequences(Dataset):
    """(tokens, (targets, mask)) items."""

    def __init__(self, params: dict):
        generator = torch.Generator().manual_seed(params["seed"])
        n, length, vocabulary = params["num_samples"], params["max_length"], params["vocabulary"]
        self.tokens = torch.randint(vocabulary, (n, length), generator=generator)
        lengths = torch.randint(2, length + 1, (n,), generator=generator)
        self.mask = torch.arange(length)[None, :] < lengths[:, None]
        previous = torch.cat([torch.zeros(n, 1, dtype=torch.long), self.tokens[:, :-1]], dim=1)
        self.targets = (self.tokens + previous) % vocabulary

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int):
        return self.tokens[index], (self.targets[index], self.mask[index])


def masked_sequences(params: dict, _data_root) -> MaskedSequences:
    return MaskedSequences(params)


class TokenModel(nn.Module):
    """An embedding, a causal convolution over two tokens, a per-token head."""

    def __init__(self, vocabulary: int, width: int):
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width)
        self.mix = nn.Conv1d(width, width, kernel_size=2, padding=1)
        self.head = nn.Linear(width, vocabulary)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(tokens).transpose(1, 2)
        hidden = torch.relu(self.mix(hidden)[:, :, : tokens.shape[1]]).transpose(1, 2)
        return self.head(hidden)  # [batch, time, vocabulary]


def token_model(params: dict) -> nn.Module:
    return TokenModel(params["vocabulary"], params["width"])


def loss(model: nn.Module, batch) -> dict:
    tokens, (targets, mask) = batch
    logits = model(tokens)
    per_token = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
    real = mask.flatten().float()
    hits = (logits.argmax(-1).flatten() == targets.flatten()).float()
    return {"loss": ((per_token * real).sum(), real.sum()), "token_accuracy": ((hits * real).sum(), real.sum())}
