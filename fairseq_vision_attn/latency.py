"""Latency metrics of simultaneous translation: AP, AL and DAL (MILk paper Eqs. 17-21).

One implementation serves both uses:

- **evaluation**, on hard delays: g_i = number of source tokens read before writing y_i;
- **training**, on expected delays g_i = sum_j j alpha_ij (Eq. 16): every function is made of
  differentiable torch operations (DAL's max recursion is a ``cummax``), so
  ``--criterion latency_augmented_cross_entropy`` back-propagates through it.

Tensors are batch-major: ``delays: batch x tgt_len`` (float), ``tgt_mask: batch x tgt_len`` True
at real target tokens (left-aligned), ``src_len: batch``. Each function returns one value per
sentence (``batch``). :func:`latency_scores` does the same for one sentence given as a list.

Lengths, with gamma = |y| / |x|:

- ``AP  = sum_i g_i / (|x| |y|)``                                              (Eq. 17)
- ``AL  = (1 / tau) sum_{i<=tau} (g_i - (i-1) / gamma)``, tau = the first i with g_i >= |x|,
  or |y| if the source is never fully read (expected delays)                 (Eqs. 18-19)
- ``DAL = (1 / |y|) sum_i (g'_i - (i-1) / gamma)``, g'_1 = g_1,
  g'_i = max(g_i, g'_{i-1} + 1 / gamma)                                        (Eqs. 20-21)

**Which lengths.** |x| and |y| are whatever the caller passes. In this package they count
tokens as fairseq holds them, **EOS included on both sides**: the source EOS is a token the
encoder reads (reading it means knowing the source has ended; the hard head's forced stop is
there) and the target EOS is a token the model writes, with its own delay. The generator and
``--stats-output`` report ``src_len`` = that |x| and one delay per written token, EOS included.

**Against SimulEval 1.1.4** (``simuleval/evaluator/scorers/latency_scorer.py``):

- SimulEval's AL and AP use the *reference* length as |y| by default (``use_ref_len``), and
  the hypothesis length only with ``--no-use-ref-len``; its DAL always uses the hypothesis
  length. Here |y| is the hypothesis length for all three unless ``ref_len`` is given (AL and
  AP only), as in the MILk paper. Passing the same lengths gives the same numbers (tested).
- SimulEval's AL returns g_1 when g_1 > |x|; that cannot happen with delays <= |x|.
- SimulEval counts the units its agent reads and writes (words of the text, no EOS); scores
  computed here on subword tokens with EOS are on a different scale.
"""

from typing import Dict, Optional, Sequence

import torch
from torch import Tensor

METRICS = ("AL", "AP", "DAL")


def _prepare(delays: Tensor, src_len: Tensor, tgt_mask: Optional[Tensor]):
    delays = delays if delays.is_floating_point() else delays.float()
    delays = delays if delays.dtype in (torch.float32, torch.float64) else delays.float()
    if tgt_mask is None:
        tgt_mask = torch.ones_like(delays, dtype=torch.bool)
    hyp_len = tgt_mask.sum(1).to(delays.dtype).clamp(min=1)  # |y| of the hypothesis
    return delays, src_len.to(delays.dtype), tgt_mask, hyp_len


def _steps(delays: Tensor) -> Tensor:
    """(i - 1) for i = 1..tgt_len, as a 1 x tgt_len row."""
    return torch.arange(delays.size(1), device=delays.device, dtype=delays.dtype).unsqueeze(0)


def average_proportion(
    delays: Tensor, src_len: Tensor, tgt_mask: Optional[Tensor] = None, ref_len: Optional[Tensor] = None
) -> Tensor:
    """AP (Eq. 17). ``ref_len`` replaces |y| in the denominator (SimulEval's default)."""
    delays, src_len, tgt_mask, hyp_len = _prepare(delays, src_len, tgt_mask)
    y = hyp_len if ref_len is None else ref_len.to(delays.dtype)
    return (delays * tgt_mask).sum(1) / (src_len * y)


def average_lagging(
    delays: Tensor, src_len: Tensor, tgt_mask: Optional[Tensor] = None, ref_len: Optional[Tensor] = None
) -> Tensor:
    """AL (Eqs. 18-19). ``ref_len`` replaces |y| in gamma (SimulEval's default)."""
    delays, src_len, tgt_mask, hyp_len = _prepare(delays, src_len, tgt_mask)
    y = hyp_len if ref_len is None else ref_len.to(delays.dtype)
    gamma = (y / src_len).unsqueeze(1)
    lag = delays - _steps(delays) / gamma  # g_i - (i-1)/gamma
    reached = (delays >= src_len.unsqueeze(1)) & tgt_mask
    # tau = first i with g_i >= |x| (inclusive), else |y|: keep i <= tau
    before = torch.cumsum(reached.long(), dim=1) - reached.long() == 0  # no earlier i reached
    keep = before & tgt_mask
    return (lag * keep).sum(1) / keep.sum(1).to(delays.dtype).clamp(min=1)


def differentiable_average_lagging(
    delays: Tensor, src_len: Tensor, tgt_mask: Optional[Tensor] = None
) -> Tensor:
    """DAL (Eqs. 20-21), always on the hypothesis length.

    Unrolling g'_i = max(g_i, g'_{i-1} + 1/gamma) gives g'_i - (i-1)/gamma =
    max_{k<=i} (g_k - (k-1)/gamma), a running maximum (``cummax``: a subgradient flows to the
    delay that attains it).
    """
    delays, src_len, tgt_mask, hyp_len = _prepare(delays, src_len, tgt_mask)
    gamma = (hyp_len / src_len).unsqueeze(1)
    lag = delays - _steps(delays) / gamma
    lag = lag.masked_fill(~tgt_mask, float("-inf"))  # padding (after the last token) never wins
    running, _ = torch.cummax(lag, dim=1)
    return running.masked_fill(~tgt_mask, 0.0).sum(1) / hyp_len


def latency_scores(delays: Sequence[float], src_len: int, ref_len: Optional[int] = None) -> Dict[str, float]:
    """AL, AP and DAL of one sentence from a list of delays (one per written token)."""
    if len(delays) == 0:
        return {name: 0.0 for name in METRICS}
    d = torch.tensor([list(map(float, delays))], dtype=torch.float64)
    x = torch.tensor([float(src_len)], dtype=torch.float64)
    r = None if ref_len is None else torch.tensor([float(ref_len)], dtype=torch.float64)
    return {
        "AL": float(average_lagging(d, x, ref_len=r)[0]),
        "AP": float(average_proportion(d, x, ref_len=r)[0]),
        "DAL": float(differentiable_average_lagging(d, x)[0]),
    }
