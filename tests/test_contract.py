"""One contract, run over every registered architecture (hence every attention mechanism)."""

import pytest
import torch

from fairseq_vision_attn.attention import ATTENTION_REGISTRY

from .conftest import build_model, our_archs, random_batch

ARCHS = our_archs()
LENGTHS = [7, 3, 5, 1]
HEADED = ["lstm_monotonic", "lstm_mocha", "lstm_milk"]
# every arch as built by default, and the monotonic heads with test-time energies of both signs,
# so that they stop inside the sentence and move (freshly built, every head waits for the last
# token: r = -4, and the small model's energies hardly vary by position), so that incremental
# decoding and beam reordering are also checked off the trivial path
CASES = [(arch, False) for arch in ARCHS] + [(arch, True) for arch in HEADED]
CASE_IDS = [arch + ("-moving-head" if moving else "") for arch, moving in CASES]
# the archs whose attention reads --attention-score (lstm_sact: global attention, tempered),
# also run with its bilinear form
BILINEAR = [
    "lstm_global",
    "lstm_local",
    "lstm_flexible",
    "lstm_sact",
    "lstm_waitk",
    "lstm_mocha",
    "lstm_milk",
]
SCORE_CASES = [(arch, None) for arch in ARCHS] + [(arch, "bilinear") for arch in BILINEAR]
SCORE_IDS = [arch + ("-bilinear" if score else "") for arch, score in SCORE_CASES]
INCREMENTAL_CASES = [(arch, moving, None) for arch, moving in CASES]
INCREMENTAL_CASES += [(arch, False, "bilinear") for arch in BILINEAR]
INCREMENTAL_IDS = CASE_IDS + [arch + "-bilinear" for arch in BILINEAR]
# --decoder-step's other orders, over every arch (hence every mechanism) and a moving monotonic head
STEP_ORDERS = ["conditional", "luong"]
STEP_CASES = [(arch, False, step) for step in STEP_ORDERS for arch in ARCHS]
STEP_CASES += [("lstm_milk", True, step) for step in STEP_ORDERS]
STEP_IDS = [f"{arch}{'-moving-head' if moving else ''}-{step}" for arch, moving, step in STEP_CASES]


def forward(model, src, lengths, prev):
    encoder_out = model.encoder(src, lengths)
    return model.decoder(prev, encoder_out=encoder_out)


def build(arch, moving_head=False, score=None, step=None):
    overrides = {} if score is None else {"attention_score": score}
    if step is not None:
        overrides["decoder_step"] = step
    model = build_model(arch, **overrides)
    if score == "bilinear":  # the scorer is swapped: no v_a, no tanh layer
        names = [name for name, _ in model.named_parameters()]
        assert any(name.endswith("scorer.key_proj.weight") for name in names), names
        assert not any(".scorer.v." in name or ".scorer.query_proj." in name for name in names), names
    if moving_head:  # the test-time energy, a deterministic function of (decoder state, key)

        def energy_at(query_part, keys, index):
            rows = torch.arange(keys.size(0), device=keys.device)
            return torch.sin(300 * query_part.sum(-1) + 300 * keys[rows, index].sum(-1))

        model.decoder.attention.energy.energy_at = energy_at
    return model


def test_moving_heads_stop_inside_the_sentence():
    for arch in HEADED:
        model = build(arch, moving_head=True)
        src, lengths, prev = random_batch(model, LENGTHS)
        _, extra = forward(model, src, lengths, prev)
        delays = extra["attention_extras"]["delay"]
        inside = (delays > 1) & (delays < lengths.unsqueeze(1))
        assert inside.any(), f"{arch}: the head never stopped inside a sentence"
        assert (delays[:, 1:] > delays[:, :-1]).any(), f"{arch}: the head never moved"


def test_every_mechanism_has_an_arch():
    from fairseq.models import ARCH_CONFIG_REGISTRY

    used = set()
    for arch in ARCHS:
        used.add(build_model(arch).decoder.attention.registry_name)
    assert used == set(ATTENTION_REGISTRY), f"mechanisms without an arch: {set(ATTENTION_REGISTRY) - used}"
    assert {"lstm_noattn", "lstm_global", "lstm_local"} <= set(ARCH_CONFIG_REGISTRY)


