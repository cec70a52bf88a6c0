"""Flexible attention (Shu & Nakayama 2017): window formula, threshold, regulariser."""

import argparse
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fairseq_vision_attn.attention import build_attention
from fairseq_vision_attn.criterions.flexible_attention_cross_entropy import (
    FlexibleAttentionCrossEntropyCriterion,
    gt_regularizer,
)

from .conftest import build_model, random_batch


def make_attention(sigma=1.5):
    torch.manual_seed(0)
    args = argparse.Namespace(attention_dim=6, flex_sigma=sigma)
    return build_attention("flexible", args, query_dim=4, key_dim=3, embed_dim=2).double().eval()


def inputs(lengths, seed=1):
    g = torch.Generator().manual_seed(seed)
    n, s = len(lengths), max(lengths)
    keys = torch.randn(n, s, 3, generator=g, dtype=torch.float64)
    pad = torch.arange(s).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)
    query = torch.randn(n, 4, generator=g, dtype=torch.float64)
    embed = torch.randn(n, 2, generator=g, dtype=torch.float64)
    return keys, pad, query, embed


@settings(max_examples=200, deadline=None)
@given(
    g=st.floats(1e-4, 1.0),
    focus=st.floats(0.5, 30.0),
    length=st.integers(1, 30),
    tau=st.floats(1e-3, 50.0),
    sigma=st.floats(0.2, 5.0),
)
def test_window_is_exactly_the_positions_below_threshold(g, focus, length, tau, sigma):
    attn = make_attention(sigma)
    start, width = attn.window(torch.tensor([g]), torch.tensor([focus]), torch.tensor([float(length)]), tau)
    chosen = list(range(int(start), int(start) + int(width)))
    penalties = {s: g * (s - focus) ** 2 / (2 * sigma**2) for s in range(1, length + 1)}
    below = [s for s, p in penalties.items() if p < tau]
    # positions within float rounding of the boundary may go either way
    borderline = {s for s, p in penalties.items() if abs(p - tau) < 1e-6 * max(1.0, tau)}
    if below:
        assert set(chosen) ^ set(below) <= borderline
    else:  # nothing below tau: the position nearest the previous focus, alone
        assert chosen == [min(max(round(focus), 1), length)] or set(chosen) <= borderline


def test_infinite_threshold_is_the_untruncated_model_exactly():
    model = build_model("lstm_flexible", dropout=0.0)
    src, lengths, prev = random_batch(model, [7, 3, 5])
    model.train()  # training never truncates
    reference, _ = model(src, lengths, prev)
    model.eval()
    model.decoder.attention.span_threshold = math.inf
    out, extra = model(src, lengths, prev)
    assert torch.equal(out, reference)
    expected = torch.tensor([7.0, 3.0, 5.0]).unsqueeze(1).expand(-1, prev.size(1))
    assert torch.equal(extra["attention_extras"]["window_size"], expected)


def test_huge_finite_threshold_gathers_everything_and_agrees():
    model = build_model("lstm_flexible")
    src, lengths, prev = random_batch(model, [7, 3, 5])
    full, _ = model(src, lengths, prev)
    model.decoder.attention.span_threshold = 1e12
    windowed, extra = model(src, lengths, prev)
    torch.testing.assert_close(windowed, full)
    assert extra["attention_extras"]["window_size"][:, 0].tolist() == [7.0, 3.0, 5.0]


def test_tiny_threshold_scores_one_position():
    model = build_model("lstm_flexible")
    src, lengths, prev = random_batch(model, [9, 4, 6])
    model.decoder.attention.span_threshold = 1e-9
    _, extra = model(src, lengths, prev)
    sizes = extra["attention_extras"]["window_size"]
    assert sizes[:, 0].tolist() == [9.0, 4.0, 6.0]  # step 1 has no previous focus
    assert torch.all(sizes[:, 1:] == 1)
    assert torch.all((extra["attn"][0][:, 1:] > 0).sum(-1) == 1)


