"""wait-k (Ma et al. 2018): soft attention over the first g_i source states, on a fixed schedule.

    g_i = min(|x|, k + floor((i - 1) / r))                          (SPEC sec. 5)

k is ``--waitk-lagging`` (default 3), r is ``--waitk-rate`` (default 1), the number of target
tokens written per source token read (MILk paper: 1 for De-En, 1.1 for En-Fr). |x| counts the
source EOS, so the schedule ends by reading the whole source; a source shorter than k is read
whole before the first token is written. Training uses exactly the prefix masks decoding uses
(the same :meth:`WaitkAttention.step`); the lagging can be changed at test time by setting
:attr:`WaitkAttention.lagging`. The scores are additive (Eq. 3 of Shu & Nakayama, as
``lstm_global``), and ``extras["delay"]`` is g_i.
"""

import torch

from ..errors import positive_float, positive_int
from .additive import AdditiveAttentionBase
from .base import AttentionStep, masked_softmax, position_dtype, source_lengths
from .registry import register_attention


def waitk_delays(step: torch.Tensor, src_len: torch.Tensor, lagging: int, rate: float) -> torch.Tensor:
    """g_i for 1-indexed target positions ``step`` (long, any shape broadcastable with src_len).

    floor((i - 1) / r) is taken with a 1e-9 slack so that e.g. r = 1.1, i - 1 = 11 gives 10
    despite 11 / 1.1 = 9.999999999999998 in floating point.
    """
    writes = torch.floor((step - 1).double() / rate + 1e-9).long()
    return torch.minimum(src_len.long(), lagging + writes)


@register_attention("waitk")
class WaitkAttention(AdditiveAttentionBase):
    streaming = True

    def __init__(self, args, query_dim, key_dim, embed_dim):
        super().__init__(args, query_dim, key_dim, embed_dim)
        self.lagging = getattr(args, "waitk_lagging", 3)
        self.rate = getattr(args, "waitk_rate", 1.0)

    @staticmethod
    def add_args(parser):
        parser.add_argument(
            "--waitk-lagging",
            type=positive_int,
            metavar="K",
            help="wait-k: source tokens read before the first target token (default 3)",
        )
        parser.add_argument(
            "--waitk-rate",
            type=positive_float,
            metavar="R",
            help="wait-k: target tokens written per source token read after that (default 1)",
        )

    def precompute(self, keys_in, src_pad, summary=None):
        cache = super().precompute(keys_in, src_pad, summary)
        cache["lengths"] = source_lengths(src_pad)
        return cache

    def init_state(self, cache):
        return {"step": torch.zeros_like(cache["lengths"])}  # target tokens written so far

    def step(self, query, cache, state, prev_embed, temperature=None):
        step = state["step"] + 1  # i, 1-indexed
        delay = waitk_delays(step, cache["lengths"], self.lagging, self.rate)  # batch
        positions = torch.arange(cache["src_pad"].size(1), device=delay.device).unsqueeze(0)
        unread = positions >= delay.unsqueeze(1)  # 0-indexed j >= g_i: not read yet
        scores = self.scorer.scores(query, cache["keys"])  # batch x src_len
        weights = masked_softmax(scores, cache["src_pad"] | unread).to(cache["values"].dtype)
        context = torch.bmm(weights.unsqueeze(1), cache["values"]).squeeze(1)
        as_float = delay.to(position_dtype(cache["values"]))  # float32 at least: bf16 rounds 257 ...
        extras = {"delay": as_float, "window_size": as_float}
        if "finished" in cache:  # streaming input: the schedule wants tokens not read yet
            wanted = waitk_delays(step, torch.full_like(delay, 1 << 30), self.lagging, self.rate)
            extras["needs_source"] = (wanted > cache["lengths"]) & ~cache["finished"]
        return AttentionStep(context, weights, {"step": step}, extras)