@pytest.mark.parametrize("arch", ARCHS)
def test_shapes_and_padding(arch):
    model = build_model(arch)
    src, lengths, prev = random_batch(model, LENGTHS)
    logits, extra = forward(model, src, lengths, prev)
    assert logits.shape == (len(LENGTHS), prev.size(1), len(model.decoder.dictionary))
    attn = extra["attn"][0]
    if attn is None:
        assert model.decoder.attention.registry_name == "none"
        return
    assert attn.shape == (len(LENGTHS), prev.size(1), max(LENGTHS))
    # the encoder right-aligns nothing: states are right-padded, so padding is at the end
    for i, length in enumerate(LENGTHS):
        assert torch.all(attn[i, :, length:] == 0), "padding received attention weight"
    assert torch.all(attn >= 0)
    sums = attn.sum(-1)
    if getattr(model.decoder.attention, "weights_sum_to_one", True):
        torch.testing.assert_close(sums, torch.ones_like(sums))
    else:
        assert torch.all(sums <= 1 + 1e-5) and torch.all(sums > 0)


@pytest.mark.parametrize("arch", ARCHS)
def test_sentence_does_not_depend_on_batch_padding(arch):
    model = build_model(arch)
    src, lengths, prev = random_batch(model, LENGTHS)
    batched, _ = forward(model, src, lengths, prev)
    for i, length in enumerate(LENGTHS):
        alone, _ = forward(model, src[i : i + 1, -length:], lengths[i : i + 1], prev[i : i + 1])
        torch.testing.assert_close(batched[i], alone[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "arch,score,step",
    [(arch, score, None) for arch, score in SCORE_CASES]
    + [(arch, None, step) for arch, moving, step in STEP_CASES if not moving],
    ids=SCORE_IDS + [i for i, (_, moving, _) in zip(STEP_IDS, STEP_CASES) if not moving],
)
def test_gradients_reach_every_parameter(arch, score, step):
    model = build(arch, score=score, step=step).train()
    src, lengths, prev = random_batch(model, LENGTHS)
    logits, _ = forward(model, src, lengths, prev)
    logits.log_softmax(-1).sum().backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, f"{name} got no gradient"
        assert param.grad.abs().sum() > 0, f"{name} got a zero gradient"


@pytest.mark.parametrize(
    "arch,moving_head,score,step",
    [case + (None,) for case in INCREMENTAL_CASES]
    + [(arch, moving, None, step) for arch, moving, step in STEP_CASES],
    ids=INCREMENTAL_IDS + STEP_IDS,
)
def test_incremental_equals_full_forward(arch, moving_head, score, step):
    model = build(arch, moving_head, score, step)
    src, lengths, prev = random_batch(model, LENGTHS)
    full, full_extra = forward(model, src, lengths, prev)
    encoder_out = model.encoder(src, lengths)
    state = {}
    for t in range(prev.size(1)):
        step, extra = model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
        torch.testing.assert_close(step[:, 0], full[:, t], rtol=1e-5, atol=1e-5)
        for key, value in extra["attention_extras"].items():
            torch.testing.assert_close(value[:, 0], full_extra["attention_extras"][key][:, t])


@pytest.mark.parametrize(
    "arch,moving_head,step",
    [case + (None,) for case in CASES] + STEP_CASES,
    ids=CASE_IDS + STEP_IDS,
)
def test_reorder_incremental_state_follows_the_beam(arch, moving_head, step):
    """Decoding a permuted batch equals permuting the decoded batch, mid-sentence."""
    model = build(arch, moving_head, step=step)
    src, lengths, prev = random_batch(model, LENGTHS)
    full, _ = forward(model, src, lengths, prev)
    order = torch.tensor([2, 2, 0, 3])
    encoder_out = model.encoder(src, lengths)
    state = {}
    for t in range(3):  # steps 0..2 in the original order
        model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
    model.decoder.reorder_incremental_state(state, order)
    encoder_out = model.encoder.reorder_encoder_out(encoder_out, order)
    step, _ = model.decoder(prev[order, :4], encoder_out=encoder_out, incremental_state=state)
    torch.testing.assert_close(step[:, 0], full[order, 3], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_every_step_statistic_has_one_value_per_token(arch):
    model = build_model(arch)
    src, lengths, prev = random_batch(model, LENGTHS)
    _, extra = forward(model, src, lengths, prev)
    stats = extra["attention_extras"]
    assert "window_size" in stats
    for key, value in stats.items():
        assert value.shape[:2] == prev.shape, key


class _Zero(torch.nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)


def test_context_dropout_reaches_the_lstm_and_the_readout_not_the_attention():
    """--decoder-dropout-context drops c_t where h_t = LSTM([e; c_t], h) and W_r [h_t; c_t; e]
    read it, in training only. Oracle: with the dropout replaced by zeros, the decoder is
    rebuilt step by step from its own layers with c_t = 0 in both places, while the attention
    (its weights at every step) still sees the real states."""
    model = build_model("lstm_global", decoder_dropout_context=0.4)
    decoder = model.decoder
    assert decoder.dropout_context.p == 0.4
    src, lengths, prev = random_batch(model, LENGTHS)
    eval_out, _ = forward(model, src, lengths, prev)
    reference = build_model("lstm_global")  # same seed, same weights, p = 0
    torch.testing.assert_close(eval_out, forward(reference, src, lengths, prev)[0])  # eval: no dropout
    model.train()
    train_out, _ = forward(model, src, lengths, prev)
    assert not torch.allclose(train_out, eval_out)  # training: c_t dropped (other dropouts are 0)

    decoder.dropout_context = _Zero()
    zeroed, extra = forward(model, src, lengths, prev)
    encoder_out = model.encoder(src, lengths)
    hidden, cache, attn_state = decoder._initial_state(encoder_out)
    h, c = hidden["h0"], hidden["c0"]
    expected = []
    for t in range(prev.size(1)):
        e = decoder.embed_tokens(prev[:, t])
        step = decoder.attention.step(h, cache, attn_state, e)
        attn_state = step.state
        torch.testing.assert_close(extra["attn"][0][:, t], step.weights)
        none = torch.zeros_like(step.context)
        h, c = decoder.layers[0](torch.cat([e, none], -1), (h, c))
        expected.append(decoder.output_projection(torch.tanh(decoder.readout(torch.cat([h, none, e], -1)))))
    torch.testing.assert_close(zeroed, torch.stack(expected, 1))
    assert not torch.allclose(zeroed, train_out)


def _rebuilt_step_order(decoder, encoder_out, prev, order):
    """The decoder's logits rebuilt step by step from its own cells for ``--decoder-step
    order`` (one layer, no dropout), written out from the equations in the module docstring;
    also returns the attention weights of every step."""
    hidden, cache, attn_state = decoder._initial_state(encoder_out)
    h, c = hidden["h0"], hidden["c0"]
    feed = torch.zeros(h.size(0), decoder.readout.out_features)
    logits, weights = [], []
    for t in range(prev.size(1)):
        e = decoder.embed_tokens(prev[:, t])
        if order == "luong":
            h, c = decoder.layers[0](torch.cat([e, feed], -1), (h, c))
            step = decoder.attention.step(h, cache, attn_state, e)
        else:
            s, c = decoder.conditional(e, (h, c))
            step = decoder.attention.step(s, cache, attn_state, e)
            h, c = decoder.layers[0](step.context, (s, c))
        attn_state = step.state
        feed = torch.tanh(decoder.readout(torch.cat([h, step.context, e], -1)))
        logits.append(decoder.output_projection(feed))
        weights.append(step.weights)
    return torch.stack(logits, 1), torch.stack(weights, 1)


@pytest.mark.parametrize("order", STEP_ORDERS)
def test_decoder_step_orders_follow_their_equations(order):
    """--decoder-step luong attends with the new state h_t and feeds the readout f_t to the next
    step's LSTM; conditional attends with s = LSTM_cond(e, h_{t-1}) and then h_t = LSTM(c_t, s).
    Oracle: each rebuilt from the decoder's own cells, with the LSTM input sizes each order
    implies."""
    # weights of +-1.5: attention weights far from uniform, so that the query matters
    model = build_model("lstm_global", decoder_step=order, param_init=1.5)
    src, lengths, prev = random_batch(model, LENGTHS)
    logits, extra = forward(model, src, lengths, prev)
    assert extra["attn"][0].max() > 0.5
    encoder_out = model.encoder(src, lengths)
    expected, weights = _rebuilt_step_order(model.decoder, encoder_out, prev, order)
    torch.testing.assert_close(logits, expected)
    torch.testing.assert_close(extra["attn"][0], weights)
    default = build_model("lstm_global")
    assert default.decoder.conditional is None
    assert default.decoder.layers[0].input_size == 7 + 12  # [e; c_t]: embed 7, context 2 x 6
    if order == "luong":
        assert model.decoder.layers[0].input_size == 7 + 5  # [e; f_{t-1}]: embed 7, readout 5
    else:
        assert model.decoder.layers[0].input_size == 12  # c_t alone


def test_decoder_step_refuses_an_unknown_order():
    from fairseq_vision_attn.errors import VisionAttnError

    with pytest.raises(
        VisionAttnError,
        match="--decoder-step: unknown order 'bahdanu'; valid choices: bahdanau, conditional, luong",
    ):
        build_model("lstm_global", decoder_step="bahdanu")
