"""The monotonic family's functions (fairseq_vision_attn/monotonic.py) against the equations,
written as naive loops here: Raffel's recurrence (MILk Eq. 10), MoChA, MILk (Eq. 14); the
test-time head and contexts against a brute-force scan; the training noise."""

import argparse
import os
import sys

import pytest
import torch

from fairseq_vision_attn import monotonic
from fairseq_vision_attn.attention import build_attention
from fairseq_vision_attn.monotonic import (
    expected_alignment,
    expected_alignment_from_p,
    expected_delay,
    initial_log_alpha,
    milk_attention,
    mocha_attention,
    monotonic_alignment_step,
)


def right_padded_mask(lengths, src_len):
    return torch.arange(src_len).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)


def naive_alignment(p, lengths, mass_preservation):
    """Eq. 10 as a double loop, per sentence, on its real length only (float64).

    alpha_ij = p_ij ((1 - p_{i,j-1}) alpha_{i,j-1} / p_{i,j-1} + alpha_{i-1,j}),
    alpha_0 = (1, 0, ..., 0), first term 0 for j = 1; p_{i,|x|} = 1 with mass preservation.
    """
    batch, tgt_len, src_len = p.shape
    out = torch.zeros(batch, tgt_len, src_len, dtype=torch.float64)
    for b in range(batch):
        n = lengths[b]
        prev = [1.0] + [0.0] * (n - 1)
        for i in range(tgt_len):
            row = []
            for j in range(n):
                pij = 1.0 if (mass_preservation and j == n - 1) else p[b, i, j]
                carried = 0.0 if j == 0 else (1 - p[b, i, j - 1]) * row[j - 1] / p[b, i, j - 1]
                row.append(pij * (carried + prev[j]))
            for j in range(n):
                out[b, i, j] = row[j]
            prev = row
    return out


@pytest.fixture(params=["linear", "log"])
def form(request, monkeypatch):
    """Run a test with the CPU's linear form and with the log-space form a GPU takes."""
    if request.param == "log":
        monkeypatch.setattr(monotonic, "LINEAR_FORM_DEVICES", ())
    return request.param


def test_parallel_alignment_equals_naive_recurrence_with_padding(form):
    torch.manual_seed(0)
    lengths, tgt_len = [7, 4, 1, 6], 5
    mask = right_padded_mask(lengths, 7)
    energy = torch.randn(4, tgt_len, 7, dtype=torch.float64) * 2
    p = torch.sigmoid(energy)
    for mass in (True, False):
        ours = expected_alignment(energy, mask, mass_preservation=mass)
        naive = naive_alignment(p, lengths, mass)
        torch.testing.assert_close(ours, naive, rtol=1e-9, atol=1e-12)
        assert (ours.masked_select(mask.unsqueeze(1).expand_as(ours)) == 0).all()
    sums = expected_alignment(energy, mask).sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums))  # mass preservation: rows sum to 1
    leaky = expected_alignment(energy, mask, mass_preservation=False).sum(-1)
    assert (leaky[:2] < 1 - 1e-6).all()  # without it, mass leaks past the end
    # the one-step function the decoder calls in training, step after step
    log_alpha, rows = initial_log_alpha(mask, torch.float64), []
    for i in range(tgt_len):
        log_alpha = monotonic_alignment_step(log_alpha, energy[:, i], mask)
        rows.append(log_alpha.exp().masked_fill(mask, 0.0))
    torch.testing.assert_close(torch.stack(rows, 1), naive_alignment(p, lengths, True), rtol=1e-9, atol=1e-12)


def test_alignment_gradients_equal_naive_and_pass_gradcheck(form):
    torch.manual_seed(1)
    lengths = [5, 3]
    mask = right_padded_mask(lengths, 5)
    energy = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    probe = torch.randn(2, 3, 5, dtype=torch.float64)
    (expected_alignment(energy, mask) * probe).sum().backward()
    ours = energy.grad.clone()
    energy.grad = None
    (naive_alignment(torch.sigmoid(energy), lengths, True) * probe).sum().backward()
    torch.testing.assert_close(ours, energy.grad, rtol=1e-8, atol=1e-10)
    assert torch.autograd.gradcheck(lambda e: expected_alignment(e, mask), (energy,))


def test_gradient_reaches_every_energy_of_a_real_position():
    torch.manual_seed(2)
    mask = right_padded_mask([6, 4], 6)
    energy = torch.randn(2, 4, 6, requires_grad=True)
    alpha = expected_alignment(energy, mask)
    (expected_delay(alpha, mask).sum()).backward()
    grad = energy.grad
    assert torch.isfinite(grad).all()
    # the last real token's p is forced to 1, so its energy (and padding) gets no gradient
    assert (grad[0, :, :5] != 0).all() and (grad[1, :, :3] != 0).all()
    assert (grad[1, :, 4:] == 0).all()


