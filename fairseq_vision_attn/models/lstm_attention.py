"""One LSTM encoder-decoder for every mechanism; only the attention module differs.

Layout: the encoder's outputs are **batch-major** (``batch x src_len x dim``, right-padded)
unlike fairseq's own ``lstm`` (time-major), because every attention module and the
incremental state are batch-major: beam search reorders them all with ``index_select(0, .)``.
Padding masks are True at padding.

Decoder step t (Bahdanau order, SPEC sec. 2; ``--decoder-step bahdanau``, the default)::

    q   = h_{t-1}                                    # top decoder layer's previous state
    c_t = attention.step(q, cache, state, emb(y_{t-1}))
    h_t = LSTM([emb(y_{t-1}); c_t], h_{t-1})
    out = W_o tanh(W_r [h_t; c_t; emb(y_{t-1})])     # --decoder-out-embed-dim wide

Two other orders, options for measuring what the step order does (docs/mechanisms.md):
``conditional`` (Sennrich et al. 2017's conditional GRU, with LSTM cells: the query has read
y_{t-1})::

    s   = LSTM_cond(emb(y_{t-1}), h_{t-1})           # first layer's state
    c_t = attention.step(s, ...);  h_t = LSTM(c_t, s)

and ``luong`` (Luong et al. 2015 with input feeding, the order of fairseq's ``lstm``)::

    h_t = LSTM([emb(y_{t-1}); f_{t-1}], h_{t-1}),  f_0 = 0
    c_t = attention.step(h_t, ...)
    f_t = dropout(tanh(W_r [h_t; c_t; emb(y_{t-1})]));  out = W_o f_t

Dropout (training only): ``--decoder-dropout-in`` on emb(y_{t-1}), ``--decoder-dropout-out`` on
h_t and on the tanh layer, ``--encoder-dropout-out`` on the encoder states the attention averages,
and ``--decoder-dropout-context`` (default 0) on c_t where the LSTM and the readout read it.

The initial decoder state is h_0 = tanh(W_init e), c_0 = 0 per layer, where e is the encoder's
final state (forward direction at the last real token; for a bidirectional encoder, the
backward direction at the first token): Bahdanau et al.'s initialisation. Streaming mechanisms
(monotonic, mocha, milk, waitk) use a unidirectional encoder and h_0 = tanh(b) with a learned b,
so that nothing the decoder does depends on a source token its policy has not read.
"""

import contextlib
import hashlib
import logging
import os
import sys
from typing import Dict, List

import torch
from fairseq import utils
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
)
from torch import Tensor, nn

from ..attention import ATTENTION_REGISTRY, add_attention_args, attention_choices, build_attention
from ..errors import VisionAttnError, non_negative_float, positive_int, probability, str2bool

MODEL_NAME = "vision_attn_lstm"
#: --decoder-step: where the attention sits in a decoder step (see AttentionLSTMDecoder)
DECODER_STEPS = ("bahdanau", "conditional", "luong")


logger = logging.getLogger(__name__)

# buffers saved with every checkpoint: which dictionaries (words and their order) it was trained on
FINGERPRINTS = {"source": "source_dictionary_fingerprint", "target": "target_dictionary_fingerprint"}


def dictionary_fingerprint(dictionary) -> Tensor:
    """16 bytes of SHA-256 over the dictionary's symbols in index order."""
    digest = hashlib.sha256("\n".join(dictionary.symbols).encode("utf-8")).digest()[:16]
    return torch.tensor(list(digest), dtype=torch.uint8)


