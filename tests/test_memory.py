"""Fixed-size memory attention (Britz et al. 2017): C against the equations, padding, Eq. 10, cost."""

import itertools

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from fairseq_vision_attn.attention.memory import position_encoding

from .conftest import build_model, random_batch

K = 4
VARIANTS = list(itertools.product(["softmax", "sigmoid"], ["time", "slots"], [False, True]))


def make_attention(encoder_score="sigmoid", normalize="time", pe=False, decoder_score="softmax"):
    model = build_model(
        "lstm_memory",
        memory_size=K,
        memory_encoder_score=encoder_score,
        memory_normalize=normalize,
        memory_position_encoding=pe,
        memory_decoder_score=decoder_score,
    )
    return model.decoder.attention


def naive_memory(attention, states, length):
    """Eqs. 4-5 / 8-10 with Python loops, for one unpadded sentence (states: length x D)."""
    w = attention.encoder_proj.weight.detach()  # K x D
    scores = [[float(w[k] @ states[s]) for k in range(K)] for s in range(length)]
    if attention.use_position_encoding:
        table = [
            [
                (1 - (k + 1) / K) * (1 - (s + 1) / length) + ((k + 1) / K) * ((s + 1) / length)
                for k in range(K)
            ]
            for s in range(length)
        ]
        for k in range(K):
            column = sum(table[s][k] for s in range(length))
            for s in range(length):
                scores[s][k] *= table[s][k] / column * length
    scores = torch.tensor(scores, dtype=torch.float64)  # length x K
    if attention.encoder_score == "softmax":
        alpha = torch.softmax(scores, dim=0 if attention.normalize == "time" else 1)
    else:
        alpha = torch.sigmoid(scores)
        if attention.normalize == "time":
            alpha = alpha / alpha.sum(0, keepdim=True)
    memory = torch.zeros(K, states.size(1), dtype=torch.float64)
    for k in range(K):
        for s in range(length):
            memory[k] += alpha[s, k] * states[s].double()
    return memory


@pytest.mark.parametrize("encoder_score,normalize,pe", VARIANTS)
def test_memory_matches_the_equations_and_ignores_padding(encoder_score, normalize, pe):
    attention = make_attention(encoder_score, normalize, pe)
    lengths = [5, 2, 4]
    states = torch.randn(3, 5, attention.key_dim)
    src_pad = torch.arange(5).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)
    states_garbage = states.masked_fill(src_pad.unsqueeze(-1), 1e3)  # padding states must not matter
    for keys in (states, states_garbage):
        memory = attention.precompute(keys, src_pad)["memory"]
        for i, n in enumerate(lengths):
            expected = naive_memory(attention, states[i, :n], n)
            torch.testing.assert_close(memory[i].double(), expected, rtol=1e-4, atol=1e-5)


def test_position_encoding_is_eq_10_renormalised_over_each_sentence():
    src_pad = torch.tensor([[False] * 6, [False, False, False, True, True, True]])
    table = position_encoding(src_pad, K)  # batch x S x K
    assert table.shape == (2, 6, K)
    assert torch.all(table[1, 3:] == 0)
    for i, n in enumerate([6, 3]):
        raw = torch.tensor(
            [
                [(1 - k / K) * (1 - s / n) + (k / K) * (s / n) for k in range(1, K + 1)]
                for s in range(1, n + 1)
            ]
        )
        torch.testing.assert_close(table[i, :n], raw / raw.sum(0, keepdim=True) * n)
        torch.testing.assert_close(table[i, :n].sum(0), torch.full((K,), float(n)))
    # the first slot leans to the start of the sentence, the last to its end (Fig. 2)
    assert table[0, 0, 0] > table[0, -1, 0] and table[0, -1, -1] > table[0, 0, -1]


@pytest.mark.parametrize("decoder_score", ["softmax", "sigmoid"])
def test_decoder_scores_and_context(decoder_score):
    attention = make_attention(decoder_score=decoder_score)
    keys = torch.randn(2, 3, attention.key_dim)
    cache = attention.precompute(keys, torch.zeros(2, 3, dtype=torch.bool))
    query = torch.randn(2, attention.query_dim)
    beta = attention.decoder_weights(query)
    if decoder_score == "softmax":
        torch.testing.assert_close(beta.sum(-1), torch.ones(2))
    else:
        torch.testing.assert_close(beta, torch.sigmoid(query @ attention.decoder_proj.weight.T))
    out = attention.step(query, cache, {}, torch.randn(2, attention.embed_dim))
    torch.testing.assert_close(out.context, torch.einsum("bk,bkd->bd", beta, cache["memory"]))
    # effective alignment alpha . beta (paper sec. 5)
    torch.testing.assert_close(out.weights, torch.einsum("bsk,bk->bs", cache["alpha"], beta))


def _step_flops(attention, src_len):
    keys = torch.randn(2, src_len, attention.key_dim)
    cache = attention.precompute(keys, torch.zeros(2, src_len, dtype=torch.bool))
    query, embed = torch.randn(2, attention.query_dim), torch.randn(2, attention.embed_dim)
    with FlopCounterMode(display=False) as counter:
        out = attention.step(query, cache, {}, embed)
    return counter.get_total_flops(), cache, out


def test_a_decoding_step_does_not_grow_with_the_source():
    """With the alignment off (plain generation), a step reads only C: same FLOPs for 5 and 500
    source tokens, and the cache holds nothing of source length."""
    attention = make_attention()
    attention.expose_alignment = False
    short, cache, _ = _step_flops(attention, 5)
    long, cache_long, out = _step_flops(attention, 500)
    assert short == long > 0
    assert set(cache_long) == {"memory"} and cache_long["memory"].shape == (2, K, attention.key_dim)
    assert out.weights is None
    attention.expose_alignment = True  # with alpha . beta exposed, the step does grow
    assert _step_flops(attention, 500)[0] > _step_flops(attention, 5)[0]


