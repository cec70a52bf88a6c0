"""AP, AL, DAL, LAAL, ATD (fairseq_vision_attn/latency.py): the MILk paper's worked examples, wait-k, hand
values, differentiability, batching, and agreement with SimulEval's scorers."""

import math
import random

import pytest
import torch

from fairseq_vision_attn.attention.waitk import waitk_delays
from fairseq_vision_attn.latency import (
    average_lagging,
    average_proportion,
    average_token_delay,
    corpus_latency,
    differentiable_average_lagging,
    latency_scores,
)


def test_paper_tables_1_and_2_wait3_on_four_tokens():
    """MILk Table 1: wait-3, |x| = |y| = 4, g = 3,4,4,4 -> AL 3 (tau = 2: (3 + 3) / 2).
    Table 2: g' = 3,4,5,6 -> DAL = (3 + 3 + 3 + 3) / 4 = 3."""
    scores = latency_scores([3, 4, 4, 4], src_len=4)
    assert scores["AL"] == pytest.approx(3.0)
    assert scores["DAL"] == pytest.approx(3.0)
    assert scores["AP"] == pytest.approx(15 / 16)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("n", [6, 9, 20])
def test_waitk_on_equal_lengths_has_al_and_dal_k(k, n):
    delays = waitk_delays(torch.arange(1, n + 1), torch.tensor(n), k, 1.0).tolist()
    assert delays[:2] == [min(k, n), min(k + 1, n)]
    scores = latency_scores(delays, src_len=n)
    assert scores["AL"] == pytest.approx(k)
    assert scores["DAL"] == pytest.approx(k)


def test_average_proportion_by_hand():
    assert latency_scores([1, 2, 3], 3)["AP"] == pytest.approx(6 / 9)
    assert latency_scores([5, 5, 5, 5], 5)["AP"] == pytest.approx(1.0)  # offline: read all first
    assert latency_scores([1, 1], 4)["AP"] == pytest.approx(2 / 8)
    assert latency_scores([2, 4], 4, ref_len=4)["AP"] == pytest.approx(6 / 16)


def test_offline_decoding_lags_by_the_whole_source():
    """Reading everything first: AL = DAL = |x| (tau = 1 for AL)."""
    scores = latency_scores([6] * 6, 6)
    assert scores["AL"] == pytest.approx(6.0)
    # g' = 6, 7, ..., 11 and DAL = mean(g'_i - (i - 1)) = 6 when gamma = 1
    assert scores["DAL"] == pytest.approx(6.0)


def test_dal_enforces_the_minimum_delay_between_writes():
    """|x| = 2, |y| = 4 (gamma = 2): writes at delays 1, 1, 1, 2 -> g' = 1, 1.5, 2, 2.5,
    so DAL = mean(g'_i - (i-1)/2) = 1; AL stops at tau = 4: (1 + 0.5 + 0 + 0.5) / 4."""
    scores = latency_scores([1, 1, 1, 2], 2)
    assert scores["DAL"] == pytest.approx(1.0)
    assert scores["AL"] == pytest.approx(0.5)
    scores = latency_scores([4] * 8, 4)
    assert scores["DAL"] == pytest.approx(4.0)
    assert scores["AL"] == pytest.approx(4.0)


def test_batched_with_padding_equals_one_at_a_time_and_is_differentiable():
    rng = random.Random(0)
    rows = []
    for _ in range(5):
        src_len, tgt_len = rng.randint(1, 9), rng.randint(1, 7)
        delays = sorted(rng.uniform(1, src_len) for _ in range(tgt_len))
        rows.append((delays, src_len))
    width = max(len(d) for d, _ in rows)
    delays = torch.zeros(5, width, dtype=torch.float64)
    mask = torch.zeros(5, width, dtype=torch.bool)
    for b, (d, _) in enumerate(rows):
        delays[b, : len(d)] = torch.tensor(d, dtype=torch.float64)
        mask[b, : len(d)] = True
    src = torch.tensor([s for _, s in rows], dtype=torch.float64)
    delays.requires_grad_(True)
    batched = {
        "AL": average_lagging(delays, src, mask),
        "AP": average_proportion(delays, src, mask),
        "DAL": differentiable_average_lagging(delays, src, mask),
    }
    for b, (d, s) in enumerate(rows):
        single = latency_scores(d, s)
        for name, values in batched.items():
            assert values[b].item() == pytest.approx(single[name]), (name, d, s)
    (batched["DAL"].sum() + batched["AP"].sum() + batched["AL"].sum()).backward()
    assert torch.isfinite(delays.grad).all()
    assert (delays.grad[~mask] == 0).all() and (delays.grad[mask] != 0).any()
    assert torch.autograd.gradcheck(
        lambda d: differentiable_average_lagging(d, src, mask),
        (delays.detach().clone().requires_grad_(True),),
    )


