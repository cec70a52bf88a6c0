"""The monotonic attention family as plain differentiable torch functions (MILk paper sec. 3).

Layout: **batch-major**, right-padded sources, ``src_pad: batch x src_len`` True at padding.
Positions are 1-indexed in the formulas (j = 1..|x|) and 0-indexed in tensors. Every function
works on one decoder step (``batch x src_len``), because in an RNN decoder the selection
probabilities p_i depend on s_{i-1}, which depends on the previous context; the ``*_all``
helpers loop over a whole ``batch x tgt_len x src_len`` block (tests and benchmarks).

**Log space.** Every recurrence below is computed on logarithms, in float32 at least, with
``logcumsumexp`` for the cumulative sums and ``logsigmoid`` of the energies for log p and
log(1 - p). This is the "cumulative products/sums in a numerically safe form" of Raffel et
al.'s parallel solution: the ratio alpha / cumprod(1 - p) of the textbook form overflows (and
its clamped version is wrong) once the head has passed a few positions with p near 1, while in
log space the same ratio is a difference of two finite numbers. Zero probabilities are stored
as :data:`LOG_ZERO` (a finite floor, not -inf: ``logcumsumexp``'s backward pass turns a
leading -inf into NaN). A term at the floor contributes at most e^LOG_ZERO to any result, so
results are exact to float rounding.

Recurrences (MILk paper, restated in SPEC.md sec. 5):

- expected alignment (Raffel et al. 2017; MILk Eq. 10)::

      alpha_ij = p_ij * ( (1 - p_{i,j-1}) alpha_{i,j-1} / p_{i,j-1} + alpha_{i-1,j} )

  with alpha_0 = (1, 0, ..., 0) and the first term 0 for j = 1. Unrolled, the head that
  stood at k after step i-1 stops at j >= k with probability p_ij prod_{l=k}^{j-1} (1 - p_il)::

      alpha_ij = p_ij * sum_{k<=j} alpha_{i-1,k} prod_{l=k}^{j-1} (1 - p_il)

  and with S_j = sum_{l<j} log(1 - p_il) (an exclusive cumulative sum)::

      log alpha_ij = log p_ij + S_j + logcumsumexp_k<=j (log alpha_{i-1,k} - S_k)

- mass preservation (MILk sec. 3.4): p_{i,|x|} = 1, i.e. log p = 0 at the last real token,
  so the head always stops by the end of the source and each row of alpha sums to 1. This is
  the same as moving the residual mass 1 - sum_{j<|x|} alpha_ij onto position |x|.
- MoChA (Chiu & Raffel 2018), chunk size w, chunk energies u::

      beta_ij = sum_{k=j}^{j+w-1} alpha_ik exp(u_ij) / sum_{l=k-w+1}^{k} exp(u_il)

- MILk (Eq. 14), soft energies u::

      beta_ij = sum_{k>=j} alpha_ik exp(u_ij) / sum_{l<=k} exp(u_il)

- expected delay (Eq. 16): g_i = sum_j j alpha_ij.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

#: log of a zero probability (finite: see the module docstring)
LOG_ZERO = -1e4


def _float(x: Tensor) -> Tensor:
    """At least float32 (bf16/fp16 autocast would lose the cumulative sums)."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def last_real_position(src_pad: Tensor) -> Tensor:
    """batch x src_len bool, True at each row's last real token (right padding)."""
    lengths = (~src_pad).long().sum(1)
    positions = torch.arange(src_pad.size(1), device=src_pad.device)
    return positions.unsqueeze(0) == (lengths - 1).clamp(min=0).unsqueeze(1)


def exclusive_cumsum(x: Tensor, dim: int = -1) -> Tensor:
    """y_j = sum_{l<j} x_l along ``dim`` (y_1 = 0)."""
    return torch.cumsum(x, dim=dim) - x


def reverse_logcumsumexp(x: Tensor, dim: int = -1) -> Tensor:
    """y_j = log sum_{k>=j} exp(x_k) along ``dim``."""
    return torch.logcumsumexp(x.flip(dim), dim=dim).flip(dim)


def initial_log_alpha(src_pad: Tensor, dtype=torch.float32) -> Tensor:
    """log alpha_0: the head starts at the first source token. -> batch x src_len."""
    log_alpha = torch.full(src_pad.shape, LOG_ZERO, dtype=dtype, device=src_pad.device)
    log_alpha[:, 0] = 0.0
    return log_alpha


def selection_log_probs(energy: Tensor, src_pad: Tensor, mass_preservation: bool = True):
    """(log p, log(1 - p)) of p = sigmoid(energy), with the end-of-source stop.

    energy: batch x src_len (noise, if any, already added). Padding gets log p = LOG_ZERO and
    log(1 - p) = 0, so it neither receives mass nor changes the cumulative sums of real tokens.
    """
    energy = _float(energy)
    log_p = F.logsigmoid(energy)
    log_not_p = F.logsigmoid(-energy)
    if mass_preservation:
        last = last_real_position(src_pad)
        log_p = log_p.masked_fill(last, 0.0)
    log_p = log_p.masked_fill(src_pad, LOG_ZERO)
    log_not_p = log_not_p.masked_fill(src_pad, 0.0)
    return log_p, log_not_p


