"""Self-adaptive attention temperature (Lin et al. 2018) and its composition with other mechanisms."""

import argparse

import pytest
import torch

from fairseq_vision_attn.analysis import temperature_by_word
from fairseq_vision_attn.attention.temperature import PREV_CONTEXT, SelfAdaptiveTemperature, TemperedAttention
from fairseq_vision_attn.errors import VisionAttnError, greater_than_one
from fairseq_vision_attn.plots import fixed_temperature_points

from .conftest import build_model, random_batch

LENGTHS = [7, 3, 5, 1]


def forward(model, src, lengths, prev):
    return model.decoder(prev, encoder_out=model.encoder(src, lengths))


def temperatures(model, seed=0):
    src, lengths, prev = random_batch(model, LENGTHS, seed=seed)
    return forward(model, src, lengths, prev)[1]["attention_extras"]["temperature"]


@pytest.mark.parametrize("lam", [1.5, 4.0, 10.0])
def test_temperatures_lie_strictly_between_one_over_lambda_and_lambda(lam):
    model = build_model("lstm_sact", sact_lambda=lam)
    temperature = model.decoder.attention.temperature
    with torch.no_grad():  # large weights: beta_t spreads over most of (-1, 1)
        temperature.context_proj.weight.mul_(3)
        temperature.state_proj.weight.mul_(3)
    taus = temperatures(model)
    assert taus.shape == (len(LENGTHS), 6)
    assert torch.all(taus > 1 / lam) and torch.all(taus < lam)
    assert taus.min() < 1 < taus.max(), "the temperature never left 1"


def test_zero_weights_equal_global_attention_exactly():
    """W_c = U_s = 0 -> tau_t = lambda^0 = 1: the model is global attention, bit for bit."""
    plain = build_model("lstm_global", seed=3)
    sact = build_model("lstm_sact", seed=4)
    state = {
        k.replace("decoder.attention.", "decoder.attention.inner."): v for k, v in plain.state_dict().items()
    }
    state["decoder.attention.temperature.context_proj.weight"] = torch.zeros(
        1, sact.decoder.attention.context_dim
    )
    state["decoder.attention.temperature.state_proj.weight"] = torch.zeros(1, sact.decoder.hidden_size)
    sact.load_state_dict(state)
    src, lengths, prev = random_batch(plain, LENGTHS)
    logits_plain, extra_plain = forward(plain, src, lengths, prev)
    logits_sact, extra_sact = forward(sact, src, lengths, prev)
    assert torch.equal(logits_plain, logits_sact)
    assert torch.equal(extra_plain["attn"][0], extra_sact["attn"][0])
    assert torch.all(extra_sact["attention_extras"]["temperature"] == 1)


def test_fixed_temperature_divides_the_scores():
    """--attention-temperature fixed T: weights = softmax(score / T) of the same scorer."""
    model = build_model("lstm_global", attention_temperature="fixed", fixed_temperature=0.5)
    attention = model.decoder.attention
    assert isinstance(attention, TemperedAttention)
    keys = torch.randn(2, 4, attention.key_dim)
    src_pad = torch.tensor([[False] * 4, [False, False, False, True]])
    cache = attention.precompute(keys, src_pad, keys[:, 0])
    query = torch.randn(2, attention.query_dim)
    out = attention.step(query, cache, attention.init_state(cache), torch.randn(2, attention.embed_dim))
    scores = attention.inner.scorer.scores(query, cache["keys"]).masked_fill(src_pad, float("-inf"))
    torch.testing.assert_close(out.weights, torch.softmax(scores / 0.5, dim=-1))
    torch.testing.assert_close(out.extras["temperature"], torch.full((2,), 0.5))


