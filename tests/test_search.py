"""fairseq's beam search with beam 1 equals a greedy loop written by hand, for every arch."""

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from .conftest import build_model, our_archs, random_batch

MAX_LEN = 9


@torch.no_grad()
def greedy(model, src, length):
    """Greedy decoding of one sentence: argmax until EOS, EOS forced at MAX_LEN and banned at
    the first step (fairseq's min_len = 1)."""
    eos = model.decoder.dictionary.eos()
    pad = model.decoder.dictionary.pad()
    encoder_out = model.encoder(src, torch.tensor([length]))
    tokens = torch.tensor([[eos]])
    state, total = {}, 0.0
    for step in range(MAX_LEN + 1):
        logits, _ = model.decoder(tokens, encoder_out=encoder_out, incremental_state=state)
        lprobs = torch.log_softmax(logits[0, -1].float(), dim=-1)
        lprobs[pad] = float("-inf")
        if step == 0:
            lprobs[eos] = float("-inf")
        best = eos if step == MAX_LEN else int(lprobs.argmax())
        total += float(lprobs[best])
        tokens = torch.cat([tokens, torch.tensor([[best]])], dim=1)
        if best == eos:
            break
    return tokens[0, 1:], total


@pytest.mark.parametrize("arch", our_archs())
def test_beam_one_equals_greedy(arch):
    model = build_model(arch, seed=1)
    lengths = [6, 2, 4]
    src, lengths_t, _ = random_batch(model, lengths, seed=5)
    generator = SequenceGenerator(
        [model], model.decoder.dictionary, beam_size=1, max_len_a=0, max_len_b=MAX_LEN
    )
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths_t}}
    hypos = generator.generate([model], sample)
    for i, length in enumerate(lengths):
        expected, score = greedy(model, src[i : i + 1, -length:], length)
        assert torch.equal(hypos[i][0]["tokens"], expected)
        assert hypos[i][0]["score"].item() == pytest.approx(score / len(expected), abs=1e-4)
