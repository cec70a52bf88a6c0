"""Simultaneous (streaming) greedy decoding of whole batches, for the streaming archs.

``fairseq-generate --task translation_vision_attn`` uses :class:`SimultaneousGenerator` for
every checkpoint whose attention is streaming (``lstm_monotonic``, ``lstm_mocha``,
``lstm_milk``, ``lstm_waitk``); the MILk paper decodes all of them greedily. Per target token
the policy first READs (the hard head moves right, or wait-k's schedule advances) and then
WRITEs the argmax token; the delay g_i recorded with the token is the number of source tokens
read before it was written (1-indexed, the source EOS counts as a token, see
:mod:`.latency`).

**No look-ahead.** The encoder is unidirectional: its state h_j is a function of x_1..x_j only,
so encoding the batch once up front gives, for every j, exactly the states a token-by-token
encoder would have after reading j tokens. A decoding step then reads states only up to its
head: the monotonic head computes one energy at a time at its own position, and each
mechanism's context is masked to positions <= g_i. ``tests/test_simultaneous.py`` checks the
consequence on every arch: the tokens and delays written before reading position j do not
change when the source after j is replaced.

**Statistics.** Each hypothesis carries ``step_statistics``: every per-step statistic of the
attention (delays, window sizes ...) as the search computed it for the written token, so
``--stats-output`` needs no second decoding pass.

**Batches.** All sentences advance in lock step, one target token per step, each with its
own head; finished sentences leave the batch (the incremental state is index-selected), so a
batch costs about as many decoder steps as its longest output. ``--beam`` > 1 is ignored with
a warning: decoding is greedy, as in the paper.
"""

import logging
import math
from collections import defaultdict
from typing import Dict, List

import torch

from .latency import latency_scores
from .stats import list_name

logger = logging.getLogger(__name__)


def streaming_attention(model):
    """The model's attention mechanism if it is streaming, else None."""
    attention = getattr(getattr(model, "decoder", None), "attention", None)
    mechanism = getattr(attention, "mechanism", attention)
    return mechanism if getattr(mechanism, "streaming", False) else None


class SimultaneousGenerator:
    """Greedy simultaneous decoding; returns fairseq's hypothesis format plus ``delays``.

    Args:
        models: one model (ensembles are refused by the task).
        tgt_dict: the target dictionary.
        max_len_a, max_len_b: at most ``a * |x| + b`` target tokens per sentence (EOS forced at
            the limit, and the hypothesis marked ``length_limited``), as fairseq-generate's flags.
        min_len: EOS is banned before this many tokens (fairseq's default 1).
    """

    def __init__(self, models, tgt_dict, max_len_a: float = 0.0, max_len_b: int = 200, min_len: int = 1):
        self.model = models[0]
        self.tgt_dict = tgt_dict
        self.eos, self.pad = tgt_dict.eos(), tgt_dict.pad()
        self.max_len_a, self.max_len_b, self.min_len = max_len_a, max_len_b, min_len

    def cuda(self):
        return self

    @torch.no_grad()
    def generate(self, models, sample, prefix_tokens=None, constraints=None, bos_token=None, **kwargs):
        model = models[0] if models else self.model
        net_input = sample["net_input"]
        src_tokens, src_lengths = net_input["src_tokens"], net_input["src_lengths"]
        batch = src_tokens.size(0)
        device = src_tokens.device
        limits = (self.max_len_a * src_lengths.float() + self.max_len_b).floor().long().clamp(min=1)
        encoder_out = model.encoder(src_tokens, src_lengths)

        state: Dict = {}
        active = torch.arange(batch, device=device)  # rows of the original batch still writing
        last = torch.full((batch, 1), self.eos, dtype=torch.long, device=device)
        tokens: List[List[int]] = [[] for _ in range(batch)]
        scores: List[List[float]] = [[] for _ in range(batch)]
        delays: List[List[float]] = [[] for _ in range(batch)]
        statistics: List[Dict[str, List[float]]] = [defaultdict(list) for _ in range(batch)]
        cut = [False] * batch  # EOS forced by the length limit where the model would go on
        step = 0
        while active.numel() > 0:
            logits, extra = model.decoder(last, encoder_out=encoder_out, incremental_state=state)
            lprobs = torch.log_softmax(logits[:, -1].float(), dim=-1)
            lprobs[:, self.pad] = -math.inf
            if step < self.min_len:
                lprobs[:, self.eos] = -math.inf
            forced = limits[active] <= step + 1  # the last allowed token is EOS
            if bool(forced.any()):
                going_on = lprobs[forced].argmax(dim=-1) != self.eos
                for row in active[forced][going_on].tolist():
                    cut[row] = True
            # only EOS stays; the limit wins over --min-len (an EOS it banned scores 0 here)
            eos_score = lprobs[forced][:, self.eos].nan_to_num(neginf=0.0).unsqueeze(1)
            lprobs[forced] = torch.where(
                torch.arange(lprobs.size(1), device=device) == self.eos, eos_score, -math.inf
            )
            best_score, best = lprobs.max(dim=-1)
            step_delays = extra["attention_extras"]["delay"][:, -1]
            step_stats = {  # every per-step statistic of the written token (delays, windows ...)
                list_name(key): value[:, -1].float().tolist()
                for key, value in extra["attention_extras"].items()
                if value.dim() == 2
            }
            for i, (row, token, score, delay) in enumerate(
                zip(active.tolist(), best.tolist(), best_score.tolist(), step_delays.tolist())
            ):
                tokens[row].append(token)
                scores[row].append(score)
                delays[row].append(delay)
                for name, values in step_stats.items():
                    statistics[row][name].append(round(values[i], 4))
            step += 1
            keep = best.ne(self.eos)
            if not bool(keep.all()):
                order = keep.nonzero().squeeze(1)
                active = active[order]
                if active.numel() == 0:
                    break
                model.decoder.reorder_incremental_state(state, order)
                encoder_out = model.encoder.reorder_encoder_out(encoder_out, order)
                best = best[order]
            last = best.unsqueeze(1)

        hypos = []
        for i in range(batch):
            positional = torch.tensor(scores[i], device=device)
            src_len = int(src_lengths[i])
            hypos.append(
                [
                    {
                        "tokens": torch.tensor(tokens[i], dtype=torch.long, device=device),
                        "score": positional.sum() / max(len(tokens[i]), 1),
                        "positional_scores": positional,
                        "attention": None,
                        "alignment": None,
                        "delays": delays[i],
                        "step_statistics": dict(statistics[i]),
                        "latency": latency_scores(delays[i], src_len),
                        "length_limited": cut[i],
                    }
                ]
            )
        return hypos