@pytest.mark.parametrize("temperature", [0.8, 1.2])
def test_fixed_temperature_is_global_attention_with_v_divided_by_it(temperature):
    """The additive score v^T tanh(W k + U q) is linear in v, so dividing it by a constant T is
    global attention with v / T: a fixed temperature (Lin Fig. 1) adds no function, only a
    different scale of v for the optimiser (docs/results.md, SACT section)."""
    fixed = build_model("lstm_global", seed=6, attention_temperature="fixed", fixed_temperature=temperature)
    plain = build_model("lstm_global", seed=7)
    state = {
        k.replace("decoder.attention.inner.", "decoder.attention."): v for k, v in fixed.state_dict().items()
    }
    state["decoder.attention.scorer.v.weight"] = state["decoder.attention.scorer.v.weight"] / temperature
    plain.load_state_dict(state)
    src, lengths, prev = random_batch(plain, LENGTHS)
    logits_fixed, extra_fixed = forward(fixed, src, lengths, prev)
    logits_plain, extra_plain = forward(plain, src, lengths, prev)
    torch.testing.assert_close(extra_plain["attn"][0], extra_fixed["attn"][0])
    torch.testing.assert_close(logits_plain, logits_fixed)
    # and the temperature does change what the same weights attend to
    untempered = forward(build_model("lstm_global", seed=6), src, lengths, prev)[1]["attn"][0]
    assert (untempered - extra_fixed["attn"][0]).abs().max() > 1e-4


def test_temperature_reaches_the_gradient():
    model = build_model("lstm_sact").train()
    src, lengths, prev = random_batch(model, LENGTHS)
    logits, _ = forward(model, src, lengths, prev)
    logits.logsumexp(-1).sum().backward()
    temperature = model.decoder.attention.temperature
    for param in (temperature.context_proj.weight, temperature.state_proj.weight):
        assert param.grad is not None and param.grad.abs().sum() > 0


def test_sact_formula_and_previous_context():
    """tau_t = lambda^tanh(W_c c_{t-1} + U_s s_t), with c_0 the encoder summary, c_t the step's context."""
    module = SelfAdaptiveTemperature(context_dim=3, query_dim=2, lam=4.0)
    query, context = torch.randn(5, 2), torch.randn(5, 3)
    beta = torch.tanh(context @ module.context_proj.weight.T + query @ module.state_proj.weight.T).squeeze(-1)
    torch.testing.assert_close(module(query, context), 4.0**beta)

    model = build_model("lstm_sact")
    attention = model.decoder.attention
    keys = torch.randn(2, 4, attention.key_dim)
    summary = torch.randn(2, attention.key_dim)
    cache = attention.precompute(keys, torch.zeros(2, 4, dtype=torch.bool), summary)
    state = attention.init_state(cache)
    assert torch.equal(state[PREV_CONTEXT], summary)
    query = torch.randn(2, attention.query_dim)
    out = attention.step(query, cache, state, torch.randn(2, attention.embed_dim))
    torch.testing.assert_close(out.extras["temperature"], attention.temperature(query, summary))
    assert torch.equal(out.state[PREV_CONTEXT], out.context)


@pytest.mark.parametrize("order", ["bahdanau", "conditional"])
def test_sact_reads_the_newest_word_only_where_its_query_has(order):
    """Lin et al.'s s_t has read y_{t-1}. In the Bahdanau order the query is h_{t-1}, so without
    --sact-embedding tau_t cannot depend on y_{t-1} (only from step t + 1 on); in the conditional
    order the query s = LSTM_cond(emb(y_{t-1}), h_{t-1}) has read it, so tau_t does. Oracle: the
    temperatures of two target prefixes that differ in one word, at the steps before, at and
    after the step that reads it."""
    model = build_model("lstm_sact", decoder_step=order)
    with torch.no_grad():  # beta away from 0 so that a changed input moves tau visibly
        model.decoder.attention.temperature.state_proj.weight.mul_(5)
    src, lengths, prev = random_batch(model, LENGTHS)
    other = prev.clone()
    other[:, 3] = prev[:, 3] % (len(model.decoder.dictionary) - 4) + 4  # another real word
    assert not torch.equal(other, prev)
    taus = forward(model, src, lengths, prev)[1]["attention_extras"]["temperature"]
    changed = forward(model, src, lengths, other)[1]["attention_extras"]["temperature"]
    assert torch.equal(taus[:, :3], changed[:, :3])  # before step 3 nothing has read it
    assert not torch.allclose(taus[:, 4], changed[:, 4])  # after it, every order has
    if order == "conditional":
        assert not torch.allclose(taus[:, 3], changed[:, 3])
    else:
        assert torch.equal(taus[:, 3], changed[:, 3])


