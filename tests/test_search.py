"""fairseq's beam search: beam 1 equals a greedy loop written by hand, for every arch; what a
search step costs."""

import json

import pytest
import torch
from fairseq.dataclass.configs import GenerationConfig
from fairseq.sequence_generator import SequenceGenerator
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from fairseq_vision_attn.tasks.translation_vision_attn import (
    TranslationVisionAttnConfig,
    TranslationVisionAttnTask,
)

from .conftest import build_model, our_archs, random_batch

MAX_LEN = 9


@torch.no_grad()
def greedy(model, src, length):
    """Greedy decoding of one sentence: argmax until EOS, EOS forced at MAX_LEN and banned at
    the first step (fairseq's min_len = 1)."""
    eos = model.decoder.dictionary.eos()
    pad = model.decoder.dictionary.pad()
    encoder_out = model.encoder(src, torch.tensor([length]))
    tokens = torch.tensor([[eos]])
    state, total = {}, 0.0
    for step in range(MAX_LEN + 1):
        logits, _ = model.decoder(tokens, encoder_out=encoder_out, incremental_state=state)
        lprobs = torch.log_softmax(logits[0, -1].float(), dim=-1)
        lprobs[pad] = float("-inf")
        if step == 0:
            lprobs[eos] = float("-inf")
        best = eos if step == MAX_LEN else int(lprobs.argmax())
        total += float(lprobs[best])
        tokens = torch.cat([tokens, torch.tensor([[best]])], dim=1)
        if best == eos:
            break
    return tokens[0, 1:], total


@pytest.mark.parametrize("arch", our_archs())
def test_beam_one_equals_greedy(arch):
    model = build_model(arch, seed=1)
    lengths = [6, 2, 4]
    src, lengths_t, _ = random_batch(model, lengths, seed=5)
    generator = SequenceGenerator(
        [model], model.decoder.dictionary, beam_size=1, max_len_a=0, max_len_b=MAX_LEN
    )
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths_t}}
    hypos = generator.generate([model], sample)
    for i, length in enumerate(lengths):
        expected, score = greedy(model, src[i : i + 1, -length:], length)
        assert torch.equal(hypos[i][0]["tokens"], expected)
        assert hypos[i][0]["score"].item() == pytest.approx(score / len(expected), abs=1e-4)


class _BytesWritten(TorchDispatchMode):
    """Counts the bytes of every tensor an aten op writes (views, which move nothing, excluded)."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if torch.is_tensor(t)
        }
        for t in tree_flatten(out)[0]:
            if torch.is_tensor(t) and t.untyped_storage().data_ptr() not in inputs:
                self.bytes += t.numel() * t.element_size()
        return out


@torch.no_grad()
def _bytes_of_search(model, src_len, steps, beam=10):
    """Bytes written by fairseq's beam search over one sentence, exactly ``steps`` target tokens."""
    g = torch.Generator().manual_seed(0)
    d = model.encoder.dictionary
    src = torch.randint(d.nspecial, len(d), (1, src_len), generator=g)
    src[0, -1] = d.eos()
    generator = SequenceGenerator(
        [model], model.decoder.dictionary, beam_size=beam, min_len=steps, max_len_a=0, max_len_b=steps
    )
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([src_len])}}
    with _BytesWritten() as counter:
        generator.generate([model], sample)
    return counter.bytes


def _bytes_per_step(model, src_len):
    return (_bytes_of_search(model, src_len, 12) - _bytes_of_search(model, src_len, 4)) / 8


def test_memory_attention_search_step_is_independent_of_source_length():
    """Britz et al.: after encoding, a decoder step reads the K contexts only. Measured on the
    whole beam search (fairseq reorders the encoder output and the incremental state at every
    step), not on the attention alone: the bytes an extra step writes at |S| = 500 are those it
    writes at |S| = 50. Global attention, whose step scores every position, is the control."""
    memory = build_model("lstm_memory", memory_size=4)
    memory.decoder.attention.expose_alignment = False  # as fairseq-generate without --print-alignment
    assert _bytes_per_step(memory, 500) == _bytes_per_step(memory, 50)
    glob = build_model("lstm_global")
    assert _bytes_per_step(glob, 500) > 5 * _bytes_per_step(glob, 50)


def _count_teacher_forced_passes(model):
    """Wrap the decoder: returns the list that each full (non-incremental) forward appends to."""
    passes, original = [], model.decoder.forward

    def forward(prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        if incremental_state is None:
            passes.append(tuple(prev_output_tokens.shape))
        return original(
            prev_output_tokens, encoder_out=encoder_out, incremental_state=incremental_state, **kwargs
        )

    model.decoder.forward = forward
    return passes


@pytest.mark.parametrize("arch", ["lstm_flexible", "lstm_milk"])
def test_per_token_statistics_cost_a_second_pass_only_when_asked(arch, tmp_path):
    """fairseq-generate decodes once: the per-token lists of --stats-output come from the search
    (simultaneous decoding) or from one teacher-forced pass, and only when --stats-output asks."""
    model = build_model(arch, seed=2)
    src, lengths, _ = random_batch(model, [6, 3], seed=2)
    sample = {"id": torch.tensor([0, 1]), "net_input": {"src_tokens": src, "src_lengths": lengths}}
    passes = _count_teacher_forced_passes(model)
    for stats_output in (None, tmp_path / "stats.jsonl"):
        passes.clear()
        cfg = TranslationVisionAttnConfig(stats_output=None if stats_output is None else str(stats_output))
        task = TranslationVisionAttnTask(cfg, model.encoder.dictionary, model.decoder.dictionary)
        task._summary_registered = True  # no summary line at interpreter exit
        generator = task.build_generator([model], GenerationConfig(beam=3, max_len_b=9))
        task.inference_step(generator, [model], sample)
        assert task.search_stats.counts["window_size"] > 0  # the search's own statistics
        streaming = arch == "lstm_milk"
        assert len(passes) == (1 if stats_output is not None and not streaming else 0)
    task.stats_handle.close()
    rows = [json.loads(line) for line in stats_output.read_text().splitlines()]
    assert [r["id"] for r in rows] == [0, 1]
    assert all(len(r["window_sizes"]) == r["hypo_len"] for r in rows)