def test_generation_turns_the_alignment_off_unless_asked():
    from fairseq_vision_attn.tasks.translation_vision_attn import TranslationVisionAttnTask

    model = build_model("lstm_memory")
    task = TranslationVisionAttnTask.__new__(TranslationVisionAttnTask)
    task.cfg = type("Cfg", (), {"vision_span_threshold": float("inf"), "test_waitk_lagging": None})()
    task.search_stats = type("S", (), {"observe": staticmethod(lambda extras: None)})()
    task.configure_for_inference(model)
    assert model.decoder.attention.expose_alignment is False
    task.configure_for_inference(model, print_alignment=True)
    assert model.decoder.attention.expose_alignment is True


def test_gradients_reach_both_score_matrices():
    model = build_model("lstm_memory", memory_position_encoding=True).train()
    src, lengths, prev = random_batch(model, [6, 2, 4])
    logits, _ = model.decoder(prev, encoder_out=model.encoder(src, lengths))
    logits.logsumexp(-1).sum().backward()
    attention = model.decoder.attention
    assert attention.encoder_proj.weight.grad.abs().sum() > 0
    assert attention.decoder_proj.weight.grad.abs().sum() > 0


def test_sharpness_hand_values():
    """analysis' sharpness: a one-hot step has peak 1 and entropy 0, a uniform one peak 1/n and
    normalised entropy 1; a peak of exactly 0.5 is not 'above half'; weights are renormalised."""
    from fairseq_vision_attn.analysis import sharpness

    assert sharpness([[0, 1, 0, 0]]) == (1, 1.0, 0.0, 1.0)
    count, peak, entropy, sharp = sharpness([[2, 2, 2, 2]])
    assert (count, sharp) == (1, 0.0) and peak == pytest.approx(0.25) and entropy == pytest.approx(1.0)
    count, peak, entropy, sharp = sharpness([[0, 1, 0, 0], [1, 1, 1, 1], [0.5, 0.5], [3.0], [0, 0]])
    assert count == 4  # the all-zero row is no distribution
    assert peak == pytest.approx((1 + 0.25 + 0.5 + 1) / 4)
    assert entropy == pytest.approx((0 + 1 + 1 + 0) / 4)
    assert sharp == pytest.approx(2 / 4)


def test_gate_statistics_hand_values():
    """Two slots, gates (0.95, 0.05) and (0.5, 0.5, 0.6): 5 gates, one above 0.9, one below 0.1,
    two of them (0.95, 0.6) above 0.5 (exactly 0.5 is not); effective positions 1 / sum p^2 of
    the normalised gates: (0.95, 0.05) -> 1 / 0.905 = 1.105, (0.5, 0.5, 0.6) -> 1.6^2 / 0.86."""
    from fairseq_vision_attn.analysis import gate_statistics

    mean, low, high, opened, positions, effective = gate_statistics([[0.95, 0.05], [0.5, 0.5, 0.6]])
    assert mean == pytest.approx(2.6 / 5)
    assert (low, high) == (pytest.approx(0.2), pytest.approx(0.2))
    assert opened == pytest.approx(2 / 2) and positions == pytest.approx(5 / 2)
    assert effective == pytest.approx((1 / (0.95**2 + 0.05**2) + 1.6**2 / 0.86) / 2)


def test_slot_coverage_hand_values():
    """Sentence 1 (3 positions): slot 0 peaks at position 0, slot 1 at position 2 -> 2 of 3
    positions covered. Sentence 2 (2 real positions, 1 padding that holds the largest raw value):
    both slots peak at position 1 -> 1 of 2; the padding is never a peak."""
    from fairseq_vision_attn.analysis import slot_coverage

    alpha = torch.zeros(2, 3, 2)
    alpha[0, :, 0] = torch.tensor([0.7, 0.2, 0.1])
    alpha[0, :, 1] = torch.tensor([0.1, 0.3, 0.6])
    alpha[1, :, 0] = torch.tensor([0.4, 0.6, 9.0])
    alpha[1, :, 1] = torch.tensor([0.1, 0.9, 9.0])
    pad = torch.tensor([[False, False, False], [False, False, True]])
    assert slot_coverage(alpha, pad) == [pytest.approx(2 / 3), pytest.approx(1 / 2)]


def test_memory_slot_distributions_read_real_positions_only():
    """Each slot's column over the sentence's own positions: padding is dropped, K lists per
    sentence, and under --memory-normalize time each one sums to 1 (Britz's C_k an attention)."""
    from fairseq_vision_attn.analysis import memory_slot_distributions

    attention = make_attention(pe=True)
    states = torch.randn(2, 5, attention.encoder_proj.in_features)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    slots = memory_slot_distributions(attention.encoder_weights(states, pad).detach(), pad)
    assert [len(s) for s in slots] == [5] * K + [3] * K
    assert all(sum(s) == pytest.approx(1.0, abs=1e-5) for s in slots)
    alpha = torch.zeros(1, 3, 2)
    alpha[0, 0, 0], alpha[0, 1, 1], alpha[0, 2, 1] = 1.0, 0.25, 0.75
    assert memory_slot_distributions(alpha, torch.tensor([[False, False, False]])) == [
        [1.0, 0.0, 0.0],
        [0.0, 0.25, 0.75],
    ]
