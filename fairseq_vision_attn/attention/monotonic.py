"""Monotonic attention (Raffel et al. 2017), MoChA (Chiu & Raffel 2018) and MILk (Arivazhagan
et al. 2019): the streaming mechanisms with a learned read/write head.

All three share the head. Its energy is Raffel's normalised form::

    e_ij = g v^T / ||v|| tanh(W s_{i-1} + V h_j + b) + r             (MILk Eq. 7)

with scalars g (``--monotonic-energy-scale-init``, default 1/sqrt(attn_dim) as in TensorFlow's
and Lingvo's monotonic attention) and r (``--monotonic-energy-bias-init``, default -4: Raffel et
al. advise a negative r so that p starts small and the head starts by moving forward, i.e.
reading). No input can raise the energy above ``||g v/||v|| ||_1 + r`` (tanh is bounded by 1;
:meth:`MonotonicEnergy.ceiling`): at the default g that is r + 1 at most, so p > 1/2 needs g to
grow first. s_{i-1} is the query h_{t-1} of this Bahdanau-order decoder.
``--monotonic-energy unnormalized`` drops the weight normalisation, e_ij = v^T tanh(W s_{i-1} +
V h_j + b) + r (fairseq's and TensorFlow Addons' additive monotonic energy without their
``normalize`` option): ||v|| then bounds the energy's range by itself, which can grow freely;
``--monotonic-energy-scale-init`` then sets ||v|| at initialisation (default: v uniform in
+-1/sqrt(attn_dim), ||v|| about 0.58).

**Training** (``model.train()``): the expected alignment alpha_i of
:func:`..monotonic.monotonic_alignment_step`, with p_ij = sigmoid(e_ij + N(0, n)) where n is
``--monotonic-noise-var`` (default 4, the MILk paper's choice; noise only in training) and mass
preservation (the head stops at the last real token, EOS). The context is the expectation of
the test-time context under alpha:

- ``monotonic``: c_i = sum_j alpha_ij h_j;
- ``mocha``: soft attention over the ``--mocha-chunk-size`` states ending at the head, in
  expectation (:func:`..monotonic.mocha_attention`);
- ``milk``: soft attention over every state up to the head, in expectation (Eq. 14,
  :func:`..monotonic.milk_attention`).

The step state is log alpha_{i-1}; ``extras["delay"]`` is the expected delay g_i (Eq. 16).

**Evaluation** (``model.eval()``: validation, fairseq-generate): the hard policy. The head
starts at t_0 = 1 and, for each target token, moves from t_{i-1} to the first j >= t_{i-1}
with e_ij > 0, stopping at the last real source token at the latest; the energy is computed
at the head's position only, so a step reads no source state beyond the head. fairseq-generate's
``--monotonic-stop cumulative`` (attribute ``stop_rule``) replaces "the first e_ij > 0" by
the first j at which the head has stopped with probability >= 1/2 given t_{i-1}, i.e.
prod_{k=t_{i-1}}^{j} (1 - p_ik) <= 1/2: the median of the stopping distribution the expected
alignment trains on. ``--monotonic-stop-threshold Q`` (attribute ``stop_threshold``) moves
either rule's 1/2 to Q (energy: p_ij > Q, i.e. e_ij > log(Q / (1 - Q))): a test-time latency
knob, Q above 1/2 reads more. The two agree when the p_ij are 0 or 1; with moderate p_ij the
cumulative rule stops earlier (``analysis monotonic-mismatch`` measures how far the expected
delays lie below the hard ones). The state is
the head (0-indexed), ``extras["delay"]`` is g_i = t_i (1-indexed: source tokens read), and
the context uses states h_1..h_{t_i} only (``extras["window_size"]``: how many). Validation
losses and latencies are therefore those of the test-time model (under teacher forcing).
"""

import abc
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import VisionAttnError, finite_float, non_negative_float, positive_float, positive_int
from ..monotonic import (
    expected_delay,
    initial_log_alpha,
    milk_attention,
    mocha_attention,
    monotonic_alignment_step,
)
from .additive import attention_dim, build_scorer
from .base import Attention, AttentionStep, masked_softmax, position_dtype, source_lengths
from .registry import register_attention

ENERGY_FORMS = ("normalized", "unnormalized")