def monotonic_alignment_step(
    prev_log_alpha: Tensor, energy: Tensor, src_pad: Tensor, mass_preservation: bool = True
) -> Tensor:
    """One step of Raffel's recurrence (Eq. 10), in parallel over source positions.

    Args:
        prev_log_alpha: batch x src_len, log alpha_{i-1} (:func:`initial_log_alpha` for i = 1).
        energy: batch x src_len, monotonic energies e_ij (p_ij = sigmoid(e_ij)).
        src_pad: batch x src_len, True at padding (right-padded).
        mass_preservation: force p = 1 at the last real token (MILk sec. 3.4).

    Returns:
        log alpha_i: batch x src_len (LOG_ZERO at padding).
    """
    log_p, log_not_p = selection_log_probs(energy, src_pad, mass_preservation)
    S = exclusive_cumsum(log_not_p)  # S_j = sum_{l<j} log(1 - p_il)
    log_alpha = log_p + S + torch.logcumsumexp(_float(prev_log_alpha) - S, dim=-1)
    return log_alpha.masked_fill(src_pad, LOG_ZERO)


def expected_alignment(
    energy: Tensor, src_pad: Tensor, mass_preservation: bool = True, log_space: bool = False
) -> Tensor:
    """alpha for a whole target block: energy batch x tgt_len x src_len -> same shape.

    Loops over target steps with :func:`monotonic_alignment_step` (each step is parallel over
    the source). Returns alpha (or log alpha if ``log_space``).
    """
    log_alpha = initial_log_alpha(src_pad, _float(energy).dtype)
    rows = []
    for i in range(energy.size(1)):
        log_alpha = monotonic_alignment_step(log_alpha, energy[:, i], src_pad, mass_preservation)
        rows.append(log_alpha)
    out = torch.stack(rows, dim=1)
    return out if log_space else out.exp()


def expected_alignment_from_p(p_choose: Tensor, src_pad: Tensor, mass_preservation: bool = False) -> Tensor:
    """Same recurrence from probabilities (batch x tgt_len x src_len), as fairseq's
    ``expected_alignment_from_p_choose`` takes them: p is turned into the energy logit(p)."""
    p = _float(p_choose).clamp(1e-30, 1 - 1e-7)
    return expected_alignment(torch.log(p) - torch.log1p(-p), src_pad, mass_preservation)


def milk_attention(log_alpha: Tensor, soft_energy: Tensor, src_pad: Tensor) -> Tensor:
    """MILk's expected attention beta_i (Eq. 14) from log alpha_i and soft energies u_i.

    log_alpha, soft_energy: batch x src_len -> beta: batch x src_len (0 at padding; rows sum
    to the row sums of alpha, i.e. 1 with mass preservation).
    """
    u = _float(soft_energy).masked_fill(src_pad, LOG_ZERO)
    log_z = torch.logcumsumexp(u, dim=-1)  # log sum_{l<=k} exp(u_l)
    inner = _float(log_alpha) - log_z  # log alpha_k - log Z_k
    beta = torch.exp(u + reverse_logcumsumexp(inner))  # exp(u_j) sum_{k>=j} alpha_k / Z_k
    return beta.masked_fill(src_pad, 0.0)


def _window_logsumexp(x: Tensor, width: int, forward: bool) -> Tensor:
    """y_j = log sum exp over x_{j-w+1..j} (``forward=False``) or x_{j..j+w-1} (``True``)."""
    pad = (0, width - 1) if forward else (width - 1, 0)
    padded = F.pad(x, pad, value=LOG_ZERO)
    return torch.logsumexp(padded.unfold(-1, width, 1), dim=-1)


def mocha_attention(log_alpha: Tensor, chunk_energy: Tensor, src_pad: Tensor, chunk_size: int) -> Tensor:
    """MoChA's expected attention beta_i from log alpha_i and chunk energies u_i.

    log_alpha, chunk_energy: batch x src_len -> beta: batch x src_len (0 at padding).
    Costs O(src_len x chunk_size) per step.
    """
    u = _float(chunk_energy).masked_fill(src_pad, LOG_ZERO)
    log_z = _window_logsumexp(u, chunk_size, forward=False)  # log sum_{l=k-w+1}^{k} exp(u_l)
    inner = _float(log_alpha) - log_z
    beta = torch.exp(u + _window_logsumexp(inner, chunk_size, forward=True))
    return beta.masked_fill(src_pad, 0.0)


def expected_delay(alpha: Tensor, src_pad: Optional[Tensor] = None) -> Tensor:
    """g_i = sum_j j alpha_ij (Eq. 16, 1-indexed). alpha: batch x [tgt_len x] src_len."""
    positions = torch.arange(1, alpha.size(-1) + 1, device=alpha.device, dtype=alpha.dtype)
    if src_pad is not None:
        mask = src_pad if alpha.dim() == 2 else src_pad.unsqueeze(1)
        alpha = alpha.masked_fill(mask, 0.0)
    return (alpha * positions).sum(-1)