def check_under_plain_translation_task(args, task, model):
    """When fairseq's own ``--task translation`` (fairseq-train's and fairseq-generate's default)
    builds one of these models: one warning line (it trains the same model, but only
    ``translation_vision_attn`` has the package's decoding and exact resume:
    docs/fairseq-notes.md), and, before any training step, as that task does: a criterion that
    needs another kind of model (``accepts``) refused (else the criterion's forward does, and
    fairseq writes a ``crash.pt``), and, when the program is fairseq-train, a flag this model's
    attention ignores (other commands build from a checkpoint, whose stored arguments are not the
    user's flags)."""
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.tasks.translation import TranslationTask

    from ..criterions.common import refuse_unaccepted
    from ..tasks.translation_vision_attn import TranslationVisionAttnTask

    if not isinstance(task, TranslationTask) or isinstance(task, TranslationVisionAttnTask):
        return
    logger.warning(
        "fairseq's translation task: add --task translation_vision_attn, which alone resumes with "
        "the same batches and early-stopping count, decodes every sentence and decodes streaming "
        "archs simultaneously with their latency"
    )
    attention = model.decoder.attention
    refuse_unaccepted(
        CRITERION_REGISTRY.get(getattr(args, "criterion", None)), getattr(attention, "mechanism", attention)
    )
    if os.path.basename(sys.argv[0]) == "fairseq-train":
        refuse_ignored_flags(args)


