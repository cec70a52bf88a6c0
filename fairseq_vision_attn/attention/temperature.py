"""Attention temperature as a normaliser any softmax-based mechanism can take (Lin et al. 2018).

Self-adaptive control of temperature (SACT, ``--attention-temperature sact``)::

    beta_t  = tanh(W_c c_{t-1} + U_s s_t)              (Eq. 2)
    tau_t   = lambda ** beta_t,  in (1/lambda, lambda)   (Eq. 1, ``--sact-lambda``, default 4)
    alpha_t = softmax_i(e_{t,i} / tau_t)                 (Eq. 4)
    c_t     = sum_i alpha_{t,i} h_i                      (Eq. 3)

``--attention-temperature fixed --fixed-temperature T`` divides the scores by a constant T
(the paper's Fig. 1 control); ``none`` (the default) leaves the mechanism untouched.

How this decoder takes the paper's quantities (it attends before its LSTM step, Bahdanau
order, so the paper's s_t, the LSTM output of the current step, does not exist yet):

- **s_t is the attention query**, the top decoder layer's state h_{t-1}, the most recent
  decoder state when the step attends (SPEC sec. 6); with ``--decoder-step conditional`` the
  query is s = LSTM_cond(emb(y_{t-1}), h_{t-1}), which has read y_{t-1} as the paper's s_t has
  (tau_t then depends on the newest output word without ``--sact-embedding``);
- **c_{t-1} is the context this attention returned at the previous step**; c_0, which the
  paper initialises "with the initial state of the decoder", is the encoder summary e from
  which this decoder's initial state h_0 = tanh(W_init e) is computed (it has the context's
  size, which h_0 need not have);
- W_c and U_s map to one scalar each and have no bias, as in Eq. 2, so W_c = U_s = 0 gives
  tau_t = 1: exactly the mechanism without temperature.

Variants of beta's network, each a flag so that they can be compared (the claims issue):

- ``--sact-embedding``: beta also reads emb(y_{t-1}) through its own V_e (no bias), the
  newest output token, which the paper's s_t has read and this decoder's query h_{t-1} has
  not (V_e = 0 is the default form);
- ``--sact-form mlp``: beta = tanh(W_2 dropout(selu(W_1 [c_{t-1}; s_t (; emb)] + b_1)) + b_2),
  the form of the authors' code (lancopku/SACT), hidden size = the attention size;
- ``--sact-dropout D``: dropout on beta's inputs (linear form) or on its hidden layer (mlp).

The temperature is a wrapper (:class:`TemperedAttention`) around the mechanism, not a copy
of it: the wrapper keeps c_{t-1} in the step state and passes tau_t to the mechanism's
``step(..., temperature=tau_t)``. Mechanisms that take it set ``supports_temperature``:

- ``additive`` (global): softmax(score / tau_t);
- ``local`` (Luong local-p): the window's softmax(score / tau_t), then the Gaussian;
- ``flexible``: softmax(score / tau_t - penalty): only the content score is tempered, so the
  position penalty and hence the vision-span window of ``--vision-span-threshold`` keep
  their meaning (penalty(s) < tau selects the same positions with and without SACT);
- ``none`` attends to nothing and refuses it.
"""

import torch
from torch import Tensor, nn

from ..errors import VisionAttnError, greater_than_one, positive_float, probability, str2bool
from .base import Attention, AttentionStep

TEMPERATURE_CHOICES = ("none", "fixed", "sact")
SACT_FORMS = ("linear", "mlp")
PREV_CONTEXT = "temperature_prev_context"  # step-state key of c_{t-1}


def add_temperature_args(parser):
    parser.add_argument(
        "--attention-temperature",
        choices=TEMPERATURE_CHOICES,
        metavar="KIND",
        help="divide the attention scores by a temperature: none, fixed (--fixed-temperature) or "
        "sact (Lin et al. 2018; lstm_sact's default); works with additive, local and flexible",
    )
    parser.add_argument(
        "--sact-lambda",
        type=greater_than_one,
        metavar="LAMBDA",
        help="SACT's bound: tau_t = lambda^beta_t lies in (1/lambda, lambda) (default 4)",
    )
    parser.add_argument(
        "--sact-form",
        choices=SACT_FORMS,
        metavar="FORM",
        help="beta's network: linear (Lin Eq. 2, default) or mlp (Linear, SELU, Dropout, Linear, Tanh)",
    )
    parser.add_argument(
        "--sact-dropout",
        type=probability,
        metavar="D",
        help="dropout on beta's inputs (linear) or hidden layer (mlp) (default 0)",
    )
    parser.add_argument(
        "--sact-embedding",
        type=str2bool,
        nargs="?",
        const=True,
        metavar="BOOL",
        help="beta also reads emb(y_{t-1}), the newest output token (default false)",
    )
    parser.add_argument(
        "--fixed-temperature",
        type=positive_float,
        metavar="T",
        help="the constant temperature of --attention-temperature fixed (default 1)",
    )


