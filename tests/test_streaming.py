"""The streaming archs (lstm_monotonic, lstm_mocha, lstm_milk, lstm_waitk) and the latency
criterion, at the model level: the policy never depends on unread source, hard delays are
valid, noise is training-only, the head starts by reading, lambda = 0 is plain cross-entropy."""

import pytest
import torch
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

from fairseq_vision_attn.attention.waitk import waitk_delays
from fairseq_vision_attn.criterions.latency_augmented_cross_entropy import (
    LatencyAugmentedCrossEntropyCriterion,
)
from fairseq_vision_attn.errors import VisionAttnError
from fairseq_vision_attn.latency import average_proportion, differentiable_average_lagging

from .conftest import FakeTask, build_model, random_batch

STREAMING = ["lstm_monotonic", "lstm_mocha", "lstm_milk", "lstm_waitk"]
HEADED = ["lstm_monotonic", "lstm_mocha", "lstm_milk"]


def teacher_forced(model, src, lengths, prev):
    logits, extra = model(src, lengths, prev)
    return logits, extra["attention_extras"]["delay"]


@pytest.mark.parametrize("arch", STREAMING)
def test_output_before_reading_j_does_not_depend_on_the_source_after_j(arch):
    """Replace (and lengthen) the source after position j: every target step whose delay is
    <= j keeps its output distribution and its delay exactly."""
    model = build_model(arch, seed=3, monotonic_energy_bias_init=0.0, mocha_chunk_size=2, waitk_lagging=2)
    src, lengths, prev = random_batch(model, [9], tgt_len=8, seed=1)
    with torch.no_grad():
        logits, delays = teacher_forced(model, src, lengths, prev)
    assert delays.min() < 9, "the test needs a head that stops before the end"
    g = torch.Generator().manual_seed(7)
    for j in range(1, 9):
        tail = torch.randint(4, len(model.encoder.dictionary), (1, 4), generator=g)
        other = torch.cat([src[:, :j], tail, src[:, -1:]], dim=1)  # new tokens after j, + EOS
        with torch.no_grad():
            other_logits, other_delays = teacher_forced(model, other, torch.tensor([other.size(1)]), prev)
        written = int((delays[0] <= j).sum())  # steps written before reading j + 1
        assert torch.equal(other_delays[0, :written], delays[0, :written]), (j, delays, other_delays)
        torch.testing.assert_close(other_logits[0, :written], logits[0, :written], rtol=0, atol=0)


@pytest.mark.parametrize("arch", STREAMING)
def test_hard_delays_are_nondecreasing_and_within_the_source(arch):
    model = build_model(arch, seed=4, monotonic_energy_bias_init=0.0, waitk_lagging=2, waitk_rate=1.5)
    lengths = [7, 3, 5, 1]
    src, lengths_t, prev = random_batch(model, lengths, tgt_len=9, seed=2)
    with torch.no_grad():
        _, delays = teacher_forced(model, src, lengths_t, prev)
    for b, n in enumerate(lengths):
        d = delays[b]
        assert torch.all(d[1:] >= d[:-1]) and d.min() >= 1 and d.max() <= n, (arch, n, d)
        if arch == "lstm_waitk":
            expected = waitk_delays(torch.arange(1, 10), torch.tensor(n), 2, 1.5).to(d.dtype)
            assert torch.equal(d, expected)


@pytest.mark.parametrize("arch", HEADED)
def test_noise_only_in_training(arch):
    model = build_model(arch, monotonic_noise_var=4.0)
    src, lengths, prev = random_batch(model, [6, 4], seed=3)
    model.train()
    first, _ = teacher_forced(model, src, lengths, prev)
    second, _ = teacher_forced(model, src, lengths, prev)
    assert not torch.allclose(first, second)
    quiet = build_model(arch, monotonic_noise_var=0.0).train()
    a, _ = teacher_forced(quiet, src, lengths, prev)
    b, _ = teacher_forced(quiet, src, lengths, prev)
    assert torch.equal(a, b)
    model.eval()
    a, _ = teacher_forced(model, src, lengths, prev)
    b, _ = teacher_forced(model, src, lengths, prev)
    assert torch.equal(a, b)


