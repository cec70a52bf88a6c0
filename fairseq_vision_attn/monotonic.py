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

**Linear form where it is exact.** The same recurrence is Raffel's parallel form
``alpha_i = p_i e^S cumsum(alpha_{i-1} e^-S)`` (e^S_j = prod_{l<j} (1 - p_il), computed with
``cumprod``): all terms positive, no subtraction, so it is exact to float rounding as long as
e^-S cannot overflow, i.e. while every row's ``-sum_j log(1 - p_ij)`` stays below
:data:`LINEAR_SPAN` (float64; :data:`FLOAT32_SPAN` for float32). On the CPU that form is used
whenever every row of the block qualifies: ``torch.logcumsumexp`` is a sequential scan there
(about 35 ns per element, 25x a ``cumsum``, measured), and the linear form costs a multiply, a
``cumsum`` and a multiply per target step (float denormals flushed to 0). Blocks with a longer
span (heads that skip hundreds of positions with p near 1) and other devices (a parallel
``logcumsumexp``, and no host sync per step) use the log-space form below.

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

import math
from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

#: log of a zero probability (finite: see the module docstring)
LOG_ZERO = -1e4
#: the linear form is used while every row's -sum_j log(1 - p_ij) is below this: exp(600) times
#: thousands of terms stays far inside float64's range (1.8e308 = exp(709.8))
LINEAR_SPAN = 600.0
#: below this span the linear form runs in float32 (exp(75) times thousands of terms < 3.4e38)
FLOAT32_SPAN = 75.0
#: devices on which the linear form is tried (module docstring); ``benchmarks/bench_milk.py
#: kernels`` empties it to count, on a CPU, the operations a GPU's log-space step launches
LINEAR_FORM_DEVICES = ("cpu",)


def _float(x: Tensor) -> Tensor:
    """At least float32 (bf16/fp16 autocast would lose the cumulative sums)."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def last_real_position(src_pad: Tensor) -> Tensor:
    """``... x src_len`` bool, True at each row's last real token (right padding)."""
    lengths = (~src_pad).long().sum(-1, keepdim=True)  # ... x 1
    positions = torch.arange(src_pad.size(-1), device=src_pad.device)
    return positions == (lengths - 1).clamp(min=0)


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


def selection_probs(energy: Tensor, src_pad: Tensor, mass_preservation: bool, dtype: torch.dtype):
    """(p, 1 - p) of p = sigmoid(energy) in ``dtype``, with the end-of-source stop; padding gets
    p = 0 and 1 - p = 1, as in :func:`selection_log_probs`."""
    energy = energy.to(dtype)
    p, not_p = torch.sigmoid(energy), torch.sigmoid(-energy)
    if mass_preservation:
        p = p.masked_fill(last_real_position(src_pad), 1.0)
    return p.masked_fill(src_pad, 0.0), not_p.masked_fill(src_pad, 1.0)


def _linear_form(probs: Callable[[torch.dtype], Tuple[Tensor, Tensor]], input_dtype: torch.dtype, device):
    """(stop, carry) = (p e^S, e^-S), ``... x src_len``, where e^S_j = prod_{l<j} (1 - p_l), in
    float32 if the rows' span allows it, else float64; None where the linear form is not exact
    or not worth it (module docstring). ``probs(dtype)`` gives (p, 1 - p) in that dtype."""
    if device.type not in LINEAR_FORM_DEVICES:
        return None
    for dtype, span in ((torch.float32, FLOAT32_SPAN), (torch.float64, LINEAR_SPAN)):
        if dtype == torch.float32 and input_dtype == torch.float64:
            continue  # float64 inputs stay in float64
        p, not_p = probs(dtype)
        kept = torch.cumprod(not_p, dim=-1)  # prod_{l<=j} (1 - p_l) = e^S_{j+1}
        if float(kept.detach()[..., -1].min()) >= math.exp(-span):  # every row within the span
            carry = torch.cumprod(not_p.reciprocal(), dim=-1) * not_p  # e^-S_j
            return p * (kept / not_p), carry
    return None


def _linear_step(alpha: Tensor, stop: Tensor, carry: Tensor) -> Tensor:
    """alpha_i = stop_i cumsum(alpha_{i-1} carry_i), with float denormals flushed to 0 (they
    slow every later op down several times and weigh nothing)."""
    alpha = stop * torch.cumsum(alpha * carry, dim=-1)
    return F.threshold(alpha, torch.finfo(alpha.dtype).tiny, 0.0)


