"""Luong et al. (2015) local-p attention, the fixed-window baseline of Shu & Nakayama.

    p_t = S * sigmoid(v_p^T tanh(W_p h))                           (Shu Eq. 10)
    a_t(s) = softmax_{s in window}(score(h, h_s)) * exp(-(s - p_t)^2 / (2 sigma^2))   (Eq. 11)
    window = [round(p_t) - D, round(p_t) + D] intersected with 1..S,  sigma = D / 2

S is each sentence's real length, positions are 1-indexed. Choices where the papers are
silent, documented here and in docs/mechanisms.md:

- the query h is h_{t-1} (this decoder attends before its LSTM step, Bahdanau order), where
  Luong uses h_t;
- the window is centred on round(p_t), so it holds 2D+1 positions away from the sentence ends
  (Luong's [p_t - D, p_t + D] with a real p_t holds 2D or 2D+1); the Gaussian uses the real p_t,
  which is how p_t's parameters get a gradient;
- as in Luong, the weights are not renormalised after the Gaussian, so they sum to <= 1.

Only the window's keys are gathered and scored (``batch x (2D+1)``), never the whole source.
"""

import torch
import torch.nn.functional as F

from ..errors import positive_int
from .additive import AdditiveAttentionBase, attention_dim
from .base import AttentionStep, masked_softmax, position_dtype
from .registry import register_attention
from .window import gather_rows, scatter_rows, window_indices


@register_attention("local")
class LocalAttention(AdditiveAttentionBase):
    weights_sum_to_one = False  # Luong: the Gaussian is applied after the softmax
    supports_temperature = True  # the window's softmax(score / tau), then the Gaussian

    def __init__(self, args, query_dim, key_dim, embed_dim):
        super().__init__(args, query_dim, key_dim, embed_dim)
        attn_dim = attention_dim(args, query_dim)
        self.position_proj = torch.nn.Linear(query_dim, attn_dim, bias=False)  # W_p
        self.position_v = torch.nn.Linear(attn_dim, 1, bias=False)  # v_p
        self.window_d = getattr(args, "local_window_d", 10)
        self.sigma = self.window_d / 2.0

    @staticmethod
    def add_args(parser):
        parser.add_argument(
            "--local-window-d",
            type=positive_int,
            metavar="D",
            help="local-p half window D: 2D+1 positions, sigma = D/2 (Shu & Nakayama use D = 10)",
        )

    def focus_gate(self, query):
        """sigmoid(v_p^T tanh(W_p h)) of Shu Eq. 10 (batch), in float32 at least: in bf16 the
        gate has 8 significant bits, so p_t = S * gate would be off by S / 256 positions."""
        dtype = position_dtype(query)
        with torch.autocast(query.device.type, enabled=False):
            hidden = torch.tanh(F.linear(query.to(dtype), self.position_proj.weight.to(dtype)))
            return torch.sigmoid(F.linear(hidden, self.position_v.weight.to(dtype))).squeeze(-1)

    def step(self, query, cache, state, prev_embed, temperature=None):
        src_len = cache["src_len"]  # batch
        max_len = cache["keys"].size(1)
        focus = src_len * self.focus_gate(query)  # batch, p_t in (0, S), float32 at least

        centre = focus.detach().round().long().clamp(min=1)  # batch
        start = (centre - self.window_d).clamp(min=1)
        end = torch.minimum(centre + self.window_d, src_len.long())
        width = (end - start + 1).clamp(min=1)  # batch
        index, valid = window_indices(start, width, max_len)  # batch x W

        scores = self.scorer.scores(query, gather_rows(cache["keys"], index))  # batch x W
        if temperature is not None:
            scores = scores / temperature.unsqueeze(1)
        soft = masked_softmax(scores, ~valid)  # batch x W
        distance = (index + 1).to(focus.dtype) - focus.unsqueeze(1)  # batch x W
        gauss = torch.exp(-(distance**2) / (2 * self.sigma**2))
        weights = scatter_rows(soft.to(gauss.dtype) * gauss, index, valid, max_len)  # batch x src_len
        values = cache["values"]
        context = torch.bmm(weights.unsqueeze(1).to(values.dtype), values).squeeze(1)  # batch x key_dim
        extras = {"window_size": width.to(focus.dtype), "window_start": start.to(focus.dtype), "focus": focus}
        return AttentionStep(context, weights, state, extras)