@pytest.mark.parametrize("arch", HEADED)
def test_initial_energy_bias_makes_the_head_read_first(arch):
    """With the default r = -4 every energy starts below 0: the hard head reads the whole
    source, and the expected head (training) is past the middle after the first step."""
    model = build_model(arch)
    src, lengths, prev = random_batch(model, [8, 5], seed=4)
    with torch.no_grad():
        _, delays = teacher_forced(model, src, lengths, prev)
        assert torch.equal(delays, lengths.unsqueeze(1).expand_as(delays).to(delays.dtype))
        model.train()
        model.decoder.attention.noise_var = 0.0
        _, expected = teacher_forced(model, src, lengths, prev)
    assert torch.all(expected[:, 0] > lengths / 2)


def test_milk_is_global_attention_with_the_head_at_the_end_and_one_token_with_it_at_the_start():
    model = build_model("lstm_milk", monotonic_noise_var=0.0).train()
    src, lengths, prev = random_batch(model, [6, 4], seed=5)
    attention = model.decoder.attention
    with torch.no_grad():
        attention.energy.r.fill_(-60.0)  # p ~ 0: the head reaches the end (mass preservation)
        _, extra = model(src, lengths, prev)
        weights = extra["attn"][0]
        encoder_out = model.encoder(src, lengths)
        keys = attention.scorer.keys(encoder_out["encoder_out"][0])
        pad = encoder_out["encoder_padding_mask"][0]
        # the first step's query is h_0, the same for every sentence
        query = torch.tanh(model.decoder.init_hidden).expand(2, -1)
        soft = torch.softmax(attention.scorer.scores(query, keys).masked_fill(pad, float("-inf")), -1)
        torch.testing.assert_close(weights[:, 0], soft, rtol=1e-5, atol=1e-6)
        attention.energy.r.fill_(60.0)  # p ~ 1: the head never leaves the first token
        _, extra = model(src, lengths, prev)
        one_hot = torch.zeros_like(extra["attn"][0])
        one_hot[..., 0] = 1
        torch.testing.assert_close(extra["attn"][0], one_hot)


def make_sample(model, lengths, tgt_len, seed):
    src, src_lengths, prev = random_batch(model, lengths, tgt_len=tgt_len, seed=seed)
    target = torch.cat([prev[:, 1:], torch.full((len(lengths), 1), model.decoder.dictionary.eos())], dim=1)
    target[1, -2:] = model.decoder.dictionary.pad()  # a shorter target in the batch
    return {
        "net_input": {"src_tokens": src, "src_lengths": src_lengths, "prev_output_tokens": prev},
        "target": target,
        "ntokens": int(target.ne(model.decoder.dictionary.pad()).sum()),
    }


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("arch", STREAMING)
def test_latency_weight_zero_is_exactly_cross_entropy_and_lambda_adds_dal(arch):
    model = build_model(arch, monotonic_noise_var=0.0).train()
    task = FakeTask(model.encoder.dictionary, model.decoder.dictionary)
    sample = make_sample(model, [7, 4, 5], tgt_len=6, seed=6)
    plain = LabelSmoothedCrossEntropyCriterion(task, False, 0.1)
    ours = LatencyAugmentedCrossEntropyCriterion(task, False, 0.1, latency_weight=0.0)
    loss_plain, _, _ = plain(model, sample)
    loss_plain.backward()
    grads_plain = grads(model)
    model.zero_grad()
    loss_ours, _, log = ours(model, sample)
    loss_ours.backward()
    assert torch.equal(loss_ours, loss_plain)
    for name, grad in grads(model).items():
        assert torch.equal(grad, grads_plain[name]), name
    assert log["dal_sum"] > 0 and log["ap_sum"] > 0

    weighted = LatencyAugmentedCrossEntropyCriterion(task, False, 0.1, latency_weight=0.5)
    loss_weighted, _, log = weighted(model, sample)
    _, delays = teacher_forced(
        model, *[sample["net_input"][k] for k in ("src_tokens", "src_lengths", "prev_output_tokens")]
    )
    dal = differentiable_average_lagging(delays, sample["net_input"]["src_lengths"], sample["target"].ne(1))
    torch.testing.assert_close(loss_weighted, loss_plain + 0.5 * dal.sum())
    torch.testing.assert_close(log["latency_loss_sum"], 0.5 * dal.sum())


