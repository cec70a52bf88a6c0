"""The one interface every attention mechanism implements.

Layout: **batch-major** throughout this sub-package. Encoder states arrive as
``keys_in: batch x src_len x enc_dim`` and the padding mask as ``src_pad: batch x src_len``
where **True means padding**. Every tensor an attention keeps between decoder steps has the
batch on dim 0, so the decoder reorders all of them for beam search with one
``index_select(0, new_order)``.

A decoder step (Bahdanau order) calls, once per sentence::

    cache = attention.precompute(enc_states, src_pad, summary)  # e.g. U_a h_s, memory C
    state = attention.init_state(cache)                    # e.g. previous focus p_0

and then for every target position t::

    out = attention.step(query, cache, state, prev_embed)  # query = h_{t-1}
    context, weights, state = out.context, out.weights, out.state
    out.extras                                             # per-step statistics

``cache`` holds what is computed once per sentence and never changes; ``state`` what one step
hands to the next. Both are flat ``dict[str, Tensor]`` with the batch on dim 0. ``extras``
holds per-step tensors of shape ``batch`` (e.g. ``window_size``, ``g``, ``temperature``) or
``batch x src_len`` (e.g. monotonic ``p_choose``); the decoder stacks them over time so that
criteria (g(t) regularizer, latency loss), the task's ``--stats-output`` and the plots read
the same numbers.
"""

import abc
from dataclasses import dataclass, field
from typing import Dict, Optional

import torch
from torch import Tensor, nn

State = Dict[str, Tensor]


@dataclass
class AttentionStep:
    """What one call of :meth:`Attention.step` returns.

    Attributes:
        context: ``batch x ctx_dim``, the vector fed to the decoder LSTM and output layer.
        weights: ``batch x src_len`` attention over source positions (zeros on padding), or
            None for a mechanism that attends to no position (``lstm_noattn``).
        state: the step state handed to the next call (same keys as ``init_state``).
        extras: per-step statistics, each ``batch`` or ``batch x src_len``.
    """

    context: Tensor
    weights: Optional[Tensor]
    state: State
    extras: Dict[str, Tensor] = field(default_factory=dict)


class Attention(nn.Module, metaclass=abc.ABCMeta):
    """Base class: one subclass per mechanism, registered with ``@register_attention``.

    Args:
        args: the model's argparse namespace (mechanism flags are read from it).
        query_dim: size of the decoder state used as the query (h_{t-1}).
        key_dim: size of one encoder state.
        embed_dim: size of the target embedding i_t = emb(y_{t-1}) passed to :meth:`step`.
    """

    #: False where the papers define weights that need not sum to 1 (Luong local-p).
    weights_sum_to_one = True
    #: True for mechanisms that may only read a source prefix (unidirectional encoder).
    streaming = False
    #: True where ``step`` takes ``temperature=`` (a ``batch`` tensor dividing the scores
    #: before the softmax), so ``--attention-temperature`` (:mod:`.temperature`) applies.
    supports_temperature = False

    def __init__(self, args, query_dim: int, key_dim: int, embed_dim: int):
        super().__init__()
        self.query_dim = query_dim
        self.key_dim = key_dim
        self.embed_dim = embed_dim

    @staticmethod
    def add_args(parser):
        """Add this mechanism's flags (called once for all mechanisms by the model)."""

    @property
    def context_dim(self) -> int:
        return self.key_dim

    @property
    def mechanism(self) -> "Attention":
        """The mechanism itself, under any wrapper (e.g. a temperature)."""
        return self

    def precompute(self, keys_in: Tensor, src_pad: Tensor, summary: Optional[Tensor] = None) -> State:
        """Per-sentence cache, computed once before the first decoder step.

        Args:
            keys_in: batch x src_len x key_dim, encoder states (right-padded).
            src_pad: batch x src_len, True at padding.
            summary: batch x key_dim, the encoder's final state (used by ``none``).
        """
        return {"values": keys_in, "src_pad": src_pad}

    def init_state(self, cache: State) -> State:
        """The step state before the first target token."""
        return {}

    @abc.abstractmethod
    def step(
        self,
        query: Tensor,
        cache: State,
        state: State,
        prev_embed: Tensor,
        temperature: Optional[Tensor] = None,
    ) -> AttentionStep:
        """One decoder step. query: batch x query_dim; prev_embed: batch x embed_dim.

        ``temperature`` (batch, or None for 1) divides the scores before the softmax; only
        mechanisms with ``supports_temperature`` receive it.
        """


def at_least_float32(x: Tensor) -> Tensor:
    """x in float32, or as it is if already float32/float64 (half precision rounds positions
    above 256 and loses cumulative sums)."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def position_dtype(x: Tensor) -> torch.dtype:
    """The dtype for positions and lengths next to ``x``: float64 beside float64, else float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def masked_softmax(scores: Tensor, src_pad: Tensor) -> Tensor:
    """Softmax over the last dim with padding (True) forced to weight 0.

    scores: batch x src_len (float); src_pad: batch x src_len (bool, True = padding).
    Computed in float32 at least so that bf16 autocast does not lose the normalisation.
    """
    dtype = scores.dtype
    scores = at_least_float32(scores).masked_fill(src_pad, float("-inf"))
    return torch.softmax(scores, dim=-1).to(dtype)


def source_lengths(src_pad: Tensor) -> Tensor:
    """Number of real tokens per sentence. src_pad: batch x src_len -> batch (long)."""
    return (~src_pad).long().sum(dim=1)
