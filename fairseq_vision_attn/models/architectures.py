"""Registered architectures: presets of the one model family that pick the attention.

Each preset sets a few ``getattr`` defaults and then calls :func:`base_architecture`, as
fairseq's ``lstm.py`` does. Later mechanisms add their presets here.
"""

from fairseq.models import register_model_architecture

from .lstm_attention import MODEL_NAME, base_architecture


@register_model_architecture(MODEL_NAME, "lstm_noattn")
def lstm_noattn(args):
    """Britz et al.'s "No Att": the decoder sees only the encoder's final state."""
    args.attention = getattr(args, "attention", None) or "none"
    base_architecture(args)


@register_model_architecture(MODEL_NAME, "lstm_global")
def lstm_global(args):
    """Additive (Bahdanau) attention over every source position."""
    args.attention = getattr(args, "attention", None) or "additive"
    base_architecture(args)


@register_model_architecture(MODEL_NAME, "lstm_local")
def lstm_local(args):
    """Luong local-p attention, window 2D+1 (``--local-window-d``, default 10)."""
    args.attention = getattr(args, "attention", None) or "local"
    base_architecture(args)


@register_model_architecture(MODEL_NAME, "lstm_flexible")
def lstm_flexible(args):
    """Shu & Nakayama's flexible attention (``--flex-sigma``, default 1.5)."""
    args.attention = getattr(args, "attention", None) or "flexible"
    base_architecture(args)


@register_model_architecture(MODEL_NAME, "lstm_memory")
def lstm_memory(args):
    """Britz et al.'s fixed-size memory attention (``--memory-size K``, default 32)."""
    args.attention = getattr(args, "attention", None) or "memory"
    base_architecture(args)


def _streaming(args, attention):
    """Streaming presets: the attention, and a unidirectional encoder (h_j sees x_1..x_j)."""
    args.attention = getattr(args, "attention", None) or attention
    if getattr(args, "encoder_bidirectional", None) is None:
        args.encoder_bidirectional = False
    base_architecture(args)


@register_model_architecture(MODEL_NAME, "lstm_monotonic")
def lstm_monotonic(args):
    """Raffel et al.'s hard monotonic attention: the context is the state at the head."""
    _streaming(args, "monotonic")


@register_model_architecture(MODEL_NAME, "lstm_mocha")
def lstm_mocha(args):
    """Chiu & Raffel's MoChA (``--mocha-chunk-size W``, default 8)."""
    _streaming(args, "mocha")


@register_model_architecture(MODEL_NAME, "lstm_milk")
def lstm_milk(args):
    """Arivazhagan et al.'s monotonic infinite lookback attention; train with
    ``--criterion latency_augmented_cross_entropy --latency-weight LAMBDA``."""
    _streaming(args, "milk")


@register_model_architecture(MODEL_NAME, "lstm_waitk")
def lstm_waitk(args):
    """Ma et al.'s wait-k (``--waitk-lagging K``, default 3; ``--waitk-rate R``, default 1)."""
    _streaming(args, "waitk")


@register_model_architecture(MODEL_NAME, "lstm_sact")
def lstm_sact(args):
    """Lin et al.'s self-adaptive temperature on additive attention (``--sact-lambda``, default 4).

    The temperature composes with other mechanisms too: ``--arch lstm_flexible
    --attention-temperature sact`` (see :mod:`..attention.temperature`).
    """
    args.attention = getattr(args, "attention", None) or "additive"
    args.attention_temperature = getattr(args, "attention_temperature", None) or "sact"
    base_architecture(args)


@register_model_architecture(MODEL_NAME, "lstm_global_shu")
def lstm_global_shu(args):
    """Shu & Nakayama's sizes: 1000-d embeddings and LSTMs, a 600-unit layer before the softmax."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", None) or 1000
    args.encoder_hidden_size = getattr(args, "encoder_hidden_size", None) or 1000
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", None) or 1000
    args.decoder_hidden_size = getattr(args, "decoder_hidden_size", None) or 1000
    args.decoder_out_embed_dim = getattr(args, "decoder_out_embed_dim", None) or 600
    lstm_global(args)