def _simuleval_text_instance(delays, src_len, ref_len):
    """A SimulEval 1.1.4 text-to-text instance carrying only what its scorers read."""
    from simuleval.evaluator.instance import TextToTextInstance

    instance = object.__new__(TextToTextInstance)
    instance.delays = delays
    instance.reference = None if ref_len is None else " ".join(["w"] * ref_len)
    instance.source = ["w"] * src_len
    instance.latency_unit = "word"
    instance.metrics = {}
    return instance


def _latency_cases(rng):
    """Random non-decreasing delays, plus the edge cases: all delays = |x|, a hypothesis longer
    than the reference, one token, a source read whole before the first write."""
    for _ in range(200):
        src_len, hyp_len, ref_len = rng.randint(1, 15), rng.randint(1, 15), rng.randint(1, 15)
        yield sorted(rng.randint(1, src_len) for _ in range(hyp_len)), src_len, ref_len
    yield [4, 4, 4], 4, 3
    yield [4] * 9, 4, 3  # longer than the reference, all at |x|
    yield [1, 2, 3, 3, 3, 3, 3], 3, 2
    yield [2], 5, 6
    yield [5, 5], 5, 1


def test_agrees_with_simuleval_scorers():
    scorers = pytest.importorskip(
        "simuleval.evaluator.scorers.latency_scorer",
        reason="SimulEval is not installed (pip install .[simuleval])",
    )
    rng = random.Random(1)
    for delays, src_len, ref_len in _latency_cases(rng):
        for use_ref in (False, True):
            instance = _simuleval_text_instance(delays, src_len, ref_len if use_ref else None)
            ours = latency_scores(delays, src_len, ref_len=ref_len if use_ref else None)
            for name in ("AL", "AP", "DAL", "LAAL"):
                theirs = scorers.LATENCY_SCORERS_DICT[name](use_ref_len=use_ref).compute(instance)
                assert ours[name] == pytest.approx(theirs), (name, delays, src_len, ref_len, use_ref)
            theirs = scorers.LATENCY_SCORERS_DICT["ATD"]()({0: instance})
            assert ours["ATD"] == pytest.approx(theirs), ("ATD", delays, src_len)


def test_corpus_means_skip_empty_hypotheses_as_simuleval_does():
    scorers = pytest.importorskip(
        "simuleval.evaluator.scorers.latency_scorer",
        reason="SimulEval is not installed (pip install .[simuleval])",
    )
    sentences = [([1, 3, 3], 3, 4), ([], 5, 2), ([2, 2, 4, 4, 4, 4], 4, 3)]
    instances = {i: _simuleval_text_instance(*sentence) for i, sentence in enumerate(sentences)}
    ours = corpus_latency([latency_scores(d, x, ref_len=r) for d, x, r in sentences])
    assert math.isnan(latency_scores([], 5, ref_len=2)["LAAL"])
    for name in ("AL", "AP", "DAL", "LAAL", "ATD"):
        assert ours[name] == pytest.approx(scorers.LATENCY_SCORERS_DICT[name]()(instances)), name


def test_laal_and_atd_by_hand():
    # LAAL: the 6-token hypothesis of a 3-token reference lags as if |y| = 6 (AL would use 3 with
    # the reference: 1/tau sum (g_i - (i-1)|x|/|y|)); without a reference LAAL = AL.
    assert latency_scores([1, 2, 2, 3, 3, 3], 3, ref_len=3)["LAAL"] == pytest.approx((1 + 1.5 + 1 + 1.5) / 4)
    assert latency_scores([1, 2, 2, 3, 3, 3], 3, ref_len=3)["AL"] == pytest.approx((1 + 1 + 0 + 0) / 4)
    assert latency_scores([1, 2, 3], 3, ref_len=6)["LAAL"] == pytest.approx((1 + 1.5 + 2) / 3)
    no_ref = latency_scores([1, 2, 2, 3], 3)
    assert no_ref["LAAL"] == no_ref["AL"]
    # ATD: delays [2, 2, 3] on 3 source tokens: target tokens end at 3, 4, 5 and are matched to
    # source tokens 1, 2, 3 (ending at 1, 2, 3): every token is 2 behind.
    assert latency_scores([2, 2, 3], 3)["ATD"] == pytest.approx(2.0)
    # offline: all n source tokens read, then n tokens written: token i ends at n + i, matched to i
    for n in (1, 4, 9):
        assert latency_scores([n] * n, n)["ATD"] == pytest.approx(n)
    # wait-1 on equal lengths: each target token ends one unit after its source token
    assert latency_scores([1, 2, 3, 4], 4)["ATD"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="non-decreasing"):
        average_token_delay([2, 1])


def test_waitk_schedule_with_rate_and_short_sources():
    assert waitk_delays(torch.arange(1, 8), torch.tensor(20), 2, 1.1).tolist() == [2, 2, 3, 4, 5, 6, 7]
    assert waitk_delays(torch.tensor([12, 13]), torch.tensor(20), 2, 1.1).tolist() == [12, 12]  # 11/1.1 = 10
    assert waitk_delays(torch.arange(1, 5), torch.tensor(2), 5, 1.0).tolist() == [2, 2, 2, 2]  # |x| < k