@register_model(MODEL_NAME)
class VisionAttnLSTMModel(FairseqEncoderDecoderModel):
    """LSTM encoder-decoder whose attention is chosen by ``--attention`` (see :mod:`..attention`)."""

    def __init__(self, encoder, decoder):
        super().__init__(encoder, decoder)
        for side, module in (("source", encoder), ("target", decoder)):
            self.register_buffer(FINGERPRINTS[side], dictionary_fingerprint(module.dictionary))

    @staticmethod
    def add_args(parser):
        # fmt: off
        parser.add_argument("--attention", choices=attention_choices(), metavar="NAME",
                            help="attention mechanism: " + ", ".join(attention_choices()))
        parser.add_argument("--param-init", type=non_negative_float, metavar="R",
                            help="initialise the LSTMs, the initial-state, readout and output "
                                 "layers uniformly in [-R, R] (OpenNMT's -param_init, fairseq's "
                                 "lstm: 0.1; default 0.1); 0 = PyTorch's defaults. Attention "
                                 "modules keep their own initialisation")
        parser.add_argument("--dropout", type=probability, metavar="D",
                            help="dropout probability (default for all dropout flags)")
        parser.add_argument("--encoder-embed-dim", type=positive_int, metavar="N",
                            help="encoder embedding dimension")
        parser.add_argument("--encoder-embed-path", type=str, metavar="STR",
                            help="path to pre-trained encoder embedding")
        parser.add_argument("--encoder-hidden-size", type=positive_int, metavar="N",
                            help="encoder LSTM hidden size (per direction)")
        parser.add_argument("--encoder-layers", type=positive_int, metavar="N",
                            help="number of encoder LSTM layers")
        parser.add_argument("--encoder-bidirectional", type=str2bool, nargs="?", const=True,
                            metavar="BOOL", help="bidirectional encoder (true/false); "
                            "streaming archs require false")
        parser.add_argument("--encoder-dropout-in", type=probability, metavar="D",
                            help="dropout on the encoder's input embeddings")
        parser.add_argument("--encoder-dropout-out", type=probability, metavar="D",
                            help="dropout on the encoder's outputs (and between layers)")
        parser.add_argument("--decoder-embed-dim", type=positive_int, metavar="N",
                            help="decoder embedding dimension")
        parser.add_argument("--decoder-embed-path", type=str, metavar="STR",
                            help="path to pre-trained decoder embedding")
        parser.add_argument("--decoder-hidden-size", type=positive_int, metavar="N",
                            help="decoder LSTM hidden size")
        parser.add_argument("--decoder-layers", type=positive_int, metavar="N",
                            help="number of decoder LSTM layers")
        parser.add_argument("--decoder-out-embed-dim", type=positive_int, metavar="N",
                            help="width of the tanh layer before the softmax (Shu: 600)")
        parser.add_argument("--decoder-dropout-in", type=probability, metavar="D",
                            help="dropout on the decoder's input embeddings")
        parser.add_argument("--decoder-dropout-out", type=probability, metavar="D",
                            help="dropout on the decoder's outputs (and between layers)")
        parser.add_argument("--decoder-dropout-context", type=probability, metavar="D",
                            help="dropout on the context c_t where the decoder LSTM and the "
                                 "readout read it (default 0: only the encoder's outputs are "
                                 "dropped, which an attention average dilutes); the attention's "
                                 "own state keeps c_t undropped")
        parser.add_argument("--decoder-step", choices=DECODER_STEPS, metavar="ORDER",
                            help="the order of one decoder step: bahdanau (default, SPEC sec. 2: "
                                 "attend with h_{t-1}, then h_t = LSTM([e; c_t])), conditional "
                                 "(Nematus' conditional GRU with LSTMs: s = LSTM(e, h_{t-1}), "
                                 "attend with s, h_t = LSTM(c_t, s)) or luong (fairseq's lstm: "
                                 "h_t = LSTM([e; f_{t-1}]), attend with h_t, feed the readout "
                                 "f_t to the next step); choices: " + ", ".join(DECODER_STEPS))
        parser.add_argument("--share-decoder-input-output-embed", action="store_true",
                            help="tie the decoder's input and output embeddings "
                                 "(needs --decoder-out-embed-dim == --decoder-embed-dim)")
        # fmt: on
        add_attention_args(parser)

    @classmethod
    def build_model(cls, args, task):
        """Build a new model instance (called by fairseq-train and checkpoint loading)."""
        base_architecture(args)
        validate_args(args)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        encoder_embed = load_or_build_embedding(args.encoder_embed_path, src_dict, args.encoder_embed_dim)
        decoder_embed = load_or_build_embedding(args.decoder_embed_path, tgt_dict, args.decoder_embed_dim)
        encoder = LSTMEncoder(args, src_dict, encoder_embed)
        decoder = AttentionLSTMDecoder(args, tgt_dict, decoder_embed, encoder.output_dim)
        model = cls(encoder, decoder)
        if args.param_init > 0:
            model.init_uniform(args.param_init)
        model.arch_name = getattr(args, "arch", MODEL_NAME)
        check_under_plain_translation_task(args, task, model)
        return model

    @property
    def attention(self):
        return self.decoder.attention

    def init_uniform(self, bound):
        """U(-bound, bound) for every parameter outside the embeddings and the attention module
        (learns far faster than PyTorch's defaults here: docs/results.md, "Initialisation")."""
        skip = (self.encoder.embed_tokens, self.decoder.embed_tokens, self.decoder.attention)
        skipped = {id(p) for module in skip for p in module.parameters()}
        for param in self.parameters():
            if id(param) not in skipped:
                nn.init.uniform_(param, -bound, bound)

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """Load weights, turning an architecture or vocabulary mismatch into one clear error."""
        state_dict = self._check_fingerprints(state_dict)
        own, theirs = set(self.state_dict()), set(state_dict)
        if strict and own != theirs:
            missing, unexpected = sorted(own - theirs), sorted(theirs - own)
            raise VisionAttnError(
                f"checkpoint does not match --arch {getattr(self, 'arch_name', '?')} with "
                f"--attention {self.decoder.attention.registry_name}: "
                f"missing {missing[:3]}{'...' if len(missing) > 3 else ''}, "
                f"unexpected {unexpected[:3]}{'...' if len(unexpected) > 3 else ''}; "
                "load it with the arch and attention it was trained with"
            )
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)

    def _check_fingerprints(self, state_dict):
        """Refuse weights trained on other dictionaries than the data-bin's (same size, other
        words or order: it would decode with wrong token ids); weights saved before fingerprints
        existed load with a warning."""
        self._refuse_other_vocabularies(state_dict)
        missing = [key for key in FINGERPRINTS.values() if key not in state_dict]
        if missing:
            logger.warning(
                "this checkpoint stores no dictionary fingerprints (trained before they existed): "
                "it cannot be checked that the data-bin's dictionaries are the ones it was trained on"
            )
            own = self.state_dict()
            return {**state_dict, **{key: own[key] for key in missing}}
        for side, key in FINGERPRINTS.items():
            if not torch.equal(state_dict[key].cpu(), getattr(self, key).cpu()):
                raise VisionAttnError(
                    f"the checkpoint was trained with another {side} dictionary than the data-bin's "
                    "(same size, other words or order; it would decode with wrong token ids): decode or "
                    "fine-tune with the data-bin (dict.*.txt) it was trained on"
                )
        return state_dict

    def _refuse_other_vocabularies(self, state_dict):
        """A checkpoint trained on other dictionaries than the data-bin's, in one line."""
        for side, key in (
            ("source", "encoder.embed_tokens.weight"),
            ("target", "decoder.embed_tokens.weight"),
        ):
            theirs, ours = state_dict.get(key), self.state_dict().get(key)
            if theirs is not None and ours is not None and theirs.shape[0] != ours.shape[0]:
                raise VisionAttnError(
                    f"the checkpoint's {side} vocabulary has {theirs.shape[0]:,} entries, the "
                    f"data-bin's {side} dictionary {ours.shape[0]:,}: decode or fine-tune with the "
                    "data-bin (dict.*.txt) the checkpoint was trained on"
                )


