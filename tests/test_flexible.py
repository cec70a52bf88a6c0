"""Flexible attention (Shu & Nakayama 2017): window formula, threshold, regulariser."""

import argparse
import math

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator
from hypothesis import given, settings
from hypothesis import strategies as st

from fairseq_vision_attn.attention import build_attention
from fairseq_vision_attn.criterions.flexible_attention_cross_entropy import (
    FlexibleAttentionCrossEntropyCriterion,
    gt_regularizer,
)
from fairseq_vision_attn.stats import SearchStats

from .conftest import build_model, random_batch


def make_attention(sigma=1.5, score="additive"):
    torch.manual_seed(0)
    args = argparse.Namespace(attention_dim=6, flex_sigma=sigma, attention_score=score)
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


@torch.no_grad()
def naive_flexible(attn, keys, lengths, queries, embeds, tau=math.inf, temperatures=None):
    """Shu & Nakayama Eqs. 3-8 per sentence and step, from the module's parameter tensors.

    Step 1 has no previous focus (g = 0, the whole sentence); later steps score only the positions
    with penalty < tau and give the others weight 0. Returns per step (weights, focus, g, width).
    """
    sc = attn.scorer
    if hasattr(sc, "v"):  # Eq. 3: v_a^T tanh(W_a [h_{t-1}; h_s] + b_a), W_a = [W_q U_a]
        w_a = torch.cat([sc.query_proj.weight, sc.key_proj.weight], dim=1)

        def content(query, key):
            return sc.v.weight[0] @ torch.tanh(w_a @ torch.cat([query, key]) + sc.key_proj.bias)

    else:  # --attention-score bilinear: h_s^T W_b h_{t-1}

        def content(query, key):
            return key @ sc.key_proj.weight.T @ query

    w_g, v_g, b_g = attn.strength_proj.weight, attn.strength_v.weight[0], attn.strength_v.bias[0]
    out = []
    focus = [1.0] * len(lengths)
    for t, (query, embed) in enumerate(zip(queries, embeds)):
        rows = []
        for b, n in enumerate(lengths):
            g = torch.sigmoid(v_g @ torch.tanh(w_g @ torch.cat([query[b], embed[b]])) + b_g)  # Eq. 8
            g = g * 0 if t == 0 else g
            chosen = []
            for s in range(1, n + 1):
                penalty = g * (s - focus[b]) ** 2 / (2 * attn.sigma**2)  # Eqs. 5-6
                if t == 0 or penalty < tau:
                    score = content(query[b], keys[b, s - 1])
                    if temperatures is not None:
                        score = score / temperatures[t][b]
                    chosen.append((s, score - penalty))
            if not chosen:  # nothing below tau: the position nearest the previous focus
                s = min(max(round(focus[b]), 1), n)
                chosen = [(s, torch.tensor(0.0, dtype=torch.float64))]
            weights = torch.zeros(keys.size(1), dtype=torch.float64)
            soft = torch.softmax(torch.stack([v for _, v in chosen]), 0)  # Eq. 7
            for (s, _), w in zip(chosen, soft):
                weights[s - 1] = w
            focus[b] = float(sum(s * w for (s, _), w in zip(chosen, soft)))  # Eq. 4
            rows.append((weights, focus[b], float(g), len(chosen)))
        out.append(rows)
    return out


@pytest.mark.parametrize("tau", [math.inf, 20.0, 1.0, 0.2])  # 20: windows over half the sentence
@pytest.mark.parametrize("tempered", [False, True])
@pytest.mark.parametrize("score", ["additive", "bilinear"])
def test_steps_equal_the_equations_computed_by_hand(tau, tempered, score):
    """Weights, focus p_t (Eq. 4), strength g(t) (Eq. 8) and window over four steps, at tau = inf
    and finite tau (gathered windows, and windows wide enough for the masked full path), with and
    without a temperature (it divides the content score only), with either score function."""
    attn = make_attention(score=score)
    torch.nn.init.constant_(attn.strength_v.bias, 1.0)  # g about 0.7: narrow windows at finite tau
    attn.span_threshold = tau
    lengths = [30, 4, 11]
    keys, pad, _, _ = inputs(lengths)
    g = torch.Generator().manual_seed(3)
    queries = [torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(4)]
    embeds = [torch.randn(3, 2, generator=g, dtype=torch.float64) for _ in range(4)]
    temperatures = (
        [torch.rand(3, generator=g, dtype=torch.float64) + 0.5 for _ in range(4)] if tempered else None
    )
    expected = naive_flexible(attn, keys, lengths, queries, embeds, tau, temperatures)
    cache = attn.precompute(keys, pad)
    state = attn.init_state(cache)
    for t in range(4):
        out = attn.step(
            queries[t], cache, state, embeds[t], None if temperatures is None else temperatures[t]
        )
        state = out.state
        for b, (weights, focus, strength, width) in enumerate(expected[t]):
            torch.testing.assert_close(out.weights[b], weights)
            assert float(out.state["focus"][b]) == pytest.approx(focus, abs=1e-9)
            assert float(out.extras["g"][b]) == pytest.approx(strength, abs=1e-12)
            assert int(out.extras["window_size"][b]) == (lengths[b] if math.isinf(tau) else width)


def test_beam_reorder_with_a_threshold_moves_the_previous_focus():
    """Beam search with a finite tau: p_{t-1} (hence each hypothesis's window) follows the beam."""
    model = build_model("lstm_flexible", flex_strength_bias=2.0)
    model.decoder.attention.span_threshold = 0.3
    src, lengths, prev = random_batch(model, [9, 7, 8, 5], tgt_len=6)
    order = torch.tensor([2, 2, 0, 3])
    full, full_extra = model(src[order], lengths[order], prev[order])
    sizes = full_extra["attention_extras"]["window_size"]
    assert (sizes[:, 1:] < lengths[order].unsqueeze(1)).all(), "the threshold did not narrow the window"
    encoder_out, state = model.encoder(src, lengths), {}
    for t in range(3):  # steps 0..2 in the original order
        model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
    model.decoder.reorder_incremental_state(state, order)
    encoder_out = model.encoder.reorder_encoder_out(encoder_out, order)
    step, extra = model.decoder(prev[order, :4], encoder_out=encoder_out, incremental_state=state)
    torch.testing.assert_close(step[:, 0], full[:, 3], rtol=1e-5, atol=1e-5)
    for key in ("window_size", "window_start", "focus"):
        torch.testing.assert_close(
            extra["attention_extras"][key][:, 0], full_extra["attention_extras"][key][:, 3]
        )


def test_search_statistics_average_over_every_beam_hypothesis():
    """Shu sec. 5: the window is averaged over steps and over the hypotheses of each step."""
    model = build_model("lstm_flexible", flex_strength_bias=2.0)
    model.decoder.attention.span_threshold = 0.3
    stats = SearchStats()
    model.decoder.step_observer = stats.observe
    src, lengths, _ = random_batch(model, [9, 6], seed=2)
    generator = SequenceGenerator([model], model.decoder.dictionary, beam_size=3, max_len_a=0, max_len_b=6)
    hypos = generator.generate([model], {"net_input": {"src_tokens": src, "src_lengths": lengths}})
    longest = max(len(h[0]["tokens"]) for h in hypos)
    assert stats.counts["window_size"] % 3 == 0  # every live hypothesis of every step
    assert stats.counts["window_size"] >= 3 * 2 * (longest - 1)
    assert 1 <= stats.means()["window_size"] < 9


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
