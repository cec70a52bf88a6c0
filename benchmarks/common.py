"""Shared by the benchmark scripts: fresh models built as fairseq-train builds them, and the
timing protocol every script follows: interleaved repeats in one process (:func:`interleaved`),
median with min and max (:func:`spread`), ratios of medians, and the machine's load recorded
with a warning when it exceeds the cores (:func:`machine_load_note`)."""

import argparse
import os
import statistics
import sys
import time

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


def machine_load_note():
    """One line on the machine's load (1-minute average against its cores), warning on stderr
    when other work competed with the benchmark: its ratios are then less trustworthy."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    note = f"# machine: {cores} cores, load average {load:.2f} at the end of the run"
    if load > cores:
        print(f"warning: load {load:.2f} exceeds the {cores} cores: timings are contended", file=sys.stderr)
    return note


def interleaved(functions, repeats):
    """Time each function of ``{name: fn}`` once per repeat, alternating names within a repeat so
    that machine load hits all alike (one warm-up call each first). -> ``{name: [seconds]}``."""
    for fn in functions.values():
        fn()
    times = {name: [] for name in functions}
    for _ in range(repeats):
        for name, fn in functions.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def spread(values, scale=1.0, digits=3):
    """'median [min-max]' of a list of timings, each multiplied by ``scale``."""
    m, lo, hi = (scale * f(values) for f in (statistics.median, min, max))
    return f"{m:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]"