def test_beam_reorder_moves_the_previous_context():
    model = build_model("lstm_sact")
    src, lengths, prev = random_batch(model, LENGTHS)
    encoder_out = model.encoder(src, lengths)
    incremental = {}
    model.decoder(prev[:, :2], encoder_out=encoder_out, incremental_state=incremental)
    flat = model.decoder.get_incremental_state(incremental, "cached_state")
    before = flat[f"state.{PREV_CONTEXT}"].clone()
    order = torch.tensor([2, 0, 0, 3])
    model.decoder.reorder_incremental_state(incremental, order)
    after = model.decoder.get_incremental_state(incremental, "cached_state")[f"state.{PREV_CONTEXT}"]
    assert torch.equal(after, before.index_select(0, order))


@pytest.mark.parametrize("arch", ["lstm_flexible", "lstm_local"])
def test_temperature_composes_with_other_mechanisms(arch):
    plain = build_model(arch, seed=5)
    fixed_one = build_model(arch, seed=5, attention_temperature="fixed", fixed_temperature=1.0)
    src, lengths, prev = random_batch(plain, LENGTHS)
    # T = 1 adds no parameter: same seed, same weights, same outputs
    torch.testing.assert_close(
        forward(plain, src, lengths, prev)[0], forward(fixed_one, src, lengths, prev)[0]
    )
    sact = build_model(arch, seed=5, attention_temperature="sact")
    assert sact.decoder.attention.registry_name == plain.decoder.attention.registry_name
    _, extra = forward(sact, src, lengths, prev)
    assert extra["attention_extras"]["temperature"].shape == (len(LENGTHS), prev.size(1))
    if arch == "lstm_flexible":  # the threshold reaches the wrapped mechanism
        assert sact.decoder.attention.mechanism.span_threshold == float("inf")


def test_flexible_temperature_leaves_the_window_formula_alone():
    """Only the content score is tempered: the thresholded window still equals tau = inf's
    computation restricted to it, and tau = inf with SACT scores every position."""
    model = build_model("lstm_flexible", seed=2, attention_temperature="sact")
    src, lengths, prev = random_batch(model, LENGTHS)
    full = forward(model, src, lengths, prev)[1]["attention_extras"]
    assert torch.equal(full["window_size"][:, 0], torch.tensor([7.0, 3.0, 5.0, 1.0]))
    model.decoder.attention.mechanism.span_threshold = 1e9  # finite: the gathering path
    windowed = forward(model, src, lengths, prev)[1]["attention_extras"]
    torch.testing.assert_close(windowed["temperature"], full["temperature"])
    torch.testing.assert_close(windowed["focus"], full["focus"])


def test_temperature_on_an_attention_that_cannot_take_it_is_refused():
    with pytest.raises(
        VisionAttnError, match="--attention-temperature sact cannot be applied to --attention none"
    ):
        build_model("lstm_noattn", attention_temperature="sact")


@pytest.mark.parametrize("text", ["1", "0.5", "-4", "inf", "nan", "big"])
def test_lambda_at_most_one_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="> 1"):
        greater_than_one(text)


def test_temperature_by_word_groups_tokens():
    sentences = {0: ([], ["the", "cat", "."]), 1: ([], ["a", "dog"])}
    stats = {0: {"temperatures": [2.0, 0.5, 3.0, 1.0]}, 1: {"temperatures": [2.5, 0.4, 1.2]}}
    groups, per_type = temperature_by_word(sentences, stats, {"the", "a", "."})
    assert sorted(groups["function"]) == [2.0, 2.5, 3.0]
    assert sorted(groups["content"]) == [0.4, 0.5]
    assert sorted(groups["</s>"]) == [1.0, 1.2]
    assert per_type["cat"] == [0.5]