def validate_args(args):
    """Cross-flag checks that argparse cannot do (single flags are checked by their types)."""
    for dest in ("encoder_embed_path", "decoder_embed_path"):
        path = getattr(args, dest, None)
        if path and not os.path.isfile(path):
            raise VisionAttnError(f"--{dest.replace('_', '-')}: no such file: {path}")
    if args.share_decoder_input_output_embed and args.decoder_out_embed_dim != args.decoder_embed_dim:
        raise VisionAttnError(
            "--share-decoder-input-output-embed needs --decoder-out-embed-dim "
            f"({args.decoder_out_embed_dim}) == --decoder-embed-dim ({args.decoder_embed_dim})"
        )
    if args.decoder_step not in DECODER_STEPS:
        raise VisionAttnError(
            f"--decoder-step: unknown order {args.decoder_step!r}; valid choices: " + ", ".join(DECODER_STEPS)
        )
    if args.attention not in attention_choices():
        raise VisionAttnError(
            f"--attention: unknown mechanism {args.attention!r}; valid choices: "
            + ", ".join(attention_choices())
        )
    if ATTENTION_REGISTRY[args.attention].streaming and args.encoder_bidirectional:
        raise VisionAttnError(
            f"--encoder-bidirectional true cannot be used with the streaming attention "
            f"{args.attention!r}: a backward LSTM would read the whole source before the first "
            "target token; use --encoder-bidirectional false (the default of lstm_monotonic, "
            "lstm_mocha, lstm_milk and lstm_waitk)"
        )


def refuse_ignored_flags(args):
    """Refuse a mechanism-only flag set (to a value other than its default) on a model whose
    attention does not read it. The task calls this for models built from the command line
    only: a checkpoint's stored arguments are not the user's flags."""
    _refuse_foreign_flags(args, MECHANISM_FLAGS, "attention")
    _refuse_foreign_flags(args, TEMPERATURE_FLAGS, "attention_temperature")


def _refuse_foreign_flags(args, flags, selector):
    chosen = getattr(args, selector, None)
    for dest, (owners, default) in flags.items():
        value = getattr(args, dest, None)
        if chosen not in owners and value is not None and value != default:
            owner_names = " or ".join(f"--{selector.replace('_', '-')} {o}" for o in owners)
            raise VisionAttnError(
                f"--{dest.replace('_', '-')} {value} has no effect here: it is read only with "
                f"{owner_names}, and this model has --{selector.replace('_', '-')} {chosen} "
                f"(--arch {getattr(args, 'arch', '?')}); drop the flag or pick that mechanism"
            )


def load_or_build_embedding(path, dictionary, dim):
    embedding = nn.Embedding(len(dictionary), dim, padding_idx=dictionary.pad())
    nn.init.uniform_(embedding.weight, -0.1, 0.1)
    nn.init.constant_(embedding.weight[dictionary.pad()], 0)
    if path:
        embed_dict = utils.parse_embedding(path)
        utils.load_embedding(embed_dict, dictionary, embedding)
    return embedding


