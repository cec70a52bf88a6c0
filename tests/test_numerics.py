"""Numerics of every mechanism: no NaN or inf, forward or backward, for sources of 1 and 1000
tokens, in float32 and under bfloat16 autocast on CPU, and for the monotonic head with
energies of +-50 (issue 8, part 3)."""

import pytest
import torch

from .conftest import build_model, our_archs, random_batch

ARCHS = our_archs()
HEADED = ["lstm_monotonic", "lstm_mocha", "lstm_milk"]


def run(model, lengths, dtype):
    src, src_lengths, prev = random_batch(model, lengths, tgt_len=5, seed=1)
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is torch.bfloat16):
        logits, extra = model(src, src_lengths, prev)
        loss = logits.float().log_softmax(-1).mean()
        for value in extra["attention_extras"].values():  # the latency loss reads these
            loss = loss + value.float().mean()
    loss.backward()
    assert torch.isfinite(logits.float()).all(), "non-finite output"
    for name, value in extra["attention_extras"].items():
        assert torch.isfinite(value.float()).all(), f"non-finite extras[{name!r}]"
    for name, param in model.named_parameters():
        if param.grad is not None:
            assert torch.isfinite(param.grad).all(), f"non-finite gradient of {name}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bf16-autocast"])
@pytest.mark.parametrize("arch", ARCHS)
def test_one_and_a_thousand_source_tokens(arch, dtype):
    model = build_model(arch).train()
    run(model, [1, 1000], dtype)  # one batch: a 1-token source beside a 1000-token one
    run(model, [1], dtype)
    model.eval()
    with torch.no_grad():
        src, src_lengths, prev = random_batch(model, [1000, 1], tgt_len=3, seed=2)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is torch.bfloat16):
            logits, _ = model(src, src_lengths, prev)
        assert torch.isfinite(logits.float()).all()


@pytest.mark.parametrize("energy", [50.0, -50.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bf16-autocast"])
@pytest.mark.parametrize("arch", HEADED)
def test_monotonic_head_with_saturated_energies(arch, energy, dtype):
    """r = +-50: p is 1 - 2e-22 or 2e-22 at every position, in training and at test time."""
    model = build_model(arch, monotonic_noise_var=0.0).train()
    with torch.no_grad():
        model.decoder.attention.energy.r.fill_(energy)
    run(model, [1000, 7, 1], dtype)
    model.eval()
    with torch.no_grad():
        _, extra = model(*random_batch(model, [300, 4], tgt_len=4, seed=3))
    delays = extra["attention_extras"]["delay"]
    expected = torch.tensor([[1.0] * 4, [1.0] * 4]) if energy > 0 else torch.tensor([[300.0] * 4, [4.0] * 4])
    assert torch.equal(delays.float(), expected)


def _decode_stats(model, src, lengths, prev, bf16):
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        _, extra = model(src, lengths, prev)
    return extra["attn"][0], extra["attention_extras"]


@pytest.mark.parametrize("length", [600, 1000])
@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_autocast_attends_where_float32_does_on_long_sources(arch, length):
    """bf16 holds integers exactly only up to 256: positions, penalties, foci and delays must be
    computed in float32 (issue 16), so bf16 autocast moves no weight and no focus."""
    model = build_model(arch, monotonic_noise_var=0.0)
    src, lengths, prev = random_batch(model, [length], tgt_len=5, seed=4)
    weights32, extras32 = _decode_stats(model, src, lengths, prev, bf16=False)
    weights16, extras16 = _decode_stats(model, src, lengths, prev, bf16=True)
    if weights32 is not None:
        assert (weights16.float() - weights32).abs().max() < 0.02
    for key in ("focus", "delay", "window_start"):
        if key in extras32:
            assert extras16[key].dtype in (torch.float32, torch.float64), key
            assert (extras16[key] - extras32[key]).abs().max() < 0.05, key