def brute_force_soft(alpha, u, lengths, chunk=None):
    """sum over head positions k of alpha_ik times the softmax over the states the head at k
    sees: 1..k (MILk) or k-w+1..k (MoChA)."""
    batch, src_len = alpha.shape
    out = torch.zeros(batch, src_len, dtype=torch.float64)
    for b in range(batch):
        for k in range(lengths[b]):
            lo = 0 if chunk is None else max(0, k - chunk + 1)
            weights = torch.softmax(u[b, lo : k + 1], dim=0)
            out[b, lo : k + 1] += alpha[b, k] * weights
    return out


@pytest.mark.parametrize("chunk", [None, 1, 2, 3, 10])
def test_milk_and_mocha_equal_brute_force(chunk):
    torch.manual_seed(3)
    lengths = [6, 3, 1]
    mask = right_padded_mask(lengths, 6)
    log_alpha = expected_alignment(torch.randn(3, 2, 6, dtype=torch.float64), mask, log_space=True)[:, -1]
    u = torch.randn(3, 6, dtype=torch.float64) * 3
    if chunk is None:
        beta = milk_attention(log_alpha, u, mask)
    else:
        beta = mocha_attention(log_alpha, u, mask, chunk)
    expected = brute_force_soft(log_alpha.exp().masked_fill(mask, 0), u, lengths, chunk)
    torch.testing.assert_close(beta, expected, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(beta.sum(-1), torch.ones(3, dtype=torch.float64))


def test_milk_and_mocha_gradcheck():
    torch.manual_seed(4)
    mask = right_padded_mask([5, 2], 5)
    energy = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    u = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)

    def milk(e, uu):
        return milk_attention(
            monotonic_alignment_step(initial_log_alpha(mask, torch.float64), e, mask), uu, mask
        )

    def mocha(e, uu):
        log_alpha = monotonic_alignment_step(initial_log_alpha(mask, torch.float64), e, mask)
        return mocha_attention(log_alpha, uu, mask, 2)

    assert torch.autograd.gradcheck(milk, (energy, u))
    assert torch.autograd.gradcheck(mocha, (energy, u))


@pytest.mark.parametrize("scale", [50.0, -50.0, 0.0])
def test_long_sources_with_extreme_energies_stay_finite(scale):
    """600 source tokens, near-binary p (energies +-50) and tiny p: no NaN/inf either way."""
    torch.manual_seed(5)
    src_len, tgt_len = 600, 8
    mask = right_padded_mask([600, 450], src_len)
    noise = torch.randn(2, tgt_len, src_len)
    energy = (scale + noise).requires_grad_(True) if scale else (noise * 50).requires_grad_(True)
    u = (torch.randn(2, tgt_len, src_len) * 20).requires_grad_(True)
    log_alpha = initial_log_alpha(mask)
    total = 0.0
    for i in range(tgt_len):
        log_alpha = monotonic_alignment_step(log_alpha, energy[:, i], mask)
        alpha = log_alpha.exp().masked_fill(mask, 0)
        beta = milk_attention(log_alpha, u[:, i], mask)
        chunk = mocha_attention(log_alpha, u[:, i], mask, 4)
        for t in (alpha, beta, chunk):
            assert torch.isfinite(t).all()
            torch.testing.assert_close(t.sum(-1), torch.ones(2), atol=1e-4, rtol=0)
        total = total + expected_delay(alpha).sum() + (beta * 1.5).sum() + (chunk * 0.5).sum()
    total.backward()
    assert torch.isfinite(energy.grad).all() and torch.isfinite(u.grad).all()


def test_head_that_always_stops_stays_and_one_that_never_stops_reaches_the_end():
    mask = right_padded_mask([5], 5)
    stay = expected_alignment(torch.full((1, 3, 5), 60.0), mask)
    assert torch.allclose(stay[0], torch.tensor([1.0, 0, 0, 0, 0]).expand(3, 5))
    move = expected_alignment(torch.full((1, 3, 5), -60.0), mask)
    assert torch.allclose(move[0], torch.tensor([0, 0, 0, 0, 1.0]).expand(3, 5))
    assert expected_delay(move[:, 0]).item() == pytest.approx(5.0)


def _fairseq_reference():
    import fairseq

    sys.path.insert(0, os.path.dirname(fairseq.__file__))  # its examples/ use absolute imports
    try:
        from examples.simultaneous_translation.utils.monotonic_attention import (
            expected_alignment_from_p_choose,
        )
    finally:
        sys.path.pop(0)
    import alignment_train_cpu_binding  # noqa: F401  (the compiled op it calls on the CPU)

    return expected_alignment_from_p_choose


