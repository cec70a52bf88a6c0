"""The simultaneous generator (fairseq_vision_attn/simultaneous.py): no look-ahead, batching,
valid delays, wait-k's schedule, and latency numbers equal to the metrics module's."""

import pytest
import torch

from fairseq_vision_attn.attention.waitk import waitk_delays
from fairseq_vision_attn.latency import latency_scores
from fairseq_vision_attn.simultaneous import SimultaneousGenerator

from .conftest import build_model, random_batch

STREAMING = ["lstm_monotonic", "lstm_mocha", "lstm_milk", "lstm_waitk"]


def streaming_model(arch, seed=0):
    """An untrained model whose head stops at varied positions (energies of both signs)."""
    model = build_model(arch, seed=seed, monotonic_energy_bias_init=0.0, mocha_chunk_size=2, waitk_lagging=2)
    energy = getattr(model.decoder.attention, "energy", None)
    if energy is not None:
        with torch.no_grad():
            energy.g.fill_(4.0)
    return model


def decode(model, src, lengths, max_len_b=12):
    generator = SimultaneousGenerator([model], model.decoder.dictionary, max_len_a=0, max_len_b=max_len_b)
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.as_tensor(lengths)}}
    return [h[0] for h in generator.generate([model], sample)]


@pytest.mark.parametrize("arch", STREAMING)
def test_tokens_written_before_reading_j_do_not_depend_on_the_source_after_j(arch):
    checked = 0
    for seed in range(4):
        model = streaming_model(arch, seed)
        src, lengths, _ = random_batch(model, [10], seed=seed)
        (hypo,) = decode(model, src, lengths)
        delays = hypo["delays"]
        g = torch.Generator().manual_seed(seed)
        for j in range(1, 10):
            written = sum(d <= j for d in delays)
            if written == 0:
                continue
            tail = torch.randint(4, len(model.encoder.dictionary), (1, 3 + j % 4), generator=g)
            other = torch.cat([src[:, :j], tail, src[:, -1:]], dim=1)
            (other_hypo,) = decode(model, other, [other.size(1)])
            assert other_hypo["tokens"][:written].tolist() == hypo["tokens"][:written].tolist(), (j, delays)
            assert other_hypo["delays"][:written] == delays[:written]
            checked += 1
    assert checked >= 5, "the policy never wrote before the end of the source: nothing was tested"


@pytest.mark.parametrize("arch", STREAMING)
def test_batched_decoding_equals_one_sentence_at_a_time(arch):
    model = streaming_model(arch, seed=1)
    lengths = [9, 3, 6, 1, 12]
    src, lengths_t, _ = random_batch(model, lengths, seed=2)
    batched = decode(model, src, lengths_t)
    for i, n in enumerate(lengths):
        (alone,) = decode(model, src[i : i + 1, -n:], [n])
        assert alone["tokens"].tolist() == batched[i]["tokens"].tolist()
        assert alone["delays"] == batched[i]["delays"]
        torch.testing.assert_close(
            alone["positional_scores"], batched[i]["positional_scores"], rtol=1e-5, atol=1e-5
        )


@pytest.mark.parametrize("arch", STREAMING)
def test_delays_are_valid_and_metrics_match_the_metrics_module(arch):
    model = streaming_model(arch, seed=2)
    lengths = [8, 4, 11, 2]
    src, lengths_t, _ = random_batch(model, lengths, seed=3)
    for n, hypo in zip(lengths, decode(model, src, lengths_t)):
        d = hypo["delays"]
        assert len(d) == len(hypo["tokens"]) and hypo["tokens"][-1].item() == model.decoder.dictionary.eos()
        assert all(1 <= x <= n for x in d) and all(a <= b for a, b in zip(d, d[1:]))
        assert hypo["latency"] == latency_scores(d, n)
        if arch == "lstm_waitk":
            expected = waitk_delays(torch.arange(1, len(d) + 1), torch.tensor(n), 2, 1.0)
            assert d == [float(x) for x in expected]


def test_waitk_lagging_can_be_changed_at_test_time():
    model = streaming_model("lstm_waitk")
    src, lengths, _ = random_batch(model, [12], seed=4)
    for k in (1, 4, 20):
        model.decoder.attention.lagging = k
        (hypo,) = decode(model, src, lengths)
        expected = waitk_delays(torch.arange(1, len(hypo["delays"]) + 1), torch.tensor(12), k, 1.0)
        assert hypo["delays"] == [float(x) for x in expected]


def test_length_limit_forces_eos():
    model = streaming_model("lstm_milk")
    src, lengths, _ = random_batch(model, [6, 3], seed=5)
    for hypo in decode(model, src, lengths, max_len_b=3):
        assert len(hypo["tokens"]) <= 3 and hypo["tokens"][-1].item() == model.decoder.dictionary.eos()