def test_threshold_really_skips_the_score_computation():
    """The score function sees only the gathered window's keys, never the whole source."""
    attn = make_attention()
    keys, pad, query, embed = inputs([40, 40])
    cache = attn.precompute(keys, pad)
    state = {"focus": torch.tensor([10.0, 30.0], dtype=torch.float64), "has_focus": torch.ones(2).double()}
    seen = []
    original = attn.scorer.scores
    attn.scorer.scores = lambda q, k: seen.append(k.shape[1]) or original(q, k)
    attn.span_threshold = 1.0
    out = attn.step(query, cache, state, embed)
    width = int(out.extras["window_size"].max())
    assert seen == [width] and width < 40
    # inside the window: softmax of (score - penalty) over the window only (Eq. 7)
    g = attn.strength(query, embed)
    for b in range(2):
        nonzero = out.weights[b].nonzero().flatten() + 1
        pos = nonzero.double()
        scores = original(query[b : b + 1], cache["keys"][b : b + 1, nonzero - 1])[0]
        expected = torch.softmax(scores - g[b] * (pos - state["focus"][b]) ** 2 / (2 * 1.5**2), 0)
        torch.testing.assert_close(out.weights[b, nonzero - 1], expected)
        assert torch.all(g[b] * (pos - state["focus"][b]) ** 2 / (2 * 1.5**2) < 1.0)


def test_focus_and_strength_under_padding():
    attn = make_attention()
    keys, pad, query, embed = inputs([6, 2, 4])
    cache = attn.precompute(keys, pad)
    state = attn.init_state(cache)
    first = attn.step(query, cache, state, embed)
    assert torch.all(first.extras["g"] == 0)  # no previous focus: no penalty at step 1
    global_weights = torch.softmax(attn.scorer.scores(query, cache["keys"]).masked_fill(pad, -1e9), -1)
    torch.testing.assert_close(first.weights, global_weights)  # step 1 = global attention
    state = first.state
    assert state["has_focus"].tolist() == [1.0, 1.0, 1.0]
    out = attn.step(query, cache, state, embed)
    assert out.extras["g"].shape == (3,) and torch.all((out.extras["g"] > 0) & (out.extras["g"] < 1))
    assert torch.all(out.weights[pad] == 0)
    positions = torch.arange(1, 7, dtype=torch.float64)
    torch.testing.assert_close(out.state["focus"], (out.weights * positions).sum(-1))  # Eq. 4
    assert torch.all(out.state["focus"] <= torch.tensor([6.0, 2.0, 4.0]))


class _Task:
    def __init__(self, model):
        self.target_dictionary = model.decoder.dictionary


def _sample(model):
    src, lengths, prev = random_batch(model, [7, 3, 5], tgt_len=5, seed=4)
    target = torch.cat([prev[:, 1:], torch.full((3, 1), model.decoder.dictionary.eos())], dim=1)
    target[1, 3:] = model.decoder.dictionary.pad()
    return {
        "net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev},
        "target": target,
        "ntokens": int(target.ne(model.decoder.dictionary.pad()).sum()),
    }


def _mean_g_after_one_step(beta):
    model = build_model("lstm_flexible", seed=2).train()
    criterion = FlexibleAttentionCrossEntropyCriterion(_Task(model), False, 0.0, gt_regularizer_weight=beta)
    sample = _sample(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loss, _, _ = criterion(model, sample)
    loss.backward()
    optimizer.step()
    _, _, log = criterion(model, sample)
    return float(log["g_sum"]) / sample["ntokens"]


def test_raising_beta_raises_mean_strength():
    assert _mean_g_after_one_step(5.0) > _mean_g_after_one_step(0.0) + 1e-3


def test_beta_zero_is_plain_cross_entropy_and_regulariser_is_per_sentence_mean():
    model = build_model("lstm_flexible", seed=2)
    sample = _sample(model)
    plain = FlexibleAttentionCrossEntropyCriterion(_Task(model), False, 0.0)(model, sample)[0]
    beta = FlexibleAttentionCrossEntropyCriterion(_Task(model), False, 0.0, gt_regularizer_weight=0.1)
    with_reg = beta(model, sample)[0]
    _, extra = model(**sample["net_input"])
    mask = sample["target"].ne(model.decoder.dictionary.pad())
    g = extra["attention_extras"]["g"]
    by_hand = sum(g[i][mask[i]].mean() for i in range(3))
    torch.testing.assert_close(gt_regularizer(g, mask), by_hand)
    torch.testing.assert_close(with_reg, plain - 0.1 * by_hand)


def test_negative_beta_is_refused():
    model = build_model("lstm_flexible")
    with pytest.raises(ValueError, match="--gt-regularizer-weight must be >= 0"):
        FlexibleAttentionCrossEntropyCriterion(_Task(model), False, 0.0, gt_regularizer_weight=-0.1)