class LSTMEncoder(FairseqEncoder):
    """Embeddings -> (bi)LSTM. Outputs batch-major, right-padded states."""

    #: the decoder's attention weights index right-padded source positions, whatever the batch's
    #: padding (the task's alignment printing reads this)
    right_pads_source = True

    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.embed_tokens = embed_tokens
        self.dropout_in = nn.Dropout(args.encoder_dropout_in)
        self.dropout_out = nn.Dropout(args.encoder_dropout_out)
        self.bidirectional = args.encoder_bidirectional
        self.hidden_size = args.encoder_hidden_size
        self.lstm = nn.LSTM(
            input_size=embed_tokens.embedding_dim,
            hidden_size=args.encoder_hidden_size,
            num_layers=args.encoder_layers,
            dropout=args.encoder_dropout_out if args.encoder_layers > 1 else 0.0,
            bidirectional=self.bidirectional,
            batch_first=True,
        )
        self.output_dim = args.encoder_hidden_size * (2 if self.bidirectional else 1)

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, **kwargs):
        """src_tokens: batch x src_len (left- or right-padded); src_lengths: batch."""
        src_tokens = utils.convert_padding_direction(src_tokens, self.padding_idx, left_to_right=True)
        src_pad = src_tokens.eq(self.padding_idx)  # batch x src_len, True = padding
        lengths = (~src_pad).long().sum(1)
        x = self.dropout_in(self.embed_tokens(src_tokens))  # batch x src_len x embed
        cpu_autocast = x.device.type == "cpu" and torch.is_autocast_enabled("cpu")
        if cpu_autocast:
            # torch 2.13's oneDNN has no bfloat16 LSTM primitive on CPUs without native bf16
            # ("could not create a primitive descriptor"): the recurrence runs in float32
            x = x.float()
        with torch.autocast("cpu", enabled=False) if cpu_autocast else contextlib.nullcontext():
            packed = nn.utils.rnn.pack_padded_sequence(
                x, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False
            )
            packed_out, _ = self.lstm(packed)
        states, _ = nn.utils.rnn.pad_packed_sequence(
            packed_out, batch_first=True, total_length=src_tokens.size(1)
        )  # batch x src_len x output_dim
        states = self.dropout_out(states)
        return {
            "encoder_out": [states],
            "encoder_padding_mask": [src_pad],
            "encoder_summary": [self.summary(states, lengths)],
            "src_lengths": [lengths],
        }

    def summary(self, states: Tensor, lengths: Tensor) -> Tensor:
        """Final state: forward half at the last real token (+ backward half at token 1)."""
        last = (lengths - 1).clamp(min=0)  # batch
        forward = states[torch.arange(states.size(0), device=states.device), last]  # batch x out
        if not self.bidirectional:
            return forward
        return torch.cat([forward[:, : self.hidden_size], states[:, 0, self.hidden_size :]], dim=-1)

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """Beam search calls this before every step. Only a row index (``rows``: batch) is
        reordered here; the source-length tensors are selected once, when the decoder builds
        its first state (:func:`select_rows`). From then on the decoder reads its incremental
        state alone, so a search step moves nothing of source length that its attention does not
        keep (memory attention keeps K contexts: its steps are independent of |S|)."""
        rows = encoder_out.get("rows")
        rows = new_order if not rows else rows[0].index_select(0, new_order)
        return {**encoder_out, "rows": [rows]}

    def max_positions(self):
        return int(1e5)


def select_rows(encoder_out: Dict[str, List[Tensor]]) -> Dict[str, List[Tensor]]:
    """The encoder output with its pending reorder (``rows``, see
    :meth:`LSTMEncoder.reorder_encoder_out`) applied to every tensor."""
    rows = encoder_out.get("rows")
    if not rows:
        return encoder_out
    selected = {key: value for key, value in encoder_out.items() if key != "rows"}
    return {key: [t.index_select(0, rows[0]) for t in value] for key, value in selected.items()}


