"""Fixed-size memory attention (Britz et al. 2017): K contexts computed while encoding.

    alpha_t = f_enc(W_alpha s_t) in R^K, one score per slot for each encoder state  (Eq. 5)
    C_k     = sum_t alpha_tk s_t,  C in R^{K x D}                                 (Eq. 4)
    beta    = f_dec(W_beta h) in R^K                                              (Eq. 7)
    c       = sum_k beta_k C_k                                                    (Eq. 6)

C is computed once per sentence (:meth:`MemoryAttention.precompute`); a decoder step reads only
C (``batch x K x D``) and never the encoder states, so its cost does not depend on the source
length. That holds for a whole beam-search step too: the encoder output is reordered as a row
index only (:meth:`..models.lstm_attention.LSTMEncoder.reorder_encoder_out`) and the incremental
state holds C, not the states (``tests/test_search.py`` counts the bytes a search step writes at
|S| = 50 and 500). f_enc and f_dec are softmax or sigmoid (``--memory-encoder-score``,
``--memory-decoder-score``; Britz et al. found softmax/softmax worst, the other three about
equal). Default: softmax encoder scores, softmax decoder scores. With the default normalisation
over time the encoder softmax makes each slot an attention of its own over the source, sharper
than sigmoid gates (a gate cannot exceed 1); on En-Ja, K = 64 + PE, converged, it scored 38.51
valid BLEU against the sigmoid gates' 36.90 (docs/results.md). The paper's worst pair took the
softmax over the K slots (``--memory-normalize slots``), not over time.

**Normalisation of alpha** (``--memory-normalize``), an ambiguity of the paper (SPEC sec. 4):

- ``slots``: Eq. 5 as written: a softmax over the K slots at each encoder step (a sigmoid is
  left as is). Each C_k is then a weighted *sum* of encoder states that grows with |S|, and
  alpha . beta is not a distribution over source positions.
- ``time`` (default): each slot's scores are normalised over the sentence's positions (a
  softmax over time, or sigmoid gates divided by their sum over time), as neulab/xnmt's
  re-implementation does. Each C_k is then an attention over the source (a convex combination
  of encoder states, bounded for any |S|), and with a softmax f_dec the effective alignment
  alpha . beta is a distribution over source positions, which is what the paper's Figs. 6-8
  draw. Chosen as the default for those two reasons.

**Position encodings** (``--memory-position-encoding``, Eqs. 8-10): the scores are multiplied
element-wise by l_s, with L_ks = (1 - k/K)(1 - s/S) + (k/K)(s/S), k = 1..K, s = 1..S. Choices:
S is *each sentence's own length* (the paper: the maximum length over all sources), so that
the first slots look at the beginning and the last slots at the end of every sentence, and a
sentence's memory does not depend on what else is in its batch; entries past the sentence are
masked and each slot's encodings are renormalised over the sentence's positions, then scaled
by its length (mean 1), so that the scores' scale does not shrink as sentences grow.

**Effective alignment** alpha . beta (``batch x src_len``, paper sec. 5) is the step's
``weights`` while :attr:`MemoryAttention.expose_alignment` is True (training, scoring, and
``fairseq-generate --print-alignment``). For plain generation the task switches it off, and a
step then touches nothing of source length. The window size (source positions scored per
step) is 0, as for ``lstm_noattn``.
"""

import torch
from torch import Tensor, nn

from ..errors import positive_int, str2bool
from .base import Attention, AttentionStep
from .registry import register_attention

SCORE_CHOICES = ("softmax", "sigmoid")
NORMALIZE_CHOICES = ("time", "slots")


def position_encoding(src_pad: Tensor, memory_size: int) -> Tensor:
    """Eq. 10 for each sentence, masked and renormalised over time (module docstring).

    src_pad: batch x src_len (True = padding, right-padded) -> l: batch x src_len x K, zero on
    padding, each slot's column summing to the sentence's length over its real positions.
    """
    real = (~src_pad).to(torch.float32)  # batch x S
    lengths = real.sum(1).clamp(min=1)  # batch
    s = torch.arange(1, src_pad.size(1) + 1, device=src_pad.device, dtype=torch.float32)
    frac_s = (s.unsqueeze(0) / lengths.unsqueeze(1)).unsqueeze(-1)  # batch x S x 1: s / S
    frac_k = torch.arange(1, memory_size + 1, device=src_pad.device, dtype=torch.float32) / memory_size
    table = (1 - frac_k) * (1 - frac_s) + frac_k * frac_s  # batch x S x K
    table = table * real.unsqueeze(-1)
    return table / table.sum(1, keepdim=True) * lengths.view(-1, 1, 1)