def check_stop_threshold(q):
    """``--monotonic-stop-threshold``'s value, refused outside (0, 1) in one line."""
    if not 0.0 < q < 1.0:
        raise VisionAttnError(f"--monotonic-stop-threshold must lie strictly between 0 and 1, got {q}")
    return q


class MonotonicEnergy(nn.Module):
    """e = g v^T/||v|| tanh(W q + V h + b) + r (``normalized``) or v^T tanh(W q + V h + b) + r
    (``unnormalized``, no g), split into cached keys and a per-step part."""

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        attn_dim: int,
        bias_init: float,
        form: str = "normalized",
        scale_init: float | None = None,
    ):
        super().__init__()
        if form not in ENERGY_FORMS:
            raise ValueError(
                f"--monotonic-energy: unknown form {form!r}; valid choices: {', '.join(ENERGY_FORMS)}"
            )
        self.form = form
        self.query_proj = nn.Linear(query_dim, attn_dim, bias=False)  # W
        self.key_proj = nn.Linear(key_dim, attn_dim, bias=True)  # V, b
        bound = 1.0 / math.sqrt(attn_dim)
        v = torch.empty(attn_dim).uniform_(-bound, bound)
        if form == "unnormalized" and scale_init is not None:
            v = v * (scale_init / v.norm())
        self.v = nn.Parameter(v)
        g = bound if scale_init is None else float(scale_init)
        self.g = nn.Parameter(torch.tensor(g)) if form == "normalized" else None
        self.r = nn.Parameter(torch.tensor(float(bias_init)))

    def keys(self, keys_in: Tensor) -> Tensor:
        """keys_in: batch x src_len x key_dim -> batch x src_len x attn_dim."""
        return self.key_proj(keys_in)

    def _direction(self) -> Tensor:
        return self.v if self.g is None else self.g * self.v / self.v.norm()

    def ceiling(self) -> float:
        """The largest energy any input can give: ||g v/||v|| ||_1 + r (or ||v||_1 + r), reached
        where tanh(W q + V h + b) = sign(v). sigmoid(ceiling) bounds every noise-free p."""
        with torch.no_grad():
            return float(self._direction().abs().sum() + self.r)

    def energies(self, query: Tensor, keys: Tensor) -> Tensor:
        """query: batch x query_dim; keys: batch x n x attn_dim -> batch x n."""
        hidden = torch.tanh(keys + self.query_proj(query).unsqueeze(1))
        return hidden.matmul(self._direction().to(hidden.dtype)) + self.r

    def energy_at(self, query_part: Tensor, keys: Tensor, index: Tensor) -> Tensor:
        """The energy at one position per row. query_part: batch x attn_dim (W q);
        index: batch (0-indexed) -> batch. Reads ``keys`` at ``index`` only."""
        rows = torch.arange(keys.size(0), device=keys.device)
        hidden = torch.tanh(keys[rows, index] + query_part)
        return hidden.matmul(self._direction().to(hidden.dtype)) + self.r


