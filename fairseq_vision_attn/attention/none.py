"""No attention: Britz et al.'s "No Att" baseline.

The context is the encoder's final state (forward direction at the last real token, and for a
bidirectional encoder the backward direction at the first token), the same vector at every
step, so a decoder step never reads the encoder states. Batch-major.
"""

from .base import Attention, AttentionStep
from .registry import register_attention


@register_attention("none")
class NoAttention(Attention):
    def precompute(self, keys_in, src_pad, summary=None):
        # summary: batch x key_dim, the encoder's final state (see module docstring)
        return {"summary": summary}

    def step(self, query, cache, state, prev_embed):
        context = cache["summary"]  # batch x key_dim
        extras = {"window_size": context.new_zeros(context.size(0))}
        return AttentionStep(context, None, state, extras)
