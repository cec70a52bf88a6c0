"""Shared by the benchmark scripts: fresh models built as fairseq-train builds them."""

import argparse

import torch
from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY

import fairseq_vision_attn  # noqa: F401  (registers the archs)
from fairseq_vision_attn.models.lstm_attention import VisionAttnLSTMModel


def fresh_model(arch, vocab_size, layers=1, dim=256, **flags):
    """``arch`` at ``dim`` units and ``layers`` layers, one shared ``vocab_size`` dictionary, eval mode.

    Generation settings are those of fairseq-generate without --print-alignment (memory
    attention then computes no alignment).
    """
    torch.manual_seed(0)
    d = Dictionary()
    for i in range(vocab_size):
        d.add_symbol(f"w{i}")
    args = argparse.Namespace(
        arch=arch,
        encoder_embed_dim=dim,
        encoder_hidden_size=dim,
        encoder_layers=layers,
        decoder_embed_dim=dim,
        decoder_hidden_size=dim,
        decoder_layers=layers,
        decoder_out_embed_dim=dim,
        dropout=0.0,
        **flags,
    )
    ARCH_CONFIG_REGISTRY[arch](args)
    model = VisionAttnLSTMModel.build_model(
        args, argparse.Namespace(source_dictionary=d, target_dictionary=d)
    )
    attention = getattr(model.decoder.attention, "mechanism", model.decoder.attention)
    if hasattr(attention, "expose_alignment"):
        attention.expose_alignment = False
    return model.eval()