class MonotonicAttentionBase(Attention):
    """The shared head; subclasses say how the context is spread around it."""

    streaming = True

    def __init__(self, args, query_dim, key_dim, embed_dim):
        super().__init__(args, query_dim, key_dim, embed_dim)
        self.attn_dim = attention_dim(args, query_dim)
        self.noise_var = getattr(args, "monotonic_noise_var", 4.0)
        self.stop_rule = "energy"  # the test-time rule; fairseq-generate's --monotonic-stop
        self.stop_threshold = 0.5  # where the rule stops; fairseq-generate's --monotonic-stop-threshold
        self.energy = MonotonicEnergy(
            query_dim,
            key_dim,
            self.attn_dim,
            getattr(args, "monotonic_energy_bias_init", -4.0),
            getattr(args, "monotonic_energy", None) or "normalized",
            getattr(args, "monotonic_energy_scale_init", None),
        )

    @staticmethod
    def add_monotonic_args(parser):
        parser.add_argument(
            "--monotonic-noise-var",
            type=non_negative_float,
            metavar="N",
            help="variance n of the Gaussian noise added to the monotonic energies in training "
            "(MILk Eq. 11; paper: 4); 0 = none",
        )
        parser.add_argument(
            "--monotonic-energy",
            choices=ENERGY_FORMS,
            metavar="FORM",
            help="the head's energy: normalized (Raffel's g v/||v||, MILk Eq. 7; default) or "
            "unnormalized (v^T tanh(...) + r, as fairseq's and TF Addons' additive energy)",
        )
        parser.add_argument(
            "--monotonic-energy-bias-init",
            type=finite_float,
            metavar="R",
            help="initial value of the monotonic energy's scalar bias r (negative: the head "
            "starts by reading; default -4)",
        )
        parser.add_argument(
            "--monotonic-energy-scale-init",
            type=positive_float,
            metavar="G",
            help="initial scale of the monotonic energy: g of the normalized form (default "
            "1/sqrt(attention dim), as TensorFlow and Lingvo), ||v|| of the unnormalized one "
            "(default: v uniform in +-1/sqrt(attention dim)); no input lifts the energy above r "
            "plus the scale times sqrt(attention dim)",
        )

    def precompute(self, keys_in, src_pad, summary=None):
        return {
            "values": keys_in,  # batch x src_len x key_dim
            "mono_keys": self.energy.keys(keys_in),  # batch x src_len x attn_dim
            "src_pad": src_pad,
            "lengths": source_lengths(src_pad),  # batch (long), |x| with EOS
        }

    def init_state(self, cache):
        if self.training:
            return {"log_alpha": initial_log_alpha(cache["src_pad"])}
        return {"head": torch.zeros_like(cache["lengths"])}

    # -- the head ----------------------------------------------------------------------------

    def training_alignment(self, query, cache, state):
        """log alpha_i and alpha_i (batch x src_len) of the expected alignment."""
        energy = self.energy.energies(query, cache["mono_keys"]).float()
        if self.training and self.noise_var > 0:
            energy = energy + torch.randn_like(energy) * math.sqrt(self.noise_var)
        log_alpha = monotonic_alignment_step(state["log_alpha"], energy, cache["src_pad"])
        return log_alpha, log_alpha.exp().masked_fill(cache["src_pad"], 0.0)

    def advance_head(self, query, cache, head):
        """Move each row's head (0-indexed) to the first position >= head with energy > 0, or
        to its last real token. Energies are computed one position at a time, at the head.

        Returns ``(head, starved)``. With a source still arriving (``cache["finished"]`` False
        for a row, see :meth:`..models.lstm_attention.AttentionLSTMDecoder`), the last token
        read is not the end: a head that wants to move past it stays there and the row is
        ``starved`` (the caller must READ one more token and redo the step)."""
        keys = cache["mono_keys"]
        last = cache["lengths"] - 1
        finished = cache.get("finished")
        query_part = self.energy.query_proj(query)
        moving = torch.ones_like(head, dtype=torch.bool)
        starved = torch.zeros_like(moving)
        cumulative = self.stop_rule == "cumulative"
        log_going = torch.zeros(head.shape, device=head.device) if cumulative else None
        q = self.stop_threshold  # 1/2 by default: energy > 0; prod (1 - p_j) <= 1/2
        log_going_limit, energy_limit = math.log1p(-q), math.log(q / (1.0 - q))
        while True:
            energy = self.energy.energy_at(query_part, keys, head)
            if cumulative:  # P(stopped since the start) = 1 - prod (1 - p_j) reaches q
                log_going = log_going + torch.where(moving, F.logsigmoid(-energy.float()), 0.0)
                chose = log_going <= log_going_limit
            else:  # p_ij = sigmoid(e_ij) > q
                chose = energy > energy_limit
            at_end = head >= last
            if finished is not None:
                starved = starved | (moving & at_end & ~chose & ~finished)
            moving = moving & ~chose & ~at_end
            if not bool(moving.any()):
                return head, starved
            head = head + moving.long()

    # -- the step ----------------------------------------------------------------------------

    def step(self, query, cache, state, prev_embed, temperature=None):
        values = cache["values"]
        if "log_alpha" in state:
            log_alpha, alpha = self.training_alignment(query, cache, state)
            weights = self.expected_weights(query, cache, log_alpha, alpha)
            new_state = {"log_alpha": log_alpha}
            delay = expected_delay(alpha)
        else:
            head, starved = self.advance_head(query, cache, state["head"])
            weights = self.hard_weights(query, cache, head)
            new_state = {"head": head}
            delay = (head + 1).to(position_dtype(values))
        context = torch.bmm(weights.unsqueeze(1).to(values.dtype), values).squeeze(1)  # batch x key_dim
        # positions in float32 whatever the model's dtype: bf16 rounds 257, 259 ...
        extras = {"delay": delay.to(position_dtype(values))}
        if "head" in new_state:  # source positions the test-time context is spread over
            extras["window_size"] = self.hard_window(extras["delay"])
            if "finished" in cache:  # streaming input: rows that must READ before writing
                extras["needs_source"] = starved
        return AttentionStep(context, weights, new_state, extras)

    def hard_window(self, delay: Tensor) -> Tensor:
        """Number of states the hard context uses when the head is at ``delay`` (1-indexed)."""
        return delay

    @abc.abstractmethod
    def expected_weights(self, query, cache, log_alpha, alpha) -> Tensor:
        """Training: the expected test-time weights (batch x src_len) given alpha_i."""

    @abc.abstractmethod
    def hard_weights(self, query, cache, head) -> Tensor:
        """Evaluation: the weights (batch x src_len, zero beyond ``head``) with the head at
        ``head`` (batch, 0-indexed)."""


