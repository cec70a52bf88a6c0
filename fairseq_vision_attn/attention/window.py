"""Gathering a window of source positions, so that a mechanism scores only those.

Used by Luong local-p (fixed width 2D+1) and flexible attention at test time (a width that
differs per hypothesis). Batch-major; positions are **1-indexed** (s = 1..src_len), as in the
papers' equations.
"""

import torch
from torch import Tensor


def window_indices(start: Tensor, width: Tensor, src_len: int):
    """Indices of each row's window, padded to the widest window in the batch.

    Args:
        start: batch (long), 1-indexed first position of each window (clamped by the caller).
        width: batch (long), number of positions in each window (>= 0).
        src_len: the padded source length.

    Returns:
        index: batch x max_width (long), 0-indexed positions, clamped into range.
        valid: batch x max_width (bool), True where the index belongs to the row's window.
    """
    max_width = max(int(width.max().item()), 1) if width.numel() else 1
    offsets = torch.arange(max_width, device=start.device)  # max_width
    index = (start - 1).unsqueeze(1) + offsets.unsqueeze(0)  # batch x max_width
    valid = offsets.unsqueeze(0) < width.unsqueeze(1)  # batch x max_width
    index = index.clamp(0, max(src_len - 1, 0))
    return index, valid


def gather_rows(tensor: Tensor, index: Tensor) -> Tensor:
    """tensor: batch x src_len x dim, index: batch x width -> batch x width x dim."""
    return tensor.gather(1, index.unsqueeze(-1).expand(-1, -1, tensor.size(-1)))


def scatter_rows(values: Tensor, index: Tensor, valid: Tensor, src_len: int) -> Tensor:
    """Put window weights back on the full source axis (zeros elsewhere).

    values: batch x width, index/valid: batch x width -> batch x src_len.
    """
    full = values.new_zeros(values.size(0), src_len)
    return full.scatter_add(1, index, values.masked_fill(~valid, 0.0))