class AttentionLSTMDecoder(FairseqIncrementalDecoder):
    """Stacked LSTMCell decoder; the attention module is whatever ``--attention`` names."""

    def __init__(self, args, dictionary, embed_tokens, encoder_output_dim):
        super().__init__(dictionary)
        self.embed_tokens = embed_tokens
        embed_dim = embed_tokens.embedding_dim
        self.hidden_size = args.decoder_hidden_size
        self.num_layers = args.decoder_layers
        self.dropout_in = nn.Dropout(args.decoder_dropout_in)
        self.dropout_out = nn.Dropout(args.decoder_dropout_out)
        self.dropout_context = nn.Dropout(args.decoder_dropout_context)
        self.attention = build_attention(
            args.attention, args, query_dim=self.hidden_size, key_dim=encoder_output_dim, embed_dim=embed_dim
        )
        ctx_dim = self.attention.context_dim
        self.step_order = args.decoder_step
        self.out_embed_dim = args.decoder_out_embed_dim
        first_input = {
            "bahdanau": embed_dim + ctx_dim,  # [e; c_t]
            "conditional": ctx_dim,  # c_t; e went into the conditional cell
            "luong": embed_dim + self.out_embed_dim,  # [e; f_{t-1}]
        }[self.step_order]
        self.layers = nn.ModuleList(
            nn.LSTMCell(first_input if i == 0 else self.hidden_size, self.hidden_size)
            for i in range(self.num_layers)
        )
        # conditional: the first layer's state reads e before the attention (its query)
        self.conditional = (
            nn.LSTMCell(embed_dim, self.hidden_size) if self.step_order == "conditional" else None
        )
        if self.attention.mechanism.streaming:
            # h_0 = tanh(b): the encoder's final state has read the whole source
            self.init_proj = None
            self.init_hidden = nn.Parameter(torch.zeros(self.hidden_size * self.num_layers))
        else:
            self.init_proj = nn.Linear(encoder_output_dim, self.hidden_size * self.num_layers)
        self.readout = nn.Linear(self.hidden_size + ctx_dim + embed_dim, args.decoder_out_embed_dim)  # W_r
        if args.share_decoder_input_output_embed:
            self.output_projection = nn.Linear(embed_dim, len(dictionary), bias=False)
            self.output_projection.weight = embed_tokens.weight
        else:
            self.output_projection = nn.Linear(args.decoder_out_embed_dim, len(dictionary))  # W_o
        #: optional callable(extras) the task sets to collect per-step statistics in search
        self.step_observer = None

    # -- state ------------------------------------------------------------------------------

    def _initial_state(self, encoder_out):
        encoder_out = select_rows(encoder_out)
        states = encoder_out["encoder_out"][0]  # batch x src_len x enc_dim
        src_pad = encoder_out["encoder_padding_mask"][0]  # batch x src_len
        summary = encoder_out["encoder_summary"][0]  # batch x enc_dim
        if self.init_proj is None:  # streaming: h_0 depends on no source token
            h0 = torch.tanh(self.init_hidden).to(states.dtype).expand(states.size(0), -1)
        else:
            h0 = torch.tanh(self.init_proj(summary))
        h0 = h0.chunk(self.num_layers, dim=-1)  # layers x (batch x H)
        hidden = {f"h{i}": h for i, h in enumerate(h0)}
        hidden.update({f"c{i}": torch.zeros_like(h) for i, h in enumerate(h0)})
        if self.step_order == "luong":  # f_0 = 0: no readout before the first step
            hidden["feed"] = states.new_zeros(states.size(0), self.out_embed_dim)
        cache = self.attention.precompute(states, src_pad, summary)
        if "source_finished" in encoder_out:  # a streaming source still arriving (SimulEval agent)
            cache["finished"] = encoder_out["source_finished"][0]
        attn_state = self.attention.init_state(cache)
        return hidden, cache, attn_state

    @staticmethod
    def _pack(hidden, cache, attn_state):
        flat = {f"hidden.{k}": v for k, v in hidden.items()}
        flat.update({f"cache.{k}": v for k, v in cache.items() if v is not None})
        flat.update({f"state.{k}": v for k, v in attn_state.items()})
        return flat

    @staticmethod
    def _unpack(flat):
        parts = {"hidden": {}, "cache": {}, "state": {}}
        for key, value in flat.items():
            group, name = key.split(".", 1)
            parts[group][name] = value
        return parts["hidden"], parts["cache"], parts["state"]

    def reorder_incremental_state(self, incremental_state, new_order):
        flat = self.get_incremental_state(incremental_state, "cached_state")
        if flat is None:
            return
        reordered = {k: v.index_select(0, new_order) for k, v in flat.items() if v is not None}
        self.set_incremental_state(incremental_state, "cached_state", reordered)

    # -- forward ----------------------------------------------------------------------------

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        features, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        return self.output_layer(features), extra

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None, **kwargs):
        """prev_output_tokens: batch x tgt_len -> features: batch x tgt_len x out_embed_dim.

        Returns ``(features, extra)`` with ``extra["attn"] = [batch x tgt_len x src_len]`` (or
        ``[None]``) and ``extra["attention_extras"]``: each per-step statistic stacked over time
        (``batch x tgt_len`` or ``batch x tgt_len x src_len``).
        """
        flat = None
        if incremental_state is not None:
            flat = self.get_incremental_state(incremental_state, "cached_state")
        if flat is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            hidden, cache, attn_state = self._unpack(flat)
        else:
            hidden, cache, attn_state = self._initial_state(encoder_out)

        embeds = self.dropout_in(self.embed_tokens(prev_output_tokens))  # batch x tgt_len x E
        contexts, tops, weights, extras, feeds = [], [], [], [], []
        for t in range(embeds.size(1)):
            embed = embeds[:, t]
            if self.step_order == "luong":  # LSTM first, then attend with the new state
                top = self._layers(hidden, torch.cat([embed, hidden["feed"]], dim=-1))
                step = self.attention.step(hidden[f"h{self.num_layers - 1}"], cache, attn_state, embed)
                context = self.dropout_context(step.context)
                hidden["feed"] = self._readout(top, context, embed)  # f_t, fed to step t + 1
                feeds.append(hidden["feed"])
            else:
                query = hidden[f"h{self.num_layers - 1}"]  # bahdanau: h_{t-1}
                if self.step_order == "conditional":  # s = LSTM(e, h_{t-1}) of layer 1 is the query
                    hidden["h0"], hidden["c0"] = self.conditional(embed, (hidden["h0"], hidden["c0"]))
                    query = hidden["h0"]
                step = self.attention.step(query, cache, attn_state, embed)
                context = self.dropout_context(step.context)
                first = context if self.step_order == "conditional" else torch.cat([embed, context], dim=-1)
                tops.append(self._layers(hidden, first))  # read out after the loop, all steps at once
                contexts.append(context)
            attn_state = step.state
            weights.append(step.weights)
            extras.append(step.extras)
            if self.step_observer is not None and not self.training:
                self.step_observer(step.extras)

        if incremental_state is not None:
            self.set_incremental_state(
                incremental_state, "cached_state", self._pack(hidden, cache, attn_state)
            )

        if feeds:  # luong: the readout ran inside the loop
            features = torch.stack(feeds, dim=1)
        else:  # batch x tgt_len x out_embed_dim
            features = self._readout(torch.stack(tops, dim=1), torch.stack(contexts, dim=1), embeds)
        attn = None if weights[0] is None else torch.stack(weights, dim=1)  # batch x tgt x src
        stacked = {key: torch.stack([e[key] for e in extras], dim=1) for key in extras[0]}
        return features, {"attn": [attn], "attention_extras": stacked}

    def _layers(self, hidden, layer_input):
        """One step of the LSTM stack from ``hidden`` (updated in place); returns the top
        layer's output, dropped."""
        for i, cell in enumerate(self.layers):
            h, c = cell(layer_input, (hidden[f"h{i}"], hidden[f"c{i}"]))
            hidden[f"h{i}"], hidden[f"c{i}"] = h, c
            layer_input = self.dropout_out(h)
        return layer_input

    def _readout(self, top, context, embed):
        """f = dropout(tanh(W_r [h_t; c_t; e])), for one step or for all steps at once."""
        return self.dropout_out(torch.tanh(self.readout(torch.cat([top, context, embed], dim=-1))))

    def output_layer(self, features, **kwargs):
        return self.output_projection(features)

    def max_positions(self):
        return int(1e5)