def _positions(cache) -> Tensor:
    """1 x src_len row of 0-indexed positions."""
    return torch.arange(cache["src_pad"].size(1), device=cache["src_pad"].device).unsqueeze(0)


@register_attention("monotonic")
class HardMonotonicAttention(MonotonicAttentionBase):
    """Raffel et al.: the context is the state at the head, c_i = h_{t_i}."""

    @staticmethod
    def add_args(parser):
        MonotonicAttentionBase.add_monotonic_args(parser)

    def expected_weights(self, query, cache, log_alpha, alpha):
        return alpha

    def hard_weights(self, query, cache, head):
        return (_positions(cache) == head.unsqueeze(1)).float()

    def hard_window(self, delay):
        return torch.ones_like(delay)


class SoftLookbackBase(MonotonicAttentionBase):
    """MoChA and MILk: a second, soft energy u_ij = v^T tanh(W' s_{i-1} + U h_j) spreads the
    context over states before the head."""

    def __init__(self, args, query_dim, key_dim, embed_dim):
        super().__init__(args, query_dim, key_dim, embed_dim)
        self.scorer = build_scorer(args, query_dim, key_dim)

    def precompute(self, keys_in, src_pad, summary=None):
        cache = super().precompute(keys_in, src_pad, summary)
        cache["soft_keys"] = self.scorer.keys(keys_in)
        return cache

    def soft_energies(self, query, cache):
        return self.scorer.scores(query, cache["soft_keys"]).float()  # batch x src_len


@register_attention("mocha")
class MonotonicChunkwiseAttention(SoftLookbackBase):
    """Chiu & Raffel: soft attention over the chunk h_{t_i - w + 1} .. h_{t_i}."""

    def __init__(self, args, query_dim, key_dim, embed_dim):
        super().__init__(args, query_dim, key_dim, embed_dim)
        self.chunk_size = getattr(args, "mocha_chunk_size", 8)

    @staticmethod
    def add_args(parser):
        parser.add_argument(
            "--mocha-chunk-size",
            type=positive_int,
            metavar="W",
            help="MoChA's chunk: soft attention over the W states ending at the head (default 8)",
        )

    def expected_weights(self, query, cache, log_alpha, alpha):
        return mocha_attention(log_alpha, self.soft_energies(query, cache), cache["src_pad"], self.chunk_size)

    def hard_weights(self, query, cache, head):
        pos = _positions(cache)
        outside = (pos > head.unsqueeze(1)) | (pos <= (head - self.chunk_size).unsqueeze(1))
        return masked_softmax(self.soft_energies(query, cache), cache["src_pad"] | outside)

    def hard_window(self, delay):
        return delay.clamp(max=self.chunk_size)


@register_attention("milk")
class MonotonicInfiniteLookbackAttention(SoftLookbackBase):
    """Arivazhagan et al.: soft attention over every state up to the head (Eqs. 12-14)."""

    @staticmethod
    def add_args(parser):
        pass  # the head's flags are registered once, by ``monotonic``

    def expected_weights(self, query, cache, log_alpha, alpha):
        return milk_attention(log_alpha, self.soft_energies(query, cache), cache["src_pad"])

    def hard_weights(self, query, cache, head):
        beyond = _positions(cache) > head.unsqueeze(1)
        return masked_softmax(self.soft_energies(query, cache), cache["src_pad"] | beyond)