class SelfAdaptiveTemperature(nn.Module):
    """tau_t = lambda ** tanh(W_c c_{t-1} + U_s s_t) (Eqs. 1-2), or a variant (module docstring)."""

    def __init__(
        self,
        context_dim: int,
        query_dim: int,
        lam: float,
        form: str = "linear",
        dropout: float = 0.0,
        embed_dim: int = 0,
        hidden_dim: int = 0,
    ):
        super().__init__()
        self.lam, self.form, self.use_embedding = lam, form, embed_dim > 0
        self.dropout = nn.Dropout(dropout)
        if form == "linear":
            self.context_proj = nn.Linear(context_dim, 1, bias=False)  # W_c
            self.state_proj = nn.Linear(query_dim, 1, bias=False)  # U_s
            self.embed_proj = nn.Linear(embed_dim, 1, bias=False) if self.use_embedding else None  # V_e
        else:
            hidden_dim = hidden_dim or query_dim
            self.hidden = nn.Linear(context_dim + query_dim + embed_dim, hidden_dim)  # W_1, b_1
            self.out = nn.Linear(hidden_dim, 1)  # W_2, b_2

    def forward(self, query: Tensor, prev_context: Tensor, prev_embed: Tensor = None) -> Tensor:
        """query: batch x query_dim, prev_context: batch x context_dim, prev_embed: batch x
        embed_dim (read with --sact-embedding) -> tau_t: batch."""
        if self.use_embedding and prev_embed is None:
            raise ValueError("this temperature reads emb(y_{t-1}): pass prev_embed")
        if self.form == "linear":
            energy = self.context_proj(self.dropout(prev_context)) + self.state_proj(self.dropout(query))
            if self.use_embedding:
                energy = energy + self.embed_proj(self.dropout(prev_embed))
        else:
            inputs = [prev_context, query] + ([prev_embed] if self.use_embedding else [])
            hidden = self.dropout(torch.selu(self.hidden(torch.cat(inputs, dim=-1))))
            energy = self.out(hidden)
        return self.lam ** torch.tanh(energy).squeeze(-1)


class FixedTemperature(nn.Module):
    """A constant temperature (Lin et al.'s Fig. 1 control); no parameters."""

    def __init__(self, value: float):
        super().__init__()
        self.value = value

    def forward(self, query: Tensor, prev_context: Tensor, prev_embed: Tensor = None) -> Tensor:
        return query.new_full((query.size(0),), self.value)


class TemperedAttention(Attention):
    """A softmax-based mechanism whose scores are divided by a per-step temperature.

    Transparent to the decoder and to the rest of the package: it reports the inner
    mechanism's ``registry_name``, ``weights_sum_to_one``, ``streaming`` and context size,
    and :attr:`mechanism` reaches the inner module (e.g. for ``span_threshold``).
    """

    def __init__(self, inner: Attention, temperature: nn.Module):
        super().__init__(None, inner.query_dim, inner.key_dim, inner.embed_dim)
        self.inner = inner
        self.temperature = temperature
        self.registry_name = inner.registry_name
        self.weights_sum_to_one = inner.weights_sum_to_one
        self.streaming = inner.streaming

    @property
    def context_dim(self):
        return self.inner.context_dim

    @property
    def mechanism(self):
        return self.inner.mechanism

    def precompute(self, keys_in, src_pad, summary=None):
        cache = self.inner.precompute(keys_in, src_pad, summary)
        if summary is None:
            summary = keys_in.new_zeros(keys_in.size(0), self.context_dim)
        cache[PREV_CONTEXT] = summary  # c_0 (module docstring)
        return cache

    def init_state(self, cache):
        state = dict(self.inner.init_state(cache))
        state[PREV_CONTEXT] = cache[PREV_CONTEXT]
        return state

    def step(self, query, cache, state, prev_embed):
        inner_state = {k: v for k, v in state.items() if k != PREV_CONTEXT}
        tau = self.temperature(query, state[PREV_CONTEXT], prev_embed)  # batch
        out = self.inner.step(query, cache, inner_state, prev_embed, temperature=tau)
        new_state = dict(out.state)
        new_state[PREV_CONTEXT] = out.context  # c_t, this step's context, for the next step
        extras = dict(out.extras)
        extras["temperature"] = tau
        return AttentionStep(out.context, out.weights, new_state, extras)


def wrap_with_temperature(attention: Attention, args) -> Attention:
    """Apply ``--attention-temperature`` to a built mechanism, or refuse it clearly."""
    kind = getattr(args, "attention_temperature", None) or "none"
    if kind == "none":
        return attention
    if kind not in TEMPERATURE_CHOICES:
        raise VisionAttnError(
            f"--attention-temperature: unknown kind {kind!r}; valid choices: {', '.join(TEMPERATURE_CHOICES)}"
        )
    if not getattr(attention, "supports_temperature", False):
        from .registry import ATTENTION_REGISTRY

        able = sorted(n for n, c in ATTENTION_REGISTRY.items() if getattr(c, "supports_temperature", False))
        raise VisionAttnError(
            f"--attention-temperature {kind} cannot be applied to --attention {attention.registry_name}; "
            f"mechanisms that take a temperature: {', '.join(able)}"
        )
    if attention.context_dim != attention.key_dim:
        raise VisionAttnError(
            f"--attention-temperature {kind}: c_0 needs context size == encoder output size "
            f"({attention.context_dim} != {attention.key_dim})"
        )
    if kind == "sact":
        lam = getattr(args, "sact_lambda", None) or 4.0
        if not lam > 1:
            raise VisionAttnError(f"--sact-lambda must be > 1, got {lam}")
        form = getattr(args, "sact_form", None) or "linear"
        if form not in SACT_FORMS:
            raise VisionAttnError(
                f"--sact-form: unknown form {form!r}; valid choices: {', '.join(SACT_FORMS)}"
            )
        temperature = SelfAdaptiveTemperature(
            attention.context_dim,
            attention.query_dim,
            lam,
            form=form,
            dropout=getattr(args, "sact_dropout", None) or 0.0,
            embed_dim=attention.embed_dim if getattr(args, "sact_embedding", False) else 0,
            hidden_dim=getattr(args, "attention_dim", None) or attention.query_dim,
        )
    else:
        value = getattr(args, "fixed_temperature", None) or 1.0
        if not value > 0:
            raise VisionAttnError(f"--fixed-temperature must be > 0, got {value}")
        temperature = FixedTemperature(value)
    return TemperedAttention(attention, temperature)
