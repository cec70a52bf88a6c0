"""Additive (Bahdanau) attention: the ``lstm_global`` baseline of every paper.

    score(h_{t-1}, h_s) = v_a^T tanh(W_a [h_{t-1}; h_s])        (Shu & Nakayama Eq. 3)
                        = v_a^T tanh(W_q h_{t-1} + U_a h_s)
    a_t(s) = softmax_s score(h_{t-1}, h_s)                     (Eq. 2)
    c_t = sum_s a_t(s) h_s                                     (Eq. 1)

The keys U_a h_s are computed once per sentence (:meth:`AdditiveScorer.keys`) and cached, as
Shu & Nakayama do; a step costs one ``batch x src_len x attn_dim`` tanh. Batch-major.

``--attention-score bilinear`` swaps Eq. 3 for Luong's "general" form, the one fairseq's ``lstm``
scores with (its ``AttentionLayer``: the decoder state projected, dotted with each encoder state):

    score(h_{t-1}, h_s) = h_s^T W_b h_{t-1}                   (Luong et al. 2015, Eq. 8)

so that the score function can be changed alone, the query and everything around the score
(penalty, window, temperature, monotonic head) staying as they are. The cached keys are
W_b^T h_s (query-sized); a step is one ``batch x src_len x query_dim`` product, no tanh.
"""

import torch
from torch import Tensor, nn

from ..errors import VisionAttnError, positive_int
from .base import Attention, AttentionStep, masked_softmax, position_dtype, source_lengths
from .registry import register_attention


class AdditiveScorer(nn.Module):
    """The score function of Eq. 3, split into a cached key part and a per-step query part.

    Shared by every mechanism that scores with Eq. 3 (global, local-p, flexible, SACT), so that
    a change to the score function changes all of them alike.
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attn_dim, bias=False)  # W_q
        self.key_proj = nn.Linear(key_dim, attn_dim, bias=True)  # U_a (bias: b_a)
        self.v = nn.Linear(attn_dim, 1, bias=False)  # v_a

    def keys(self, keys_in: Tensor) -> Tensor:
        """keys_in: batch x src_len x key_dim -> batch x src_len x attn_dim."""
        return self.key_proj(keys_in)

    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        """query: batch x query_dim; keys: batch x n x attn_dim -> scores: batch x n."""
        q = self.query_proj(query).unsqueeze(1)  # batch x 1 x attn_dim
        return self.v(torch.tanh(keys + q)).squeeze(-1)  # batch x n


class BilinearScorer(nn.Module):
    """Luong's general score h_s^T W_b q, with the key part W_b^T h_s cached: the same
    :meth:`keys` / :meth:`scores` interface as :class:`AdditiveScorer`. No bias, as fairseq's
    ``lstm`` (a bias on the query side would add a per-position term h_s^T b)."""

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)  # W_b^T

    def keys(self, keys_in: Tensor) -> Tensor:
        """keys_in: batch x src_len x key_dim -> batch x src_len x query_dim."""
        return self.key_proj(keys_in)

    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        """query: batch x query_dim; keys: batch x n x query_dim -> scores: batch x n."""
        return torch.bmm(keys, query.unsqueeze(2)).squeeze(2)


#: ``--attention-score``'s choices; the first is the default
SCORE_FORMS = ("additive", "bilinear")


def build_scorer(args, query_dim: int, key_dim: int):
    """The score function ``--attention-score`` names, for the mechanisms that read it."""
    form = getattr(args, "attention_score", None) or SCORE_FORMS[0]
    if form == "bilinear":
        return BilinearScorer(query_dim, key_dim)
    if form != "additive":
        choices = ", ".join(SCORE_FORMS)
        raise VisionAttnError(f"--attention-score: unknown form {form!r}; valid choices: {choices}")
    return AdditiveScorer(query_dim, key_dim, attention_dim(args, query_dim))


def attention_dim(args, query_dim):
    """``--attention-dim``, defaulting to the decoder's hidden size."""
    return getattr(args, "attention_dim", None) or query_dim


class AdditiveAttentionBase(Attention):
    """Base of every mechanism that scores with Eq. 3: owns the scorer and caches the keys."""

    def __init__(self, args, query_dim, key_dim, embed_dim):
        super().__init__(args, query_dim, key_dim, embed_dim)
        self.scorer = build_scorer(args, query_dim, key_dim)

    def precompute(self, keys_in, src_pad, summary=None):
        return {
            "values": keys_in,  # batch x src_len x key_dim
            "keys": self.scorer.keys(keys_in),  # batch x src_len x attn_dim
            "src_pad": src_pad,  # batch x src_len
            "src_len": source_lengths(src_pad).to(position_dtype(keys_in)),  # batch (bf16 rounds 257...)
        }


@register_attention("additive")
class GlobalAttention(AdditiveAttentionBase):
    """Soft attention over every source position (Bahdanau et al. 2014)."""

    supports_temperature = True

    @staticmethod
    def add_args(parser):
        parser.add_argument(
            "--attention-dim",
            type=positive_int,
            metavar="N",
            help="size of the additive score's hidden layer (W_a, U_a); default: decoder hidden size",
        )
        parser.add_argument(
            "--attention-score",
            choices=SCORE_FORMS,
            help="score function of global, local-p, flexible, wait-k and MoChA/MILk's soft "
            "attention: additive (Bahdanau, Shu Eq. 3; default) or bilinear (Luong's general "
            "h_s^T W h, as fairseq's lstm)",
        )

    def step(self, query, cache, state, prev_embed, temperature=None):
        scores = self.scorer.scores(query, cache["keys"])  # batch x src_len
        if temperature is not None:
            scores = scores / temperature.unsqueeze(1)  # Lin et al. Eq. 4
        weights = masked_softmax(scores, cache["src_pad"])  # batch x src_len
        context = torch.bmm(weights.unsqueeze(1), cache["values"]).squeeze(1)  # batch x key_dim
        # every real position is scored: the window is the whole sentence (Shu Table 1)
        return AttentionStep(context, weights, state, {"window_size": cache["src_len"]})