def test_latency_warmup_leaves_the_term_out_of_the_first_training_updates():
    """--latency-warmup-updates N: in training, before update N the loss is plain cross-entropy
    bit for bit (as lambda = 0), from update N on it is the lambda loss; in evaluation the term is
    always there; a negative N, or a task that does not pass the update count, is refused."""
    model = build_model("lstm_milk", seed=7)
    task = FakeTask(model.encoder.dictionary, model.decoder.dictionary)
    with pytest.raises(VisionAttnError, match="needs --task translation_vision_attn"):
        LatencyAugmentedCrossEntropyCriterion(task, False, 0.0, latency_weight=0.5, latency_warmup_updates=3)
    task.passes_num_updates_to_criterion = True  # as TranslationVisionAttnTask
    sample = make_sample(model, [6, 4], tgt_len=5, seed=7)
    plain = LatencyAugmentedCrossEntropyCriterion(task, False, 0.0, latency_weight=0.0)
    full = LatencyAugmentedCrossEntropyCriterion(task, False, 0.0, latency_weight=0.5)
    warm = LatencyAugmentedCrossEntropyCriterion(
        task, False, 0.0, latency_weight=0.5, latency_warmup_updates=3
    )
    for training in (True, False):
        model.train(training)
        for update in (0, 2, 3, 10):
            warm.set_num_updates(update)
            expected = plain if training and update < 3 else full
            torch.manual_seed(update)  # the same training noise for both
            loss, _, log = warm(model, sample)
            torch.manual_seed(update)
            reference, _, reference_log = expected(model, sample)
            assert torch.equal(loss, reference), (training, update)
            assert torch.equal(log["latency_loss_sum"], reference_log["latency_loss_sum"])
    with pytest.raises(VisionAttnError, match="--latency-warmup-updates"):
        LatencyAugmentedCrossEntropyCriterion(task, False, 0.0, latency_warmup_updates=-1)


@pytest.mark.parametrize("arch", HEADED)
def test_expected_delay_gradient_reaches_the_monotonic_energy(arch):
    """The latency term alone trains the head: raising the bias r stops it earlier."""
    model = build_model(arch, monotonic_noise_var=0.0).train()
    sample = make_sample(model, [7, 4, 5], tgt_len=6, seed=7)
    net_input = sample["net_input"]
    _, delays = teacher_forced(
        model, net_input["src_tokens"], net_input["src_lengths"], net_input["prev_output_tokens"]
    )
    # AP sums every delay (DAL's gradient goes only to the step that sets the running maximum,
    # here the first, whose query h_0 is the same for every sentence)
    average_proportion(delays, net_input["src_lengths"], sample["target"].ne(1)).sum().backward()
    energy = model.decoder.attention.energy
    assert energy.r.grad < 0
    for name, param in energy.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_latency_criterion_refuses_bad_settings_and_non_streaming_models():
    model = build_model("lstm_global")
    task = FakeTask(model.encoder.dictionary, model.decoder.dictionary)
    with pytest.raises(VisionAttnError, match="--latency-weight"):
        LatencyAugmentedCrossEntropyCriterion(task, False, 0.0, latency_weight=-0.1)
    with pytest.raises(VisionAttnError, match="--latency-weight"):
        LatencyAugmentedCrossEntropyCriterion(task, False, 0.0, latency_weight=float("nan"))
    with pytest.raises(VisionAttnError, match="dal, ap"):
        LatencyAugmentedCrossEntropyCriterion(task, False, 0.0, latency_metric="al")
    criterion = LatencyAugmentedCrossEntropyCriterion(task, False, 0.0, latency_weight=0.2)
    with pytest.raises(VisionAttnError, match="needs a streaming arch"):
        criterion(model, make_sample(model, [5, 3], tgt_len=4, seed=8))


def test_streaming_attention_refuses_a_bidirectional_encoder():
    with pytest.raises(VisionAttnError, match="--encoder-bidirectional"):
        build_model("lstm_milk", encoder_bidirectional=True)