def _log_of_linear(alpha: Tensor, dtype) -> Tensor:
    """log alpha, with alpha's zeros (underflows) at the log of the dtype's smallest normal
    number (-87.3 in float32, -708 in float64: zeros as LOG_ZERO is, and no -inf gradient)."""
    return torch.log(alpha.clamp(min=torch.finfo(alpha.dtype).tiny)).to(dtype)


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
    prev = _float(prev_log_alpha)
    linear = _linear_form(
        lambda dtype: selection_probs(energy, src_pad, mass_preservation, dtype), prev.dtype, prev.device
    )
    if linear is not None:  # alpha_i = p_i e^S cumsum(alpha_{i-1} e^-S)
        stop, carry = linear
        alpha = _linear_step(torch.exp(prev.to(stop.dtype)), stop, carry)
        return _log_of_linear(alpha, prev.dtype).masked_fill(src_pad, LOG_ZERO)
    log_p, log_not_p = selection_log_probs(energy, src_pad, mass_preservation)
    S = exclusive_cumsum(log_not_p)  # S_j = sum_{l<j} log(1 - p_il)
    log_alpha = log_p + S + torch.logcumsumexp(prev - S, dim=-1)
    return log_alpha.masked_fill(src_pad, LOG_ZERO)


def expected_alignment(
    energy: Tensor, src_pad: Tensor, mass_preservation: bool = True, log_space: bool = False
) -> Tensor:
    """alpha for a whole target block: energy batch x tgt_len x src_len -> same shape.

    Everything that does not depend on alpha_{i-1} is computed for the whole block at once; the
    loop over target steps then costs three ops per step in the linear form (module docstring),
    or one ``logcumsumexp`` in the log-space form. Returns alpha (or log alpha if
    ``log_space``), zero (LOG_ZERO) at padding.
    """
    energy = _float(energy)
    pad = src_pad.unsqueeze(1)  # batch x 1 x src_len
    linear = _linear_form(
        lambda dtype: selection_probs(energy, pad, mass_preservation, dtype), energy.dtype, energy.device
    )
    if linear is None:
        log_alpha = _log_block(*selection_log_probs(energy, pad, mass_preservation), pad)
        return log_alpha if log_space else log_alpha.exp()
    alpha = _linear_block(*linear).masked_fill(pad, 0.0)
    if log_space:
        return _log_of_linear(alpha, energy.dtype).masked_fill(pad, LOG_ZERO)
    return alpha.to(energy.dtype)


def _linear_block(stop: Tensor, carry: Tensor) -> Tensor:
    """alpha_i = stop_i * cumsum(alpha_{i-1} * carry_i) for every i. batch x tgt x src."""
    alpha = torch.zeros_like(stop[:, 0])
    alpha[:, 0] = 1.0  # alpha_0: the head starts at the first source token
    rows = []
    for i in range(stop.size(1)):
        alpha = _linear_step(alpha, stop[:, i], carry[:, i])
        rows.append(alpha)
    return torch.stack(rows, dim=1)


def _log_block(log_p: Tensor, log_not_p: Tensor, pad: Tensor) -> Tensor:
    """The same recurrence in log space (batch x tgt x src), LOG_ZERO at padding."""
    S = exclusive_cumsum(log_not_p)  # S_ij = sum_{l<j} log(1 - p_il)
    start = log_p + S  # the part of log alpha_i that does not depend on alpha_{i-1}
    log_alpha = torch.full_like(log_p[:, 0], LOG_ZERO)
    log_alpha[:, 0] = 0.0
    rows = []
    for i in range(log_p.size(1)):
        log_alpha = start[:, i] + torch.logcumsumexp(log_alpha - S[:, i], dim=-1)
        rows.append(log_alpha)
    log_alpha = torch.stack(rows, dim=1)
    return log_alpha.masked_fill(pad, LOG_ZERO)


def expected_alignment_from_p(p_choose: Tensor, src_pad: Tensor, mass_preservation: bool = False) -> Tensor:
    """Same recurrence from probabilities (batch x tgt_len x src_len), as fairseq's
    ``expected_alignment_from_p_choose`` takes them."""
    p = _float(p_choose).clamp(1e-30, 1 - 1e-7)
    pad = src_pad.unsqueeze(1)  # batch x 1 x src_len
    if mass_preservation:
        p = p.masked_fill(last_real_position(pad), 1.0)

    padded = bool(src_pad.any())

    def probs(dtype):
        q = p.to(dtype)
        if not padded:
            return q, 1.0 - q
        return q.masked_fill(pad, 0.0), (1.0 - q).masked_fill(pad, 1.0)

    linear = _linear_form(probs, p.dtype, p.device)
    if linear is not None:
        alpha = _linear_block(*linear)
        return (alpha.masked_fill(pad, 0.0) if padded else alpha).to(p.dtype)
    log_p = torch.log(p).masked_fill(pad, LOG_ZERO)
    return _log_block(log_p, torch.log1p(-p).masked_fill(pad, 0.0), pad).exp()


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
