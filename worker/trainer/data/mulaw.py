"""mu-law companding (ITU-T G.711), as WaveNet quantises audio to mu classes."""

from __future__ import annotations

import math

import torch


def mulaw_encode(audio: torch.Tensor, mu: int) -> torch.Tensor:
    """audio in [-1, 1] -> integer codes in [0, mu)."""
    levels = mu - 1
    companded = torch.sign(audio) * torch.log1p(levels * audio.abs().clamp(max=1.0)) / math.log1p(levels)
    return ((companded + 1) / 2 * levels + 0.5).long().clamp(0, levels)


def mulaw_decode(codes: torch.Tensor, mu: int) -> torch.Tensor:
    levels = mu - 1
    companded = codes.float() / levels * 2 - 1
    return torch.sign(companded) * ((1 + levels) ** companded.abs() - 1) / levels