# Flags read by some mechanisms only: dest -> (the --attention values that read it, default).
# A value other than the default on another mechanism is refused (refuse_ignored_flags).
_MONOTONIC = ("monotonic", "mocha", "milk")
MECHANISM_FLAGS = {
    "attention_score": (("additive", "local", "flexible", "waitk", "mocha", "milk"), "additive"),
    "local_window_d": (("local",), 10),
    "flex_sigma": (("flexible",), 1.5),
    "flex_strength_bias": (("flexible",), -2.0),
    "memory_size": (("memory",), 32),
    "memory_position_encoding": (("memory",), False),
    "memory_encoder_score": (("memory",), "softmax"),
    "memory_decoder_score": (("memory",), "softmax"),
    "memory_normalize": (("memory",), "time"),
    "monotonic_noise_var": (_MONOTONIC, 4.0),
    "monotonic_energy_bias_init": (_MONOTONIC, -4.0),
    "monotonic_energy": (_MONOTONIC, "normalized"),
    "monotonic_energy_scale_init": (_MONOTONIC, None),  # None: each form's own initialisation
    "mocha_chunk_size": (("mocha",), 8),
    "waitk_lagging": (("waitk",), 3),
    "waitk_rate": (("waitk",), 1.0),
}
# The same for the temperature's flags, keyed by --attention-temperature.
TEMPERATURE_FLAGS = {
    "sact_lambda": (("sact",), 4.0),
    "sact_form": (("sact",), "linear"),
    "sact_dropout": (("sact",), 0.0),
    "sact_embedding": (("sact",), False),
    "fixed_temperature": (("fixed",), 1.0),
}


