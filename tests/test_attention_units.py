"""Each baseline mechanism against a naive loop written from its paper's equations."""

import argparse

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fairseq_vision_attn.attention import build_attention
from fairseq_vision_attn.attention.window import scatter_rows, window_indices


def make(name, **flags):
    torch.manual_seed(0)
    args = argparse.Namespace(attention_dim=5, local_window_d=2, **flags)
    return build_attention(name, args, query_dim=4, key_dim=3, embed_dim=2).double()


def padded_inputs(lengths, key_dim=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    n, s = len(lengths), max(lengths)
    keys = torch.randn(n, s, key_dim, generator=g, dtype=torch.float64)
    pad = torch.arange(s).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)
    query = torch.randn(n, 4, generator=g, dtype=torch.float64)
    return keys, pad, query


def test_additive_matches_concatenated_score_loop():
    """score = v_a^T tanh(W_a [h_{t-1}; h_s]) (Shu Eq. 3), softmax over real positions only."""
    attn = make("additive")
    keys, pad, query = padded_inputs([5, 3])
    cache = attn.precompute(keys, pad)
    out = attn.step(query, cache, attn.init_state(cache), torch.zeros(2, 2, dtype=torch.float64))
    scorer = attn.scorer
    w_a = torch.cat([scorer.query_proj.weight, scorer.key_proj.weight], dim=1)  # [W_q U_a]
    for b, length in enumerate([5, 3]):
        scores = torch.stack(
            [
                scorer.v.weight[0]
                @ torch.tanh(w_a @ torch.cat([query[b], keys[b, s]]) + scorer.key_proj.bias)
                for s in range(length)
            ]
        )
        expected = torch.softmax(scores, 0)
        torch.testing.assert_close(out.weights[b, :length], expected)
        assert torch.all(out.weights[b, length:] == 0)
        torch.testing.assert_close(out.context[b], expected @ keys[b, :length])
    assert out.extras["window_size"].tolist() == [5.0, 3.0]


def test_bilinear_matches_luong_general_score_loop():
    """--attention-score bilinear: score = h_s^T W_b h_{t-1} (Luong's general form, fairseq's
    lstm), softmax over real positions only; W_b read from the module, the score by hand."""
    attn = make("additive", attention_score="bilinear")
    keys, pad, query = padded_inputs([5, 3])
    cache = attn.precompute(keys, pad)
    out = attn.step(query, cache, attn.init_state(cache), torch.zeros(2, 2, dtype=torch.float64))
    w_b = attn.scorer.key_proj.weight.T  # key_dim x query_dim
    for b, length in enumerate([5, 3]):
        scores = torch.stack([keys[b, s] @ w_b @ query[b] for s in range(length)])
        expected = torch.softmax(scores, 0)
        torch.testing.assert_close(out.weights[b, :length], expected)
        assert torch.all(out.weights[b, length:] == 0)
        torch.testing.assert_close(out.context[b], expected @ keys[b, :length])


@pytest.mark.parametrize("temperature", [None, (0.5, 2.0, 1.3)])
def test_local_p_matches_luong_equations(temperature):
    """p_t = S sigmoid(v_p^T tanh(W_p h)); softmax(score / tau_t) over [round(p)-D, round(p)+D]
    x Gaussian (a temperature divides the window's scores, Lin et al. Eq. 4)."""
    attn = make("local")
    lengths = [12, 3, 9]
    keys, pad, query = padded_inputs(lengths)
    cache = attn.precompute(keys, pad)
    taus = None if temperature is None else torch.tensor(temperature, dtype=torch.float64)
    out = attn.step(
        query, cache, attn.init_state(cache), torch.zeros(3, 2, dtype=torch.float64), temperature=taus
    )
    d, sigma = 2, 1.0
    for b, length in enumerate(lengths):
        p = length * torch.sigmoid(
            attn.position_v.weight[0] @ torch.tanh(attn.position_proj.weight @ query[b])
        )
        centre = max(int(torch.round(p)), 1)
        window = [s for s in range(centre - d, centre + d + 1) if 1 <= s <= length]
        scores = torch.stack(
            [attn.scorer.scores(query[b : b + 1], cache["keys"][b : b + 1, s - 1 : s])[0, 0] for s in window]
        )
        soft = torch.softmax(scores if taus is None else scores / taus[b], 0)
        expected = torch.zeros(keys.size(1), dtype=torch.float64)
        for k, s in enumerate(window):
            expected[s - 1] = soft[k] * torch.exp(-((s - p) ** 2) / (2 * sigma**2))
        torch.testing.assert_close(out.weights[b], expected)
        assert out.extras["window_size"][b] == len(window)
        torch.testing.assert_close(out.extras["focus"][b], p)


def test_local_window_is_2d_plus_1_inside_long_sentences():
    attn = make(
        "local",
    )
    keys, pad, query = padded_inputs([40, 40, 40])
    cache = attn.precompute(keys, pad)
    cache["src_len"] = torch.full((3,), 40.0, dtype=torch.float64)
    torch.nn.init.zeros_(attn.position_v.weight)  # p_t = S / 2 = 20: far from both ends
    out = attn.step(query, cache, {}, torch.zeros(3, 2, dtype=torch.float64))
    assert out.extras["window_size"].tolist() == [5.0, 5.0, 5.0]
    assert torch.count_nonzero(out.weights, dim=1).tolist() == [5, 5, 5]


def test_window_indices_and_scatter():
    index, valid = window_indices(torch.tensor([1, 4, 6]), torch.tensor([2, 3, 1]), src_len=6)
    assert index.tolist() == [[0, 1, 2], [3, 4, 5], [5, 5, 5]]
    assert valid.tolist() == [[True, True, False], [True, True, True], [True, False, False]]
    full = scatter_rows(torch.ones(3, 3), index, valid, 6)
    assert full.tolist() == [[1, 1, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 1]]


def test_none_attention_returns_the_summary():
    attn = make("none")
    keys, pad, query = padded_inputs([4, 2])
    summary = torch.randn(2, 3, dtype=torch.float64)
    cache = attn.precompute(keys, pad, summary)
    out = attn.step(query, cache, {}, torch.zeros(2, 2, dtype=torch.float64))
    assert out.weights is None and torch.equal(out.context, summary)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 12), st.integers(0, 12)), min_size=1, max_size=5), st.integers(1, 12)
)
def test_window_indices_cover_exactly_each_window(windows, src_len):
    """Every valid index is start-1 .. start+width-2 of its own row, in range, nothing else."""
    start = torch.tensor([min(s, src_len) for s, _ in windows])
    width = torch.tensor([min(w, src_len - s + 1) for s, w in zip(start.tolist(), (w for _, w in windows))])
    index, valid = window_indices(start, width, src_len)
    for row in range(len(windows)):
        chosen = index[row][valid[row]].tolist()
        first = int(start[row]) - 1
        assert chosen == list(range(first, first + int(width[row])))
        assert all(0 <= i < src_len for i in index[row].tolist())
