"""Latency metrics of simultaneous translation: AP, AL and DAL (MILk paper Eqs. 17-21), and
SimulEval 1.1's two further defaults, LAAL and ATD.

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
- ``LAAL`` = AL with |y| = max(|hypothesis|, |reference|) (Papi et al. 2022, "Over-Generation
  Cannot Be Rewarded"): a hypothesis longer than the reference no longer lowers its lag by
  writing faster than the reference's rate. Without a reference it is AL.
- ``ATD`` (Kano et al. 2023, "Average Token Delay"), text to text: each token lasts one time
  unit and computation is free, so source token j ends at time j and target token i ends at
  T_i = max(g_i, T_{i-1}) + 1. Consecutive tokens written after the same read form a chunk;
  token i of chunk c is matched to source token min(i - max(0, Y_{c-1} - X_{c-1}), X_c), where
  X_c and Y_c count the source and target tokens of chunks 1..c. ATD = mean_i (T_i - match_i).

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
- SimulEval's LAAL takes |y| = max(|hypothesis|, ``reference_length``), or the hypothesis
  length without a reference or with ``--no-use-ref-len``; ``ref_len`` here plays that role.
- SimulEval's AL and LAAL return g_1 when g_1 > |x|; that cannot happen with delays <= |x|.
- SimulEval skips a sentence with no delays (an empty hypothesis) in its corpus means; here
  :func:`latency_scores` gives NaN for it, which :func:`corpus_latency` skips the same way.
- SimulEval counts the units its agent reads and writes (words of the text, no EOS); scores
  computed here on subword tokens with EOS are on a different scale.
"""

from typing import Dict, Optional, Sequence

import torch
from torch import Tensor

METRICS = ("AL", "AP", "DAL", "LAAL", "ATD")


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


def length_adaptive_average_lagging(
    delays: Tensor, src_len: Tensor, tgt_mask: Optional[Tensor] = None, ref_len: Optional[Tensor] = None
) -> Tensor:
    """LAAL: AL with |y| = max(hypothesis length, ``ref_len``) in gamma (= AL without ``ref_len``)."""
    if ref_len is None:
        return average_lagging(delays, src_len, tgt_mask)
    mask = torch.ones_like(delays, dtype=torch.bool) if tgt_mask is None else tgt_mask
    hyp_len = mask.sum(1).to(ref_len.dtype)
    return average_lagging(delays, src_len, tgt_mask, ref_len=torch.maximum(hyp_len, ref_len))


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


def average_token_delay(delays: Sequence[float]) -> float:
    """ATD of one sentence (text to text, see the module docstring); delays must not decrease."""
    if any(later < earlier for earlier, later in zip(delays, delays[1:])):
        raise ValueError(f"ATD needs non-decreasing delays, got {list(delays)}")
    total, end = 0.0, 0.0  # end: T_{i-1}, when the previous target token was finished
    read_before = written_before = 0.0  # X_{c-1}, Y_{c-1}: tokens of the chunks before this one
    i = 0
    while i < len(delays):
        read = delays[i]  # X_c: this chunk's tokens were written after reading `read` tokens
        chunk_end = i
        while chunk_end < len(delays) and delays[chunk_end] == read:
            chunk_end += 1
        shift = max(0.0, written_before - read_before)
        for position in range(i + 1, chunk_end + 1):  # 1-indexed target positions of the chunk
            end = max(read, end) + 1
            total += end - min(position - shift, read)
        read_before, written_before, i = read, chunk_end, chunk_end
    return total / len(delays)


def latency_scores(
    delays: Sequence[float], src_len: int, ref_len: Optional[int] = None, metrics: Sequence[str] = METRICS
) -> Dict[str, float]:
    """AL, AP, DAL, LAAL and ATD of one sentence from a list of delays (one per written token).

    ``ref_len`` (the reference length) is |y| of AL and AP when given (SimulEval's default) and
    enters LAAL; DAL and ATD never use it. No delays (an empty hypothesis): NaN for each.
    ``metrics``: the ones to compute (default all).
    """
    if len(delays) == 0:
        return {name: float("nan") for name in metrics}
    d = torch.tensor([list(map(float, delays))], dtype=torch.float64)
    x = torch.tensor([float(src_len)], dtype=torch.float64)
    r = None if ref_len is None else torch.tensor([float(ref_len)], dtype=torch.float64)
    compute = {
        "AL": lambda: float(average_lagging(d, x, ref_len=r)[0]),
        "AP": lambda: float(average_proportion(d, x, ref_len=r)[0]),
        "DAL": lambda: float(differentiable_average_lagging(d, x)[0]),
        "LAAL": lambda: float(length_adaptive_average_lagging(d, x, ref_len=r)[0]),
        "ATD": lambda: average_token_delay([float(v) for v in delays]),
    }
    return {name: compute[name]() for name in metrics}


def corpus_latency(sentences: Sequence[Dict[str, float]]) -> Dict[str, float]:
    """Corpus means of :func:`latency_scores` rows, skipping NaN (no delays) as SimulEval does."""
    means = {}
    for name in METRICS:
        values = [row[name] for row in sentences if name in row and row[name] == row[name]]
        means[name] = sum(values) / len(values) if values else float("nan")
    return means