def test_temperature_by_word_names_the_cause_of_a_token_mismatch():
    """A decoding with BPE removed or detokenized (De-En's recipes) has fewer tokens than the
    model's steps: refused with the remedy, not a bare count."""
    sentences = {0: ([], ["playground."])}  # "play@@ ground ." written as one word
    stats = {0: {"temperatures": [0.3, 0.4, 0.5, 1.0]}}
    with pytest.raises(
        VisionAttnError,
        match=r"sentence 0: 4 temperatures for 1 output tokens \+ EOS: decode without --remove-bpe",
    ):
        temperature_by_word(sentences, stats, {"."})


def test_fixed_temperature_points_read_the_report_table():
    rows = [
        ["lstm_global", "4.7"],
        ["lstm_sact", "5.1"],
        ["lstm_global_T0.8", "4.2"],
        ["lstm_global_T1.2", "4.4"],
    ]
    fixed, sact = fixed_temperature_points(rows)
    assert fixed == [(0.8, 4.2), (1.0, 4.7), (1.2, 4.4)] and sact == 5.1


def test_sact_embedding_variant_by_hand_and_zero_equals_global():
    """--sact-embedding: beta = tanh(W_c c_{t-1} + U_s s_t + V_e emb(y_{t-1})), with the step's
    own prev_embed; V_e = W_c = U_s = 0 is global attention bit for bit."""
    module = SelfAdaptiveTemperature(context_dim=3, query_dim=2, lam=4.0, embed_dim=4)
    query, context, embed = torch.randn(5, 2), torch.randn(5, 3), torch.randn(5, 4)
    energy = (
        context @ module.context_proj.weight.T
        + query @ module.state_proj.weight.T
        + embed @ module.embed_proj.weight.T
    )
    torch.testing.assert_close(module(query, context, embed), 4.0 ** torch.tanh(energy).squeeze(-1))
    with pytest.raises(ValueError, match="prev_embed"):
        module(query, context)

    model = build_model("lstm_sact", sact_embedding=True)
    attention = model.decoder.attention
    keys, summary = torch.randn(2, 4, attention.key_dim), torch.randn(2, attention.key_dim)
    cache = attention.precompute(keys, torch.zeros(2, 4, dtype=torch.bool), summary)
    query, prev_embed = torch.randn(2, attention.query_dim), torch.randn(2, attention.embed_dim)
    out = attention.step(query, cache, attention.init_state(cache), prev_embed)
    expected = attention.temperature(query, summary, prev_embed)
    torch.testing.assert_close(out.extras["temperature"], expected)
    assert not torch.allclose(expected, attention.temperature(query, summary, torch.zeros_like(prev_embed)))

    plain = build_model("lstm_global", seed=3)
    state = {
        k.replace("decoder.attention.", "decoder.attention.inner."): v for k, v in plain.state_dict().items()
    }
    for name, param in attention.temperature.named_parameters():
        state[f"decoder.attention.temperature.{name}"] = torch.zeros_like(param)
    model.load_state_dict(state)
    src, lengths, prev = random_batch(plain, LENGTHS)
    assert torch.equal(forward(plain, src, lengths, prev)[0], forward(model, src, lengths, prev)[0])