@register_attention("memory")
class MemoryAttention(Attention):
    def __init__(self, args, query_dim, key_dim, embed_dim):
        super().__init__(args, query_dim, key_dim, embed_dim)
        self.memory_size = getattr(args, "memory_size", None) or 32
        self.encoder_score = getattr(args, "memory_encoder_score", None) or "softmax"
        self.decoder_score = getattr(args, "memory_decoder_score", None) or "softmax"
        self.normalize = getattr(args, "memory_normalize", None) or "time"
        self.use_position_encoding = bool(getattr(args, "memory_position_encoding", False))
        self.encoder_proj = nn.Linear(key_dim, self.memory_size, bias=False)  # W_alpha
        self.decoder_proj = nn.Linear(query_dim, self.memory_size, bias=False)  # W_beta
        # alpha . beta is a distribution over positions only for time-normalised alpha and a softmax beta
        self.weights_sum_to_one = self.normalize == "time" and self.decoder_score == "softmax"
        #: compute alpha . beta as the step's weights (the task turns it off for plain generation)
        self.expose_alignment = True

    @staticmethod
    def add_args(parser):
        parser.add_argument(
            "--memory-size",
            type=positive_int,
            metavar="K",
            help="memory attention: number K of contexts computed while encoding "
            "(Britz et al.: 1, 4, 16, 32, 64; default 32)",
        )
        parser.add_argument(
            "--memory-position-encoding",
            type=str2bool,
            nargs="?",
            const=True,
            metavar="BOOL",
            help="memory attention: multiply the encoder scores by "
            "the position encodings of Britz et al. Eq. 10 (default false)",
        )
        parser.add_argument(
            "--memory-encoder-score",
            choices=SCORE_CHOICES,
            help="memory attention: f_enc, softmax or sigmoid (default softmax: with the default "
            "normalisation over time each slot is an attention over the source; sigmoid gates, the "
            "paper's setting, measured 1.6 valid BLEU lower on En-Ja)",
        )
        parser.add_argument(
            "--memory-decoder-score",
            choices=SCORE_CHOICES,
            help="memory attention: f_dec, softmax or sigmoid (default softmax)",
        )
        parser.add_argument(
            "--memory-normalize",
            choices=NORMALIZE_CHOICES,
            help="memory attention: normalise the encoder scores over time (each C_k an "
            "attention over the source; default) or over the K slots (Eq. 5 as written)",
        )

    def encoder_scores(self, keys_in: Tensor, src_pad: Tensor) -> Tensor:
        """W_alpha s_t, times the position encodings when they are on (Eq. 9): batch x src_len x K,
        before f_enc."""
        scores = self.encoder_proj(keys_in)  # batch x S x K
        if self.use_position_encoding:
            scores = scores * position_encoding(src_pad, self.memory_size).to(scores.dtype)
        return scores

    def encoder_weights(self, keys_in: Tensor, src_pad: Tensor) -> Tensor:
        """alpha: batch x src_len x K (Eqs. 5, 9), zero on padding."""
        scores = self.encoder_scores(keys_in, src_pad)
        pad = src_pad.unsqueeze(-1)  # batch x S x 1
        if self.encoder_score == "softmax":
            if self.normalize == "time":
                return torch.softmax(scores.float().masked_fill(pad, float("-inf")), dim=1).to(scores.dtype)
            return torch.softmax(scores.float(), dim=-1).to(scores.dtype).masked_fill(pad, 0.0)
        gates = torch.sigmoid(scores).masked_fill(pad, 0.0)
        if self.normalize == "time":
            gates = gates / gates.sum(dim=1, keepdim=True).clamp(min=1e-6)
        return gates

    def precompute(self, keys_in, src_pad, summary=None):
        alpha = self.encoder_weights(keys_in, src_pad)  # batch x S x K
        cache = {"memory": torch.bmm(alpha.transpose(1, 2), keys_in)}  # C: batch x K x D (Eq. 4)
        if self.expose_alignment:
            cache["alpha"] = alpha
        return cache

    def decoder_weights(self, query: Tensor) -> Tensor:
        """beta: batch x K (Eq. 7)."""
        scores = self.decoder_proj(query)
        if self.decoder_score == "softmax":
            return torch.softmax(scores.float(), dim=-1).to(scores.dtype)
        return torch.sigmoid(scores)

    def step(self, query, cache, state, prev_embed):
        memory = cache["memory"]  # batch x K x D: the only per-sentence tensor a step reads
        beta = self.decoder_weights(query)  # batch x K
        context = torch.bmm(beta.unsqueeze(1), memory).squeeze(1)  # batch x D (Eq. 6)
        weights = None
        if "alpha" in cache:  # effective alignment alpha . beta: batch x S
            weights = torch.bmm(cache["alpha"], beta.unsqueeze(-1)).squeeze(-1)
        return AttentionStep(context, weights, state, {"window_size": context.new_zeros(context.size(0))})
