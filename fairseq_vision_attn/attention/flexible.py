"""Flexible attention (Shu & Nakayama 2017, sec. 3): a learned position penalty around the
previous focus, and at test time a threshold that skips the score function outside it.

    score(h_{t-1}, h_s) = v_a^T tanh(W_a [h_{t-1}; h_s])                       (Eq. 3)
    g(t) = sigmoid(v_g^T tanh(W_g [h_{t-1}; i_t]) + b_g),  i_t = emb(y_{t-1})  (Eq. 8)
    penalty(s) = g(t) * (s - p_{t-1})^2 / (2 sigma^2)                          (Eqs. 5, 6)
    a_t(s) = softmax_s(score(h_{t-1}, h_s) - penalty(s))                       (Eq. 7)
    p_t = sum_s a_t(s) * s                                                     (Eq. 4)

Positions are 1-indexed, s = 1..S. Choices where the paper is silent:

- **no penalty at the first step**: before the first target token there is no previous focus,
  so step 1 attends like global attention (its effective strength is 0, and with a threshold
  it scores the whole sentence). Technically p_0 = 1 with g(1) forced to 0.
- **b_g starts at ``--flex-strength-bias``** (default -2, g about 0.12): the model starts close
  to global attention and learns its score function before the penalty tightens. With b_g = 0
  (g about 0.5 from the first update) we measured on En-Ja that the penalty held the attention
  near where it started, g saturated at 1 within 4 epochs with beta = 0, and the model learned
  to ignore the source (dev BLEU 1.2 against 15+ for global attention): the decoder read the
  backward encoder state at the focus as a sentence summary. Raffel et al. give the same
  advice for monotonic attention's energy bias.
- **threshold tau** (``--vision-span-threshold``, test time only, infinity = off): the score is
  computed only for positions with penalty(s) < tau, i.e. s in the open interval
  (p_{t-1} - sigma sqrt(2 tau / g), p_{t-1} + sigma sqrt(2 tau / g)) (sec. 3.1). Those keys are
  gathered (``batch x window``) and scored; the others are never scored and get weight 0. When
  the interval holds no integer position (tiny tau), the position nearest to p_{t-1} is scored
  alone, so every step attends somewhere.
- **window size** (``extras["window_size"]``) counts the positions scored at a step: the whole
  sentence when tau is infinite, as in the paper's Table 1; ``extras["window_start"]`` is the
  first scored position (1-indexed), so the scored span of a step is drawn as Fig. 1b.

With tau = infinity the computation is exactly that of the untruncated model (no gather).
When the window of every hypothesis covers most of the sentence (more than
:data:`FULL_PATH_FRACTION` of the padded source), gathering costs more than it saves: the step
then scores every position and gives weight 0 outside each window, which is the same
computation's result (a softmax over the window) at a lower cost.

**Precision.** Positions, the penalty, the weights and the focus are computed in float32 at
least, also under bf16/fp16: bf16 holds integers exactly only up to 256 (497, 499, 501 ... are
rounded), so a half-precision focus or penalty would sit at the wrong position on long sources.
"""

import math

import torch
from torch import nn

from ..errors import finite_float, positive_float
from .additive import AdditiveAttentionBase, attention_dim
from .base import AttentionStep, at_least_float32, masked_softmax
from .registry import register_attention
from .window import gather_rows, scatter_rows, window_indices

#: above this share of the padded source, a finite threshold scores every position and masks
#: (benchmarks/bench_flexible_speed.py: the gather costs more than the saved scores there)
FULL_PATH_FRACTION = 0.5