def test_sact_mlp_form_by_hand():
    """--sact-form mlp: beta = tanh(W_2 dropout(selu(W_1 [c; s; e] + b_1)) + b_2) (dropout off
    in eval), its hidden size the attention size."""
    model = build_model("lstm_sact", sact_form="mlp", sact_embedding=True, sact_dropout=0.3).eval()
    temperature = model.decoder.attention.temperature
    assert temperature.hidden.out_features == model.decoder.attention.query_dim
    query = torch.randn(3, model.decoder.attention.query_dim)
    context = torch.randn(3, model.decoder.attention.context_dim)
    embed = torch.randn(3, model.decoder.attention.embed_dim)
    inputs = torch.cat([context, query, embed], dim=-1)
    hidden = torch.nn.functional.selu(inputs @ temperature.hidden.weight.T + temperature.hidden.bias)
    beta = torch.tanh(hidden @ temperature.out.weight.T + temperature.out.bias).squeeze(-1)
    torch.testing.assert_close(temperature(query, context, embed), 4.0**beta)
    model.train()  # dropout on the hidden layer: two draws differ, the mean stays near
    first, second = temperature(query, context, embed), temperature(query, context, embed)
    assert not torch.equal(first, second)


@pytest.mark.parametrize("flags", [{"sact_form": "mlp"}, {"sact_embedding": True, "sact_dropout": 0.2}])
def test_sact_variants_train_every_parameter(flags):
    model = build_model("lstm_sact", **flags).train()
    src, lengths, prev = random_batch(model, LENGTHS)
    logits, _ = forward(model, src, lengths, prev)
    logits.logsumexp(-1).sum().backward()
    for name, param in model.decoder.attention.temperature.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_sact_linear_dropout_drops_inputs_in_training_only():
    module = SelfAdaptiveTemperature(context_dim=8, query_dim=8, lam=4.0, dropout=0.5)
    query, context = torch.randn(4, 8), torch.randn(4, 8)
    module.eval()
    beta = torch.tanh(context @ module.context_proj.weight.T + query @ module.state_proj.weight.T).squeeze(-1)
    torch.testing.assert_close(module(query, context), 4.0**beta)
    module.train()
    torch.manual_seed(0)
    assert not torch.allclose(module(query, context), 4.0**beta)


def test_alignment_by_word_hand_values(tmp_path, capsys):
    """analysis alignment-by-word: each output step's soft alignment (A- line) under the class
    of the H- token it emitted, EOS apart; hand values: 'the' (function) one-hot, 'cat' and
    'sat' (content) uniform over 2 and peak 0.75, EOS peak 0.6."""
    from fairseq_vision_attn import analysis

    gen = tmp_path / "gen.txt"
    gen.write_text(
        "S-0\tx y\nH-0\t-0.1\tthe cat\nA-0\t1.0,0.0 0.5,0.5 0.4,0.6\n"
        "S-1\tx y\nH-1\t-0.2\tsat\nA-1\t0.25,0.75 0.6,0.4\n"
    )
    groups = analysis.alignment_by_word(str(gen), {"the"})
    assert groups["function"] == [[1.0, 0.0]]
    assert groups["content"] == [[0.5, 0.5], [0.25, 0.75]]
    assert groups["</s>"] == [[0.4, 0.6], [0.6, 0.4]]
    dictionary = tmp_path / "dict.txt"
    dictionary.write_text("the 10\ncat 3\nsat 2\n")
    analysis.main(
        ["alignment-by-word", "--generate", str(gen), "--dict", str(dictionary), "--function-words", "1"]
    )
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert rows[1] == ["function", "1", "1.000", "0.000", "1.000"]
    # content: peaks 0.5 and 0.75; entropies 1 and H(0.25, 0.75) / log 2 = 0.811; one peak > 0.5
    assert rows[2] == ["content", "2", "0.625", "0.906", "0.500"]
    assert rows[3][:3] == ["</s>", "2", "0.600"]
    gen.write_text("S-0\tx y\nH-0\t-0.1\tthe cat\nA-0\t1.0,0.0 0.5,0.5\n")  # EOS's step missing
    with pytest.raises(SystemExit) as exit_:
        analysis.main(["alignment-by-word", "--generate", str(gen), "--dict", str(dictionary)])
    assert exit_.value.code == 2 and "2 alignment steps for 3 output tokens" in capsys.readouterr().err