def test_matches_fairseq_expected_alignment_from_p_choose():
    """Same recurrence as fairseq's compiled op. Its default eps = 1e-6 (a clamp on the cumulative
    product) is off by ~4e-3 here; with a tiny eps in float64 both agree with Eq. 10."""
    try:
        reference = _fairseq_reference()
    except Exception as err:  # its compiled op may be missing from a fairseq build
        pytest.skip(f"fairseq's reference is not importable here: {err}")
    torch.manual_seed(6)
    p = torch.rand(3, 6, 20) * 0.9 + 0.05
    mask = torch.zeros(3, 20, dtype=torch.bool)
    naive = naive_alignment(p.double(), [20] * 3, False)
    ours = expected_alignment_from_p(p, mask, mass_preservation=False)
    theirs = reference(p.double(), mask, eps=1e-20)
    assert (ours.double() - naive).abs().max().item() < 1e-6
    assert (theirs - naive).abs().max().item() < 1e-6


def make_head(name, bias=0.0, **flags):
    torch.manual_seed(0)
    args = argparse.Namespace(attention_dim=5, monotonic_energy_bias_init=bias, mocha_chunk_size=3, **flags)
    return build_attention(name, args, query_dim=4, key_dim=3, embed_dim=2).double().eval()


def head_inputs(lengths, seed=1):
    g = torch.Generator().manual_seed(seed)
    keys = torch.randn(len(lengths), max(lengths), 3, generator=g, dtype=torch.float64)
    pad = torch.arange(max(lengths)).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)
    return keys, pad, g


def scan_energies(attn, query, cache, b, n):
    """e_ij of sentence b at every real position, by hand: g v/||v|| . tanh(W s + V h_j + b) + r."""
    energy = attn.energy
    direction = energy.g * energy.v / energy.v.norm()
    return [
        float(
            direction @ torch.tanh(energy.query_proj.weight @ query[b] + cache["mono_keys"][b, j]) + energy.r
        )
        for j in range(n)
    ]


@pytest.mark.parametrize("name", ["monotonic", "mocha", "milk"])
def test_hard_head_stops_where_a_brute_force_scan_stops(name):
    """Test time (MILk sec. 3): the head stops at the first j >= t_{i-1} with e_ij > 0, or at the
    last source token; energies of both signs. Then the context: Raffel c_i = h_{t_i}, MoChA a
    softmax over the chunk (t_i - w, t_i], MILk (Eq. 13) a softmax over 1..t_i."""
    attn = make_head(name)
    with torch.no_grad():
        attn.energy.g.fill_(3.0)  # energies of both signs, about half above 0
    lengths = [9, 6, 4]
    keys, pad, g = head_inputs(lengths)
    cache = attn.precompute(keys, pad)
    state = attn.init_state(cache)
    heads = [0, 0, 0]
    signs = set()
    for _ in range(6):
        query = torch.randn(3, 4, generator=g, dtype=torch.float64)
        out = attn.step(query, cache, state, None)
        state = out.state
        for b, n in enumerate(lengths):
            energies = scan_energies(attn, query, cache, b, n)
            signs |= {e > 0 for e in energies}
            heads[b] = next((j for j in range(heads[b], n) if energies[j] > 0), n - 1)
            assert int(state["head"][b]) == heads[b]
            assert float(out.extras["delay"][b]) == heads[b] + 1
            t = heads[b]
            if name == "monotonic":
                expected = torch.zeros(n, dtype=torch.float64)
                expected[t] = 1.0
            else:
                first = max(0, t - 3 + 1) if name == "mocha" else 0
                soft = attn.scorer.scores(query[b : b + 1], cache["soft_keys"][b : b + 1, first : t + 1])[0]
                expected = torch.zeros(n, dtype=torch.float64)
                expected[first : t + 1] = torch.softmax(soft, 0)
            torch.testing.assert_close(out.weights[b, :n].double(), expected)
            torch.testing.assert_close(out.context[b], expected @ keys[b, :n])
    assert signs == {True, False}, "the energies never took both signs"