@register_attention("flexible")
class FlexibleAttention(AdditiveAttentionBase):
    #: a temperature divides the content score only: softmax(score / tau_t - penalty), so the
    #: penalty, and the window of --vision-span-threshold, mean the same with and without it
    supports_temperature = True

    def __init__(self, args, query_dim, key_dim, embed_dim):
        super().__init__(args, query_dim, key_dim, embed_dim)
        attn_dim = attention_dim(args, query_dim)
        self.strength_proj = nn.Linear(query_dim + embed_dim, attn_dim, bias=False)  # W_g
        self.strength_v = nn.Linear(attn_dim, 1, bias=True)  # v_g, b_g
        nn.init.constant_(self.strength_v.bias, getattr(args, "flex_strength_bias", -2.0))
        self.sigma = getattr(args, "flex_sigma", 1.5)
        #: tau; set by the task from --vision-span-threshold, used only in eval mode
        self.span_threshold = math.inf

    @staticmethod
    def add_args(parser):
        parser.add_argument(
            "--flex-sigma",
            type=positive_float,
            metavar="SIGMA",
            help="flexible attention's penalty width sigma (Shu & Nakayama: 1.5)",
        )
        parser.add_argument(
            "--flex-strength-bias",
            type=finite_float,
            metavar="B",
            help="flexible attention: initial value of the strength bias b_g of Eq. 8 "
            "(default -2, g about 0.12: the model starts close to global attention)",
        )

    def init_state(self, cache):
        # p_0 = 1, and no previous focus yet: has_focus = 0 switches the first penalty off
        return {"focus": torch.ones_like(cache["src_len"]), "has_focus": torch.zeros_like(cache["src_len"])}

    def strength(self, query, prev_embed):
        """g(t) of Eq. 8. query: batch x query_dim, prev_embed: batch x embed_dim -> batch."""
        hidden = torch.tanh(self.strength_proj(torch.cat([query, prev_embed], dim=-1)))
        return torch.sigmoid(self.strength_v(hidden)).squeeze(-1)

    def step(self, query, cache, state, prev_embed, temperature=None):
        g = at_least_float32(self.strength(query, prev_embed)) * state["has_focus"]  # effective g(t), batch
        prev_focus = state["focus"]  # batch, float32
        tau = self.span_threshold
        if self.training or math.isinf(tau):
            out = self._full(query, cache, g, prev_focus, temperature)
        else:
            out = self._windowed(query, cache, g, prev_focus, tau, temperature)
        context, weights, focus, start, size = out
        extras = {"window_size": size, "window_start": start, "g": g, "focus": focus}
        new_state = {"focus": focus, "has_focus": torch.ones_like(focus)}
        return AttentionStep(context, weights, new_state, extras)

    def penalty(self, g, prev_focus, positions):
        """Eqs. 5-6. g, prev_focus: batch; positions: batch x n (1-indexed) -> batch x n."""
        return g.unsqueeze(1) * (positions - prev_focus.unsqueeze(1)) ** 2 / (2 * self.sigma**2)

    def _content_scores(self, query, keys, temperature):
        scores = at_least_float32(self.scorer.scores(query, keys))  # batch x n (module docstring)
        return scores if temperature is None else scores / at_least_float32(temperature).unsqueeze(1)

    def _full(self, query, cache, g, prev_focus, temperature=None, outside=None):
        """Score every position (training, tau = infinity); ``outside`` (batch x src_len, True
        outside each hypothesis's window) gets weight 0, as if it had not been scored."""
        keys = cache["keys"]  # batch x src_len x attn_dim
        positions = torch.arange(1, keys.size(1) + 1, device=keys.device, dtype=g.dtype)
        positions = positions.unsqueeze(0).expand(keys.size(0), -1)  # batch x src_len
        scores = self._content_scores(query, keys, temperature) - self.penalty(g, prev_focus, positions)
        excluded = cache["src_pad"] if outside is None else cache["src_pad"] | outside
        weights = masked_softmax(scores, excluded)  # batch x src_len, float32
        context = _weighted_sum(weights, cache["values"])  # batch x key_dim
        focus = (weights * positions).sum(-1)  # p_t (Eq. 4), batch
        return context, weights, focus, torch.ones_like(g), cache["src_len"]

    def _windowed(self, query, cache, g, prev_focus, tau, temperature=None):
        """Gather the positions with penalty < tau and compute everything on them alone."""
        start, width = self.window(g, prev_focus, cache["src_len"], tau)
        max_len = cache["keys"].size(1)
        if int(width.max()) > FULL_PATH_FRACTION * max_len:  # the gather would cost more than it saves
            positions = torch.arange(1, max_len + 1, device=start.device).unsqueeze(0)  # 1 x src_len
            outside = (positions < start.unsqueeze(1)) | (positions >= (start + width).unsqueeze(1))
            context, weights, focus, _, _ = self._full(query, cache, g, prev_focus, temperature, outside)
            return context, weights, focus, start.to(g.dtype), width.to(g.dtype)
        index, valid = window_indices(start, width, max_len)  # batch x W
        positions = (index + 1).to(g.dtype)  # batch x W
        scores = self._content_scores(query, gather_rows(cache["keys"], index), temperature)  # batch x W
        scores = scores - self.penalty(g, prev_focus, positions)
        soft = masked_softmax(scores, ~valid)  # batch x W (zero outside each row's window)
        context = _weighted_sum(soft, gather_rows(cache["values"], index))  # batch x key_dim
        focus = (soft * positions).sum(-1)  # p_t over the window, batch
        weights = scatter_rows(soft, index, valid, max_len)  # batch x src_len, for attn outputs
        return context, weights, focus, start.to(g.dtype), width.to(g.dtype)

    def window(self, g, prev_focus, src_len, tau):
        """First position and size of {s : penalty(s) < tau} within 1..S, at least one position.

        g, prev_focus, src_len: batch -> (start, width): batch (long).
        """
        return threshold_window(g, prev_focus, src_len, self.sigma, tau)


def threshold_window(g, prev_focus, src_len, sigma, tau):
    """The positions a threshold keeps (sec. 3.1): s in 1..S with g (s - p)^2 / (2 sigma^2) < tau,
    i.e. s in (p - sigma sqrt(2 tau / g), p + sigma sqrt(2 tau / g)); the position nearest to p
    alone when that interval holds no integer; everything when g = 0.

    g, prev_focus, src_len: tensors of one shape -> (start, width): long, start 1-indexed.
    Also used by ``analysis window-bound`` to recompute windows from ``--stats-output``.
    """
    half = sigma * torch.sqrt(2 * tau / g.double().clamp(min=1e-30))  # may be inf
    focus = prev_focus.double()
    lo = torch.floor(focus - half) + 1  # smallest integer > p - half
    hi = torch.ceil(focus + half) - 1  # largest integer < p + half
    length = src_len.double()
    lo, hi = lo.clamp(1, None), torch.minimum(hi, length)
    empty = hi < lo
    nearest = torch.round(focus).clamp(1, None)
    nearest = torch.minimum(nearest, length)
    lo = torch.where(empty, nearest, lo)
    hi = torch.where(empty, nearest, hi)
    return lo.long(), (hi - lo + 1).long()


def _weighted_sum(weights, values):
    """weights: batch x n (float32 or 64), values: batch x n x dim -> batch x dim (values' dtype)."""
    return torch.bmm(weights.unsqueeze(1).to(values.dtype), values).squeeze(1)