def base_architecture(args):
    """Defaults shared by every arch; presets in :mod:`.architectures` call this last."""
    args.attention = getattr(args, "attention", None) or "additive"
    args.param_init = _or(getattr(args, "param_init", None), 0.1)
    args.dropout = getattr(args, "dropout", None)
    if args.dropout is None:
        args.dropout = 0.1
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", None) or 256
    args.encoder_embed_path = getattr(args, "encoder_embed_path", None)
    args.encoder_hidden_size = getattr(args, "encoder_hidden_size", None) or args.encoder_embed_dim
    args.encoder_layers = getattr(args, "encoder_layers", None) or 1
    if getattr(args, "encoder_bidirectional", None) is None:
        args.encoder_bidirectional = True
    args.encoder_dropout_in = _or(getattr(args, "encoder_dropout_in", None), args.dropout)
    args.encoder_dropout_out = _or(getattr(args, "encoder_dropout_out", None), args.dropout)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", None) or 256
    args.decoder_embed_path = getattr(args, "decoder_embed_path", None)
    args.decoder_hidden_size = getattr(args, "decoder_hidden_size", None) or args.decoder_embed_dim
    args.decoder_layers = getattr(args, "decoder_layers", None) or 1
    args.decoder_out_embed_dim = getattr(args, "decoder_out_embed_dim", None) or 256
    args.decoder_dropout_in = _or(getattr(args, "decoder_dropout_in", None), args.dropout)
    args.decoder_dropout_out = _or(getattr(args, "decoder_dropout_out", None), args.dropout)
    args.decoder_dropout_context = _or(getattr(args, "decoder_dropout_context", None), 0.0)
    args.decoder_step = getattr(args, "decoder_step", None) or "bahdanau"
    args.share_decoder_input_output_embed = getattr(args, "share_decoder_input_output_embed", False)
    args.attention_dim = getattr(args, "attention_dim", None)
    for dest, (_, default) in MECHANISM_FLAGS.items():
        setattr(args, dest, _or(getattr(args, dest, None), default))
    args.memory_position_encoding = bool(args.memory_position_encoding)
    args.attention_temperature = getattr(args, "attention_temperature", None) or "none"
    for dest, (_, default) in TEMPERATURE_FLAGS.items():
        setattr(args, dest, _or(getattr(args, dest, None), default))
    args.sact_embedding = bool(args.sact_embedding)


def _or(value, default):
    return default if value is None else value