@pytest.mark.parametrize("name", ["monotonic", "mocha", "milk"])
def test_cumulative_stop_is_the_median_of_the_stopping_distribution(name):
    """--monotonic-stop cumulative: from t_{i-1}, the head stops at the first j where the
    probability of having stopped, 1 - prod_{k=t_{i-1}}^{j} (1 - sigmoid(e_ik)), reaches 1/2
    (brute force over the hand-computed energies), or at the last token; never after the first
    e_ij > 0, the default rule, from the same position."""
    import math

    attn = make_head(name)
    attn.stop_rule = "cumulative"
    with torch.no_grad():
        attn.energy.g.fill_(3.0)
        attn.energy.r.fill_(-1.0)  # moderate p: the two rules differ
    lengths = [9, 6, 4]
    keys, pad, g = head_inputs(lengths, seed=2)
    cache = attn.precompute(keys, pad)
    state = attn.init_state(cache)
    heads = [0, 0, 0]
    earlier = 0
    for _ in range(6):
        query = torch.randn(3, 4, generator=g, dtype=torch.float64)
        out = attn.step(query, cache, state, None)
        for b, n in enumerate(lengths):
            energies = scan_energies(attn, query, cache, b, n)
            start, going = heads[b], 1.0
            for j in range(start, n):
                going *= 1.0 - 1.0 / (1.0 + math.exp(-energies[j]))
                if going <= 0.5:
                    break
            first_positive = next((j for j in range(start, n) if energies[j] > 0), n - 1)
            assert j <= first_positive
            earlier += j < first_positive
            heads[b] = j
            assert int(out.state["head"][b]) == j
            assert float(out.extras["delay"][b]) == j + 1
        state = out.state
    assert earlier > 0, "the rules never differed: the test shows nothing"


@pytest.mark.parametrize("rule", ["energy", "cumulative"])
def test_stop_threshold_moves_where_either_rule_stops(rule):
    """--monotonic-stop-threshold Q: from t_{i-1}, the energy rule stops at the first j with
    sigmoid(e_ij) > Q, the cumulative rule at the first j where 1 - prod_k (1 - sigmoid(e_ik))
    reaches Q (brute force over the hand-computed energies), at the last token at the latest;
    a larger Q never stops earlier, and Q = 1/2 is the default rule bit for bit."""
    import math

    attn = make_head("milk")
    attn.stop_rule = rule
    with torch.no_grad():
        attn.energy.g.fill_(3.0)
        attn.energy.r.fill_(-1.0)  # moderate p: thresholds matter
    lengths = [9, 6, 4]
    keys, pad, g = head_inputs(lengths, seed=4)
    cache = attn.precompute(keys, pad)
    queries = [torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(6)]

    def decode(q):
        attn.stop_threshold = q
        state, heads = attn.init_state(cache), []
        for query in queries:
            state = attn.step(query, cache, state, None).state
            heads.append(state["head"].tolist())
        return heads

    default = decode(0.5)
    runs = {q: decode(q) for q in (0.2, 0.5, 0.8)}
    assert runs[0.5] == default
    for q, heads in runs.items():
        start = [0, 0, 0]
        for query, row in zip(queries, heads):
            for b, n in enumerate(lengths):
                p = [1.0 / (1.0 + math.exp(-e)) for e in scan_energies(attn, query, cache, b, n)]
                going, j = 1.0, n - 1
                for k in range(start[b], n):
                    going *= 1.0 - p[k]
                    if (p[k] > q) if rule == "energy" else (1.0 - going >= q):
                        j = k
                        break
                assert row[b] == j, (q, b)
                start[b] = j
    flat = {q: [h for row in heads for h in row] for q, heads in runs.items()}
    assert all(a <= b <= c for a, b, c in zip(flat[0.2], flat[0.5], flat[0.8]))
    assert flat[0.2] != flat[0.8], "the thresholds never changed a stop: the test shows nothing"


def test_cumulative_stop_equals_the_energy_rule_when_p_is_0_or_1():
    attn = make_head("milk")
    with torch.no_grad():
        attn.energy.g.fill_(300.0)  # |e| in the hundreds: p is 0 or 1
    keys, pad, g = head_inputs([9, 6, 4], seed=3)
    cache = attn.precompute(keys, pad)
    states = {rule: attn.init_state(cache) for rule in ("energy", "cumulative")}
    for _ in range(6):
        query = torch.randn(3, 4, generator=g, dtype=torch.float64)
        for rule in states:
            attn.stop_rule = rule
            states[rule] = attn.step(query, cache, states[rule], None).state
        assert torch.equal(states["energy"]["head"], states["cumulative"]["head"])


def test_training_noise_has_variance_n(monkeypatch):
    """MILk Eq. 11: p = sigmoid(e + N(0, n)) in training: the noise has standard deviation sqrt(n)."""
    import fairseq_vision_attn.attention.monotonic as module

    attn = make_head("milk", monotonic_noise_var=4.0).float().train()
    keys, pad, g = head_inputs([400] * 64)
    cache = attn.precompute(keys.float(), pad)
    query = torch.randn(64, 4, generator=g)
    seen = []
    original = module.monotonic_alignment_step
    monkeypatch.setattr(
        module,
        "monotonic_alignment_step",
        lambda prev, energy, *a: seen.append(energy) or original(prev, energy, *a),
    )
    attn.step(query, cache, attn.init_state(cache), None)
    noise = seen[0] - attn.energy.energies(query, cache["mono_keys"]).detach()
    assert float(noise.std()) == pytest.approx(2.0, abs=0.03)  # 25,600 draws: std error 0.009
    assert abs(float(noise.mean())) < 0.05