@pytest.mark.parametrize("form", ["normalized", "unnormalized"])
def test_monotonic_energy_scale_init_sets_the_scale_and_nothing_else(form):
    """--monotonic-energy-scale-init G: g = G (normalized) or ||v|| = G (unnormalized), v's
    direction and every other parameter as without the flag; without it g = 1/sqrt(attn_dim)."""
    plain = build_model("lstm_milk", seed=5, monotonic_energy=form).decoder.attention
    scaled = build_model("lstm_milk", seed=5, monotonic_energy=form, monotonic_energy_scale_init=2.5)
    scaled = scaled.decoder.attention
    if form == "normalized":
        assert plain.energy.g.item() == pytest.approx(plain.attn_dim**-0.5) and scaled.energy.g.item() == 2.5
        assert torch.equal(plain.energy.v, scaled.energy.v)
    else:
        assert scaled.energy.v.norm().item() == pytest.approx(2.5)
        torch.testing.assert_close(scaled.energy.v / 2.5, plain.energy.v / plain.energy.v.norm())
    others = [(n, p) for n, p in plain.named_parameters() if n not in ("energy.g", "energy.v")]
    assert others and all(torch.equal(p, scaled.get_parameter(n)) for n, p in others)


@pytest.mark.parametrize("form", ["normalized", "unnormalized"])
def test_monotonic_energy_ceiling_is_the_largest_energy_any_input_gives(form):
    """MonotonicEnergy.ceiling: a thousand random queries and keys, however large, stay below
    it, and a key bias that saturates tanh to sign(v) reaches it."""
    energy = build_model("lstm_milk", seed=6, monotonic_energy=form, monotonic_energy_scale_init=0.7)
    energy = energy.decoder.attention.energy
    ceiling = energy.ceiling()
    torch.manual_seed(0)
    queries, keys_in = (
        torch.randn(1000, energy.query_proj.in_features),
        torch.randn(1000, 3, energy.key_proj.in_features),
    )
    with torch.no_grad():
        assert energy.energies(queries * 10, energy.keys(keys_in * 10)).max().item() <= ceiling + 1e-6
        energy.key_proj.bias.copy_(100 * torch.sign(energy.v))  # tanh(100 sign(v) + ...) = sign(v)
        energy.key_proj.weight.zero_()
        energy.query_proj.weight.zero_()
        top = energy.energies(queries[:1], energy.keys(keys_in[:1])).max().item()
    # sign(v) . (g v/||v||) = g ||v||_1/||v||, plus r; computed here from the parameters
    direction = energy.v.detach() * (1.0 if energy.g is None else energy.g.item() / energy.v.norm().item())
    expected = sum(abs(x) for x in direction.tolist()) + energy.r.item()
    assert top == pytest.approx(ceiling, abs=1e-5) and ceiling == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("form", ["normalized", "unnormalized"])
def test_monotonic_energy_forms_by_hand(form):
    """--monotonic-energy: g v^T/||v|| tanh(W q + V h + b) + r (MILk Eq. 7) or, unnormalized,
    v^T tanh(W q + V h + b) + r with no g; the per-position energy of the hard head agrees, and
    training reaches every parameter of the head."""
    model = build_model("lstm_milk", seed=2, monotonic_energy=form)
    energy = model.decoder.attention.energy
    assert (energy.g is None) == (form == "unnormalized")
    query, keys_in = (
        torch.randn(3, energy.query_proj.in_features),
        torch.randn(3, 5, energy.key_proj.in_features),
    )
    hidden = torch.tanh(
        keys_in @ energy.key_proj.weight.T
        + energy.key_proj.bias
        + (query @ energy.query_proj.weight.T)[:, None]
    )
    v = energy.v if form == "unnormalized" else energy.g * energy.v / energy.v.norm()
    expected = hidden @ v + energy.r
    keys = energy.keys(keys_in)
    torch.testing.assert_close(energy.energies(query, keys), expected)
    index = torch.tensor([0, 4, 2])
    at = energy.energy_at(energy.query_proj(query), keys, index)
    torch.testing.assert_close(at, expected[torch.arange(3), index])
    model.train()
    src, lengths, prev = random_batch(model, [6, 3, 5])
    logits, _ = model.decoder(prev, encoder_out=model.encoder(src, lengths))
    logits.logsumexp(-1).sum().backward()
    for name, param in energy.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
