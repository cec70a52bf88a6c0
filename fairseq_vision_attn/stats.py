"""Per-sentence and corpus statistics of decoding (window sizes, later delays, temperatures).

Two sources, both fed by the attention modules' per-step ``extras``:

- **search statistics** (:class:`SearchStats`): every decoder step of the search, over every
  live beam hypothesis. Shu & Nakayama (sec. 5) average the window size this way ("further
  averaged over the number of hypotheses considered in each step").
- **sentence statistics**: one value per target token of the chosen hypothesis, EOS included.
  Simultaneous decoding is greedy and keeps them as it decodes; after a beam search they come
  from the task's ``forced_statistics``, the chosen hypothesis re-scored with teacher forcing (the
  decoder is deterministic given the prefix, so these are exactly the values the search computed
  along it). That costs a second decoder pass, so the task runs it only for ``--stats-output``.

This module is the bookkeeping and the ``--stats-output`` file format, without torch:
``python -m fairseq_vision_attn.report`` reads the files it defines and starts in a fraction of a
second.
"""

import json
import math
from collections import defaultdict
from typing import Dict

#: extras key -> JSON key of the per-sentence list in --stats-output
LIST_NAMES = {
    "window_size": "window_sizes",
    "window_start": "window_starts",
    "temperature": "temperatures",
    "delay": "delays",
}


#: per-token lists whose corpus average means nothing (positions, not amounts)
NOT_AVERAGED = {"window_starts", "length_limited"}


def list_name(key: str) -> str:
    return LIST_NAMES.get(key, key)


class SearchStats:
    """Running sums of each per-step statistic over all hypotheses the search considered."""

    def __init__(self):
        self.sums = defaultdict(float)
        self.counts = defaultdict(int)

    def observe(self, extras):
        """``extras``: {key: tensor}, the attention modules' per-step values."""
        for key, value in extras.items():
            if value.dim() == 1:  # batch (per hypothesis); batch x src_len extras are skipped
                self.sums[key] += float(value.float().sum())
                self.counts[key] += value.numel()

    def means(self) -> Dict[str, float]:
        return {key: self.sums[key] / self.counts[key] for key in self.sums if self.counts[key]}


class CorpusStats:
    """Averages over written sentences: lengths and the mean of each per-token statistic."""

    def __init__(self):
        self.sentences = 0
        self.sums = defaultdict(float)  # per-sentence scalars (src_len, hypo_len, AL, ...)
        self.step_sums = defaultdict(float)  # per-token lists, summed over all tokens
        self.step_counts = defaultdict(int)

    def add(self, row: dict):
        self.sentences += 1
        for key, value in row.items():
            if key == "id":
                continue
            if key in NOT_AVERAGED:
                continue
            if isinstance(value, list):
                self.step_sums[key] += float(sum(value))
                self.step_counts[key] += len(value)
            elif isinstance(value, (int, float)) and math.isfinite(value):
                self.sums[key] += float(value)

    def summary(self) -> Dict[str, float]:
        out = {key: total / self.sentences for key, total in self.sums.items()} if self.sentences else {}
        for key, total in self.step_sums.items():
            if self.step_counts[key]:
                out[f"mean {key}"] = total / self.step_counts[key]
        return out


def format_summary(corpus: CorpusStats, search: SearchStats) -> str:
    """One line for the end of fairseq-generate."""
    parts = [f"sentences {corpus.sentences}"]
    for key, value in corpus.summary().items():
        parts.append(f"{key} {value:.3f}")
    for key, value in search.means().items():
        parts.append(f"beam-avg {key} {value:.3f}")
    return "| vision-attn stats: " + " | ".join(parts)


def write_row(handle, row: dict):
    handle.write(json.dumps(row, ensure_ascii=False) + "\n")
