"""Analyses of decoded test sets: where SACT raises the temperature, and how far flexible
attention's threshold can cut the window on a corpus.

    python -m fairseq_vision_attn.analysis temperature-by-word --generate GEN --stats STATS \\
        --dict DATA_BIN/dict.TGT.txt [--function-words 50] [--min-count 20]
    python -m fairseq_vision_attn.analysis window-bound --stats STATS [--sigma 1.5] \\
        [--taus 0.3 0.5 0.8 1.0 1.2 1.6]
    python -m fairseq_vision_attn.analysis monotonic-mismatch --path CKPT --data DATA_BIN \\
        [--subset valid] [--noise-vars 0 4] [--monotonic-stop energy] [--context-shifts S ...] \\
        [--argmax-output FILE [--remove-bpe] [--tokenizer moses]]
    python -m fairseq_vision_attn.analysis teacher-forced --path CKPT --data DATA_BIN [--subset valid] \\
        [--argmax-output FILE [--remove-bpe] [--tokenizer moses]]
    python -m fairseq_vision_attn.analysis alignment-sharpness --generate GEN [GEN ...]
    python -m fairseq_vision_attn.analysis alignment-by-word --generate GEN \\
        --dict DATA_BIN/dict.TGT.txt [--function-words 50]
    python -m fairseq_vision_attn.analysis memory-slots --path CKPT --data DATA_BIN [--subset test]
    python -m fairseq_vision_attn.analysis bleu-by-length --generate NAME=GEN[:STATS] [...] \\
        [--edges 20 40 60 80] [--tokenize none] [--latency DAL] [--curve NAME,NAME,... [--curve-interval]]
    python -m fairseq_vision_attn.analysis attention-agreement --path CKPT --reference CKPT \\
        --data DATA_BIN [--subset valid]

**temperature-by-word** (Lin et al. 2018, sec. 4.2 / Fig. 2).

The paper reads its heatmaps as: the temperature rises on function words (prepositions,
pronouns, punctuation: no single source word to copy) and falls on content words. This
command measures that over a whole test set. Function words are approximated, language-
independently, by the ``--function-words`` most frequent types of the target dictionary
(closed-class words dominate any frequency list; for Japanese they are the particles, the
copula and inflection endings, and punctuation); every other type counts as a content word.
EOS (``</s>``) is reported apart.

**window-bound** (Shu & Nakayama 2017, sec. 3.1 / Table 1). The window a threshold tau leaves
is set in source positions: s with g(t) (s - p_{t-1})^2 / (2 sigma^2) < tau, i.e. at most
2 sigma sqrt(2 tau / g(t)) positions around the previous focus, whatever the sentence's length.
The share of the window it cuts therefore depends on how long the sentences are, and g(t) <= 1
(a sigmoid) bounds it from above. From a flexible model's ``--stats-output`` (its per-step
``g`` and ``focus``; decode with tau = inf to see its unconstrained path), this command
recomputes, for each tau, the window every step would score with the model's own g(t) and with
the strongest penalty g = 1 on the same focus path, as the decoder does (step 1 has no previous
focus and scores the whole sentence; at least one position per step), and the share of the
full window (every position at every step) each cuts. With g = 1 the cut is the most any
flexible model (this sigma) can reach on these sentences at that tau.

**monotonic-mismatch** (Arivazhagan et al. 2019, sec. 3; Raffel et al. 2017, sec. 2.3). A
monotonic, MoChA or MILk model trains on the expected alignment (noisy energies, soft stops)
and translates with the hard policy (stop at the first energy > 0). This command measures
what that switch costs a trained model on a subset, teacher-forced, dropout off: the NLL
(bits per target token, EOS included) and the mean DAL (on the reference length) under the
hard policy - what fairseq-validate reports for such a model - and under the expected
alignment at each ``--noise-vars`` (0: the clean expectation; the training variance: what the
latency loss saw). A hard NLL far above the expected one means the test-time model is not the
one training optimised; a DAL under training noise far from the hard DAL means the latency
weight buys a different latency than it appears to. The last column says why they part: the
share of the expected alignment's stopping mass on positions whose stopping probability (noise
free) is between 0.1 and 0.9, where "stop at the first p > 1/2" and the expectation disagree
(the training noise is meant to push every p to 0 or 1: MILk Eq. 11). A last comment line per
head gives its energy's scale and bias and the ceiling no input can lift the energy above
(tanh is bounded): the largest noise-free p the head can give anywhere. ``--context-shifts S``
adds a probe row per S: the hard policy with each context built as if the head had stopped S
positions later (negative: earlier): what a stop one position off costs the model. The last
column of every row is the teacher-forced top-1 accuracy (the share of reference tokens that are
the most probable word given the reference prefix); ``--argmax-output FILE`` writes the hard
policy's most probable words as a translation (``T-``/``H-``/``D-`` lines, BPE removed and
detokenized as fairseq-generate's ``--remove-bpe --tokenizer moses``) for ``report.py``: its BLEU
against greedy decoding's splits a gap between two models into the part there one step at a time
and the part that grows when each conditions on its own outputs.

**teacher-forced** (any checkpoint). The same teacher-forced figures for a model as it decodes
(dropout off, no head switched): NLL, top-1 accuracy and, for a model whose decoder reports its
delays (wait-k, the monotonic heads under their hard policy), the mean DAL; ``--argmax-output``
writes its choices as above. It sets a streaming model's choices beside the wait-k models' (and
an offline model's): whether a gap to the wait-k line is there one word at a time. Both commands
end the rows with the top-1 accuracy by kind of reference piece (monotonic-mismatch: the hard
policy's): a piece that begins a word, one that continues it (after a piece ending in subword-nmt's
``@@``: the rest of a word being spelled out), and EOS; then after a right and after a wrong
previous choice, with the mean lead there (source tokens read minus target tokens written) for a
model that reports its delays: whether a policy spends its lag where the model has just failed,
and whether the words it gets right there come in runs (what BLEU's longer n-grams count) or
alone.

**alignment-sharpness** and **memory-slots** (Britz et al. 2017, sec. 5). How sharply a model
looks, as three figures over a set of distributions over source positions: the mean peak
weight, the mean entropy divided by log(positions) (0: one position, 1: uniform), and the share
of distributions whose peak holds more than half the weight. ``alignment-sharpness`` reads the
soft alignments ``fairseq-generate --print-alignment soft`` prints (``A-`` lines; one
distribution per output step: global attention's weights, memory attention's alpha . beta);
``memory-slots`` runs a memory model's encoder over a subset and reads each slot's weights over
the sentence's positions (alpha's columns under ``--memory-normalize time``): a memory whose
slots each blend several positions can only mix blended contexts, however the decoder weighs them.
A comment line gives how far the slots are spread over the sentence: the mean share of its
positions that are the peak of at least one slot (what Britz's position encodings push up).

**alignment-by-word** (Lin et al. 2018, Fig. 2, for any model). The same three figures,
grouped by the word each output step emitted, as ``temperature-by-word`` groups SACT's
temperature (function words: the ``--function-words`` most frequent target types; ``</s>``
apart). It asks whether a model *without* a temperature already flattens its attention on
function words and sharpens it on content words, which is what SACT's temperature is for:
additive attention can, since its query moves the scores through tanh. Reads the ``H-`` and
``A-`` lines of ``fairseq-generate --print-alignment soft`` (one distribution per output token,
EOS included).

**bleu-by-length** (Britz et al. 2017, sec. 4.1 / Fig. 3b). Where a fixed-size memory loses
its BLEU: corpus BLEU of the sentences in each source-length bucket (source tokens of the
``S-`` line; ``--edges`` 20 40 gives 1-20, 21-40 and 41 and longer), one column per
fairseq-generate output, decoded on the same subset; an output given as ``NAME=GEN:STATS`` (its
``--stats-output``) adds that system's mean ``--latency`` (default DAL) per bucket: where a
simultaneous model spends its lag, by sentence length. ``--curve wait-3,wait-5,wait-7`` draws
the baselines' latency/quality curve in each bucket apart (their mean latency and BLEU there)
and adds each other system's distance to it at its own mean latency in that bucket: whether a
model below a curve over the whole set is below it within each length too, or only spends its
lag where it buys less. ``--curve-interval`` adds each such distance's 95% paired bootstrap
interval, the bucket's sentences resampled (``report``'s ``--curve-interval``, bucket by bucket).

**attention-agreement** (the decoder's step order, docs/results.md). Where two models look when
they read the same words: both run teacher-forced (dropout off) on a subset's references, and at
every output step but the first the first model's distribution over the source is compared with
the reference model's at the same step and at the step before: how often their peaks fall on the
same position, and their overlap sum_s min(a_s, b_s) (1: equal distributions, 0: disjoint). With
each model's sharpness (as above). It asks whether a decoder whose query has not read y_{t-1}
(``--decoder-step bahdanau``) looks where one whose query has (``conditional``, ``luong``, fairseq's
``lstm``) looks, one step late, or spread between the two. Any checkpoint whose decoder returns
its attention (fairseq's ``lstm`` too) on the same dictionaries.
"""

import argparse
import math
import os
import sys
from collections import defaultdict

from .choices import STOP_RULES
from .errors import VisionAttnError, non_negative_float, nonzero_int, one_line_errors, positive_float
from .plots import LATENCY_METRICS, read_sentences
from .report import read_stats, sentence_latency


def read_frequent_types(dict_path, n):
    """The first ``n`` entries of a fairseq dictionary file (sorted by count, most frequent first)."""
    types = []
    with open(dict_path, encoding="utf-8") as handle:
        for line in handle:
            token = line.split(" ")[0]
            if token.startswith("madeupword"):
                continue
            types.append(token)
            if len(types) == n:
                break
    return set(types)


def _mean_and_se(values):
    n = len(values)
    if n == 0:
        return float("nan"), float("nan")
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var / n)


def word_class(token, function_types):
    """'</s>', 'function' (a type in ``function_types``) or 'content'."""
    return "</s>" if token == "</s>" else ("function" if token in function_types else "content")


def temperature_by_word(sentences, stats, function_types):
    """Group every output token's temperature by word class.

    Args:
        sentences: id -> (source tokens, hypothesis tokens), from :func:`read_sentences`.
        stats: id -> --stats-output row with ``temperatures`` (one per hypothesis token + EOS).
        function_types: the set of target types counted as function words.

    Returns:
        (groups, per_type): ``{"function"|"content"|"</s>": [temperatures]}`` and
        ``{type: [temperatures]}``.
    """
    groups, per_type = defaultdict(list), defaultdict(list)
    for i, (_, hypothesis) in sentences.items():
        row = stats.get(i)
        if row is None or "temperatures" not in row:
            continue
        temps = row["temperatures"]
        tokens = hypothesis + ["</s>"]
        if len(temps) != len(tokens):
            raise VisionAttnError(
                f"sentence {i}: {len(temps)} temperatures for {len(hypothesis)} output tokens + EOS: "
                "decode without --remove-bpe / --post-process / --tokenizer for this analysis (the "
                "statistics count the model's own units)"
            )
        for token, tau in zip(tokens, temps):
            groups[word_class(token, function_types)].append(tau)
            per_type[token].append(tau)
    return groups, per_type


def format_report(groups, per_type, min_count=20, top=10):
    lines = ["class\ttokens\tmean temperature\tstd. error"]
    for group in ("function", "content", "</s>"):
        mean, se = _mean_and_se(groups.get(group, []))
        lines.append(f"{group}\t{len(groups.get(group, []))}\t{mean:.4f}\t{se:.4f}")
    ranked = sorted(
        ((sum(v) / len(v), t, len(v)) for t, v in per_type.items() if len(v) >= min_count), reverse=True
    )
    lines.append(f"highest mean temperature (types with >= {min_count} tokens):")
    lines += [f"  {t}\t{n}\t{m:.4f}" for m, t, n in ranked[:top]]
    lines.append("lowest mean temperature:")
    lines += [f"  {t}\t{n}\t{m:.4f}" for m, t, n in ranked[-top:][::-1]]
    return "\n".join(lines)


def window_bound(stats, sigma, taus):
    """Mean window per step at each tau, with the model's g(t) and with g = 1, computed by the
    decoder's own rule (:func:`..attention.flexible.threshold_window`).

    Args:
        stats: id -> --stats-output row with ``src_len``, ``g`` and ``focus`` (one per step).
    Returns:
        (full, rows): the mean full window (positions per step), and one
        ``(tau, window with the model's g, window with g = 1)`` per tau.
    """
    import torch

    from .attention.flexible import threshold_window

    first, g, focus, src_len = [], [], [], []  # step 1 has no previous focus: it scores all
    for row in stats.values():
        if "g" not in row or "focus" not in row:
            continue
        first.append(row["src_len"])
        g += row["g"][1:]
        focus += row["focus"][:-1]
        src_len += [row["src_len"]] * (len(row["g"]) - 1)
    if not first:
        return None, []
    steps = len(first) + len(g)
    full = (sum(first) + sum(src_len)) / steps
    g, focus, src_len = (torch.tensor(v, dtype=torch.float64) for v in (g, focus, src_len))
    rows = []
    for tau in taus:
        own = threshold_window(g, focus, src_len, sigma, tau)[1].sum().item()
        strongest = threshold_window(torch.ones_like(g), focus, src_len, sigma, tau)[1].sum().item()
        rows.append((tau, (sum(first) + own) / steps, (sum(first) + strongest) / steps))
    return full, rows


def format_window_bound(full, rows, sigma, stats):
    g = [v for row in stats.values() for v in row.get("g", [])[1:]]  # steps >= 2
    lines = [
        f"# {len(stats)} sentences, sigma {sigma}: full window {full:.3f} positions per step, "
        f"mean g(t) {sum(g) / max(len(g), 1):.3f} (steps after the first)",
        "tau\twindow (model's g)\tcut\twindow (g = 1)\tcut (g = 1: the most it can be)",
    ]
    for tau, own, strongest in rows:
        lines.append(f"{tau:g}\t{own:.3f}\t{1 - own / full:.1%}\t{strongest:.3f}\t{1 - strongest / full:.1%}")
    return "\n".join(lines)


def uncertain_stop_mass(alpha, p_choose, low=0.1, high=0.9):
    """(mass, total): the expected alignment's stopping mass on positions whose stopping
    probability is strictly between ``low`` and ``high``, and all its mass. ``alpha``,
    ``p_choose``: batch x src_len (alpha 0 at padding). Where that share is high, the expected
    alignment training sees and the hard policy ("stop at the first p > 1/2") part ways."""
    uncertain = (p_choose > low) & (p_choose < high)
    return float((alpha * uncertain).sum()), float(alpha.sum())


def monotonic_heads(model):
    """The model's monotonic, MoChA and MILk attention modules (those with a read/write head)."""
    from .attention.monotonic import MonotonicAttentionBase

    return [m for m in model.modules() if isinstance(m, MonotonicAttentionBase)]


def monotonic_mismatch(
    model, batches, noise_vars, pad, seed=1, stop_rule="energy", context_shifts=(), argmax=None, delays=None
):
    """Teacher-forced NLL and DAL of a streaming model under the hard policy and the expected
    alignment.

    Args:
        model: a trained model whose decoder attends with a monotonic head (its
            :class:`..attention.monotonic.MonotonicAttentionBase` modules are switched).
        batches: fairseq samples (``net_input``, ``target``).
        noise_vars: the noise variances of the expected rows.
        pad: the target padding index.
        stop_rule: the hard policy's rule (fairseq-generate's ``--monotonic-stop``).
        context_shifts: a probe of how much a stop one or more positions off costs: for each
            shift s, a hard-policy row whose context is built as if the head had stopped s
            positions later than the policy says (clipped to the sentence; a later stop reads
            states the policy has not read). The stopping rule is unchanged; the stops after the
            first follow the decoder states the shifted contexts give, so the DAL moves too.
        argmax: a dict to fill, for the hard policy, with ``{sentence id: (reference token ids,
            the most probable token at each of its positions given the reference prefix)}``;
        delays: one to fill, for the hard policy, with ``{sentence id: [source tokens read before
            each reference position]}``.
    Returns:
        ``[(label, nll_bits_per_token, mean_dal, uncertain_share, accuracy)]``, the hard policy
        first, then one row per context shift;
        ``uncertain_share`` (None for the hard policy): the share of the expected alignment's
        stopping mass on positions whose noise-free stopping probability is in (0.1, 0.9)
        (:func:`uncertain_stop_mass`); ``accuracy``: the share of reference tokens that are the
        most probable word given the reference prefix (teacher-forced top-1 accuracy: set beside
        greedy decoding's BLEU, it says whether a gap between two models is there one step at a
        time or grows when each conditions on its own outputs). The model is left in eval mode
        with its heads' noise and stopping rule as they were.
    """
    import torch

    heads = monotonic_heads(model)
    if not heads:
        raise ValueError("the model has no monotonic head: give a monotonic, MoChA or MILk checkpoint")
    saved = [(m.noise_var, m.stop_rule) for m in heads]
    model.eval()
    rows = []
    stops = [0.0, 0.0]  # uncertain_stop_mass, summed over a row's batches and heads

    def recording(head):
        original = head.training_alignment  # the class's method: read before it is replaced

        def training_alignment(query, cache, state):
            log_alpha, alpha = original(query, cache, state)
            p_choose = torch.sigmoid(head.energy.energies(query, cache["mono_keys"]).float())
            mass, total = uncertain_stop_mass(alpha, p_choose)
            stops[0], stops[1] = stops[0] + mass, stops[1] + total
            return log_alpha, alpha

        return training_alignment

    def shifted(head, shift):
        original = type(head).hard_weights

        def hard_weights(query, cache, position):
            moved = (position + shift).clamp(min=0)
            return original(head, query, cache, torch.minimum(moved, cache["lengths"] - 1))

        return hard_weights

    hard = f"hard policy ({stop_rule})"
    try:
        for m in heads:
            m.stop_rule = stop_rule
            m.training_alignment = recording(m)
        for label, expected, noise, shift in (
            [(hard, False, 0.0, 0)]
            + [(f"{hard}, context at the stop {s:+d}", False, 0.0, s) for s in context_shifts]
            + [(f"expected, noise {n:g}", True, n, 0) for n in noise_vars]
        ):
            for m in heads:
                m.training, m.noise_var = expected, noise
                if shift:
                    m.hard_weights = shifted(m, shift)
                else:
                    m.__dict__.pop("hard_weights", None)
            torch.manual_seed(seed)
            stops[:] = [0.0, 0.0]
            kept = (argmax, delays) if label == hard else (None, None)
            nll, dal, accuracy = teacher_forced(model, batches, pad, *kept)
            share = stops[0] / stops[1] if expected and stops[1] > 0 else None
            rows.append((label, nll, dal, share, accuracy))
    finally:
        for m, (noise, rule) in zip(heads, saved):
            m.noise_var, m.stop_rule = noise, rule
            m.__dict__.pop("training_alignment", None)
            m.__dict__.pop("hard_weights", None)
        model.eval()
    return rows


def teacher_forced(model, batches, pad, argmax=None, delays=None):
    """(NLL in bits per target token, mean DAL or None, top-1 accuracy) of ``model`` as it is
    (its mode and heads untouched) run teacher-forced on ``batches`` (fairseq samples): the NLL of
    the references (EOS included, ``pad`` left out), the mean DAL of the delays the decoder reports
    (on the reference length; None when it reports none: an offline model), and the share of
    reference tokens that are the most probable word given the reference prefix. ``argmax``: a
    dict to fill with ``{sentence id: (reference token ids, that most probable token at each of
    its positions)}``; ``delays``: one to fill with ``{sentence id: [source tokens read before
    each reference position]}`` (left empty for a model that reports no delays)."""
    import torch

    from .criterions.common import attention_extras
    from .latency import differentiable_average_lagging

    nll, tokens, correct, dal, sentences = 0.0, 0, 0, 0.0, 0
    with torch.no_grad():
        for sample in batches:
            net_output = model(**sample["net_input"])
            lprobs = model.get_normalized_probs(net_output, log_probs=True).float()
            target = sample["target"]
            mask = target.ne(pad)
            nll -= lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)[mask].sum().item()
            tokens += int(mask.sum())
            best = lprobs.argmax(-1)
            correct += int(best.eq(target)[mask].sum())
            if argmax is not None:
                for i, sentence in enumerate(sample["id"].tolist()):
                    argmax[sentence] = (target[i][mask[i]].tolist(), best[i][mask[i]].tolist())
            read = attention_extras(net_output).get("delay")
            if read is None:
                dal = None
            elif dal is not None:
                src_len = sample["net_input"]["src_lengths"]
                dal += differentiable_average_lagging(read, src_len, mask).sum().item()
            if read is not None and delays is not None:
                for i, sentence in enumerate(sample["id"].tolist()):
                    delays[sentence] = read[i][mask[i]].tolist()
            sentences += target.size(0)
    return nll / tokens / math.log(2), None if dal is None else dal / sentences, correct / tokens


def accuracy_by_piece(argmax, vocab, marker="@@"):
    """{kind: (correct, count)} of teacher-forced choices (``argmax``: {sentence id: (reference
    token ids, the chosen token ids)}, as :func:`teacher_forced` fills it) by the kind of reference
    token: ``word-initial`` (a piece that begins a word), ``continuation`` (a piece after one that
    ends in ``marker``, subword-nmt's BPE joiner: the rest of a word being spelled out), ``EOS``."""
    counts = {kind: [0, 0] for kind in ("word-initial", "continuation", "EOS")}
    for reference, best in argmax.values():
        for i, (token, chosen) in enumerate(zip(reference, best)):
            if token == vocab.eos():
                kind = "EOS"
            elif i > 0 and vocab[reference[i - 1]].endswith(marker):
                kind = "continuation"
            else:
                kind = "word-initial"
            counts[kind][0] += int(token == chosen)
            counts[kind][1] += 1
    return {kind: tuple(count) for kind, count in counts.items()}


def accuracy_after(argmax, delays=None):
    """{"right": row, "wrong": row} over the reference tokens after the first, by whether the
    previous one was the most probable word given its prefix (``argmax`` as in
    :func:`accuracy_by_piece`); row: (correct, count, the mean lead, or None without ``delays``
    ({sentence id: [tokens read]}, as :func:`teacher_forced` fills it)): the source tokens read
    before a position minus the target tokens written before it (wait-k: k, less where it has
    read the whole source). Where a streaming policy spends its lag: after a word the model got
    right, or after one it got wrong."""
    rows = {"right": [0, 0, 0.0], "wrong": [0, 0, 0.0]}  # correct, count, summed lead
    for sentence, (reference, best) in argmax.items():
        right = [int(token == chosen) for token, chosen in zip(reference, best)]
        read = delays.get(sentence) if delays else None
        for i in range(1, len(right)):
            row = rows["right" if right[i - 1] else "wrong"]
            row[0] += right[i]
            row[1] += 1
            row[2] += read[i] - i if read else 0.0
    return {
        previous: (correct, n, lead / n if delays and n else None)
        for previous, (correct, n, lead) in rows.items()
    }


def format_accuracy_after(rows):
    """One comment line: the top-1 accuracy after a right and after a wrong previous token, with
    its count and, where known, the mean lead (tokens read minus tokens written)."""
    parts = []
    for previous, (correct, n, lead) in rows.items():
        if n:
            read = "" if lead is None else f", lead {lead:.2f}"
            parts.append(f"after a {previous} token {correct / n:.4f} ({n}{read})")
    return "# top-1 accuracy " + "; ".join(parts)


def format_choices(argmax, delays, vocab, suffix=""):
    """The two comment lines both teacher-forced commands end with: the top-1 accuracy by kind of
    reference piece (:func:`accuracy_by_piece`) and after a right or a wrong previous choice
    (:func:`accuracy_after`), each followed by ``suffix``."""
    return [
        format_accuracy_by_piece(accuracy_by_piece(argmax, vocab)) + suffix,
        format_accuracy_after(accuracy_after(argmax, delays)) + suffix,
    ]


def format_accuracy_by_piece(counts):
    """One comment line: the top-1 accuracy on each kind of reference piece, with its count."""
    parts = [f"{kind} {correct / n:.4f} ({n})" for kind, (correct, n) in counts.items() if n]
    return "# top-1 accuracy by reference piece: " + ", ".join(parts)


def load_checkpoint(path, data, flag="--path"):
    """(model in float32, its task) from a checkpoint and the binarized data directory; a missing
    checkpoint is a one-line error naming FLAG."""
    from fairseq import checkpoint_utils

    from . import register

    register()  # this command starts without the models (the package docstring)

    if not os.path.isfile(path):
        raise VisionAttnError(f"{flag} {path}: no such checkpoint")
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data})
    return models[0].float(), task


def load_subset(args):
    """(model in float32, task, the subset's size, its batches in a fixed order) from --path, --data,
    --subset and --max-tokens; a missing checkpoint is a one-line error."""
    model, task = load_checkpoint(args.path, args.data)
    task.load_dataset(args.subset)
    dataset = task.dataset(args.subset)
    batches = task.get_batch_iterator(dataset, max_tokens=args.max_tokens).next_epoch_itr(shuffle=False)
    return model, task, len(dataset), batches


def write_argmax_output(path, argmax, task, post_process=None, tokenizer=None):
    """The hard policy's teacher-forced choices as fairseq-generate's output, for report.py and
    sacrebleu: per sentence (by id) a ``T-`` line (the reference) and ``H-`` / ``D-`` lines (the
    most probable word at each reference position given the reference prefix; a predicted EOS
    is no word), each post-processed (``--post-process``, e.g. subword_nmt) and detokenized
    (``--tokenizer moses``) as fairseq-generate does: a greedy translation that never sees its
    own errors."""
    import torch
    from fairseq.data import encoders

    vocab = task.target_dictionary
    detok = None
    if tokenizer:
        languages = {"source_lang": task.cfg.source_lang, "target_lang": task.cfg.target_lang}
        detok = encoders.build_tokenizer(argparse.Namespace(tokenizer=tokenizer, **languages))

    def text(ids):
        words = vocab.string(torch.tensor(ids), post_process)
        return words, (detok.decode(words) if detok else words)

    with open(path, "w", encoding="utf-8") as out:
        for sentence in sorted(argmax):
            reference, best = argmax[sentence]
            words, detokenized = text(best)
            out.write(f"T-{sentence}\t{text(reference)[1]}\nH-{sentence}\t0\t{words}\n")
            out.write(f"D-{sentence}\t0\t{detokenized}\n")


def check_argmax_output(args):
    """--argmax-output names a new file in an existing folder; --remove-bpe and --tokenizer only
    come with it."""
    if args.argmax_output is None:
        for flag, value in (("--remove-bpe", args.post_process), ("--tokenizer", args.tokenizer)):
            if value is not None:
                raise VisionAttnError(f"{flag} formats --argmax-output's file: give --argmax-output FILE")
    elif os.path.exists(args.argmax_output):
        raise VisionAttnError(f"--argmax-output {args.argmax_output} exists: name a new file")
    elif not os.path.isdir(os.path.dirname(args.argmax_output) or "."):
        raise VisionAttnError(f"--argmax-output {args.argmax_output}: its folder does not exist")


def run_teacher_forced(args):
    check_argmax_output(args)
    model, task, sentences, batches = load_subset(args)
    model.eval()
    argmax, delays = {}, {}
    nll, dal, accuracy = teacher_forced(model, list(batches), task.target_dictionary.pad(), argmax, delays)
    if args.argmax_output:
        write_argmax_output(args.argmax_output, argmax, task, args.post_process, args.tokenizer)
    return "\n".join(
        [
            f"# {args.path}, {sentences} {args.subset} sentences, teacher-forced, dropout off",
            "nll (bits/token)\ttop-1 accuracy\tDAL",
            f"{nll:.4f}\t{accuracy:.4f}\t{'-' if dal is None else f'{dal:.3f}'}",
            *format_choices(argmax, delays, task.target_dictionary),
        ]
    )


def run_monotonic_mismatch(args):
    check_argmax_output(args)
    model, task, sentences, batches = load_subset(args)
    argmax, delays = {}, {}
    try:
        pad = task.target_dictionary.pad()
        rows = monotonic_mismatch(
            model,
            list(batches),
            args.noise_vars,
            pad,
            args.seed,
            args.monotonic_stop,
            args.context_shifts,
            argmax,
            delays,
        )
    except ValueError as error:
        raise VisionAttnError(f"--path {args.path}: {error}") from None
    if args.argmax_output:
        write_argmax_output(args.argmax_output, argmax, task, args.post_process, args.tokenizer)
    lines = [
        f"# {args.path}, {sentences} {args.subset} sentences, teacher-forced, dropout off",
        "alignment\tnll (bits/token)\tDAL\tstops at 0.1 < p < 0.9\ttop-1 accuracy",
    ]
    for label, nll, dal, share, accuracy in rows:
        undecided = "-" if share is None else f"{share:.3f}"
        lines.append(f"{label}\t{nll:.4f}\t{dal:.3f}\t{undecided}\t{accuracy:.4f}")
    lines += format_choices(argmax, delays, task.target_dictionary, " (hard policy)")
    lines += [f"# {line}" for line in energy_ceilings(model)]
    return "\n".join(lines)


def energy_ceilings(model):
    """One line per monotonic head: its energy's scale and bias, and the largest energy any input
    can give it (:meth:`..attention.monotonic.MonotonicEnergy.ceiling`) with the stopping
    probability that allows: a head whose ceiling is below logit(0.9) = 2.2 cannot make a
    confident stop anywhere."""
    lines = []
    for head in monotonic_heads(model):
        energy = head.energy
        scale = f"g {energy.g.item():.4f}" if energy.g is not None else f"||v|| {energy.v.norm().item():.4f}"
        ceiling = energy.ceiling()
        lines.append(
            f"energy ({energy.form}): {scale}, r {energy.r.item():.4f}; ceiling {ceiling:.3f}: "
            f"noise-free p <= {1 / (1 + math.exp(-ceiling)):.3f}"
        )
    return lines


def sharpness(distributions):
    """(count, mean peak weight, mean normalised entropy, share with a peak above 0.5) of
    distributions over positions (each a sequence of non-negative weights, renormalised here);
    a distribution over one position has entropy 0."""
    count, peak, entropy, sharp = 0, 0.0, 0.0, 0
    for weights in distributions:
        total = float(sum(weights))
        if total <= 0:
            continue
        probs = [w / total for w in weights]
        top = max(probs)
        count += 1
        peak += top
        sharp += top > 0.5
        if len(probs) > 1:
            entropy += -sum(p * math.log(p) for p in probs if p > 0) / math.log(len(probs))
    if count == 0:
        return 0, float("nan"), float("nan"), float("nan")
    return count, peak / count, entropy / count, sharp / count


def alignment_by_word(gen_path, function_types):
    """{"function"|"content"|"</s>": [distributions]}: every output step's soft alignment (the
    ``A-`` line) under the class of the token it emitted (the ``H-`` line, then EOS)."""
    from .report import parse_generate_output

    lines = parse_generate_output(gen_path)
    hypotheses, alignments = lines.get("H", {}), lines.get("A", {})
    if not alignments:
        raise VisionAttnError(f"{gen_path} has no A- lines: decode with --print-alignment soft")
    groups = defaultdict(list)
    for i, fields in sorted(hypotheses.items()):
        tokens = (fields[1].split() if len(fields) > 1 else []) + ["</s>"]
        steps = (alignments.get(i) or [""])[0].split()
        if len(steps) != len(tokens):
            raise VisionAttnError(
                f"{gen_path}: sentence {i} has {len(steps)} alignment steps for {len(tokens)} output "
                "tokens (with EOS); decode with --print-alignment soft"
            )
        for token, step in zip(tokens, steps):
            groups[word_class(token, function_types)].append(soft_step(gen_path, step))
    return groups


def soft_step(gen_path, step):
    """One output step of a soft ``A-`` line ("0.1,0.9") as a list of weights."""
    try:
        return [float(w) for w in step.split(",")]
    except ValueError:
        raise VisionAttnError(
            f"{gen_path}: A- lines are hard alignments; decode with --print-alignment soft"
        ) from None


def read_soft_alignments(gen_path):
    """Every output step's distribution over source positions from the ``A-`` lines of
    ``fairseq-generate --print-alignment soft`` (steps separated by spaces, positions by commas)."""
    from .report import parse_generate_output

    steps = []
    for fields in parse_generate_output(gen_path).get("A", {}).values():
        steps += [soft_step(gen_path, step) for step in (fields[0] if fields else "").split()]
    if not steps:
        raise VisionAttnError(f"{gen_path} has no A- lines: decode with --print-alignment soft")
    return steps


def memory_slot_distributions(alpha, src_pad):
    """Each memory slot's weights over its sentence's real positions: alpha (batch x src_len x K,
    zero on padding) and src_pad (batch x src_len, True = padding) -> lists of length |S_i|."""
    out = []
    for a, pad in zip(alpha, src_pad):
        real = a[~pad]  # |S| x K
        out.extend(real.t().tolist())
    return out


def slot_coverage(alpha, src_pad):
    """Per sentence, the share of its real positions that are the peak (argmax) of at least one
    slot: 1 when the K slots between them single out every position, 1 / |S| when all look at the
    same one. Britz's position encodings are there to push the slots apart (sec. 3.2).
    alpha: batch x src_len x K, src_pad: batch x src_len (True = padding) -> a list of shares."""
    out = []
    for a, pad in zip(alpha, src_pad):
        real = a[~pad]  # |S| x K
        out.append(len(set(real.argmax(0).tolist())) / real.size(0))
    return out


def gate_statistics(slots):
    """What sigmoid encoder gates do before they are normalised over time: from each slot's gates
    over its sentence's positions (values in (0, 1)), (mean gate, share below 0.1, share above
    0.9, mean positions per slot with a gate above 0.5, mean positions per slot, mean effective
    positions per slot 1 / sum p^2 of the normalised gates)."""
    gates = [g for slot in slots for g in slot]
    if not gates:
        return (float("nan"),) * 6
    effective = [sum(slot) ** 2 / sum(g * g for g in slot) for slot in slots if sum(slot) > 0]
    return (
        sum(gates) / len(gates),
        sum(g < 0.1 for g in gates) / len(gates),
        sum(g > 0.9 for g in gates) / len(gates),
        sum(g > 0.5 for g in gates) / len(slots),
        len(gates) / len(slots),
        sum(effective) / max(len(effective), 1),
    )


def run_memory_slots(args):
    import torch

    from .attention.memory import MemoryAttention

    model, _, sentences, batches = load_subset(args)
    model.eval()
    memories = [m for m in model.modules() if isinstance(m, MemoryAttention)]
    if not memories:
        raise VisionAttnError(
            f"--path {args.path}: the model has no memory attention: give an lstm_memory checkpoint"
        )
    memory = memories[0]
    slots, gates, coverage = [], [], []
    with torch.no_grad():
        for sample in batches:
            encoder_out = model.encoder(sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"])
            keys, src_pad = encoder_out["encoder_out"][0], encoder_out["encoder_padding_mask"][0]
            alpha = memory.encoder_weights(keys, src_pad)
            slots += memory_slot_distributions(alpha, src_pad)
            coverage += slot_coverage(alpha, src_pad)
            if memory.encoder_score == "sigmoid":
                raw = torch.sigmoid(memory.encoder_scores(keys, src_pad))
                gates += memory_slot_distributions(raw, src_pad)
    header = (
        f"# {args.path}, {sentences} {args.subset} sentences, K = {memory.memory_size}, encoder "
        f"score {memory.encoder_score}, normalised over {memory.normalize}"
    )
    lines = [header, format_sharpness([("slots", sharpness(slots))])]
    lines.append(
        f"# positions that are some slot's peak: {sum(coverage) / max(len(coverage), 1):.3f} of a "
        f"sentence's positions on average"
    )
    if gates:
        mean, low, high, opened, positions, effective = gate_statistics(gates)
        lines.append(
            f"# sigmoid gates before normalisation: mean {mean:.3f}, share below 0.1 {low:.3f}, above "
            f"0.9 {high:.3f}; per slot {opened:.2f} of {positions:.2f} positions above 0.5, "
            f"{effective:.2f} effective positions (1 / sum p^2)"
        )
    return "\n".join(lines)


def length_buckets(edges):
    """[(low, high)] source-length buckets from increasing positive edges: 20 40 -> (1, 20),
    (21, 40), (41, None); None is unbounded."""
    bounds = [0, *edges]
    return [(lo + 1, hi) for lo, hi in zip(bounds, bounds[1:])] + [(bounds[-1] + 1, None)]


def _length_bucket_ids(path, edges):
    """A fairseq-generate output's tagged lines and, per bucket of :func:`length_buckets`, the
    ids of its decoded sentences whose source (tokens of the ``S-`` line) falls in it."""
    from .report import parse_generate_output

    lines = parse_generate_output(path)
    sources, hyps, refs = lines.get("S", {}), lines.get("D", {}), lines.get("T", {})
    if not hyps:
        raise VisionAttnError(f"{path} has no D- lines: give fairseq-generate's output")
    missing = [i for i in hyps if i not in sources or i not in refs]
    if missing:
        raise VisionAttnError(f"{path}: no S- or T- line for sentence ids {sorted(missing)[:5]}")
    lengths = {i: len(sources[i][0].split()) for i in hyps}
    buckets = [
        [i for i in sorted(hyps) if lo <= lengths[i] and (hi is None or lengths[i] <= hi)]
        for lo, hi in length_buckets(edges)
    ]
    return lines, buckets


def bleu_by_length(path, edges, tokenize="none"):
    """[(sentences, corpus BLEU or None when the bucket is empty)] per bucket of
    :func:`length_buckets`, over a fairseq-generate output's sentences (source length: tokens of
    the ``S-`` line)."""
    return _bucket_bleu(*_length_bucket_ids(path, edges), tokenize)


def _bucket_bleu(lines, buckets, tokenize):
    import sacrebleu

    hyps, refs = lines["D"], lines["T"]
    rows = []
    for ids in buckets:
        if not ids:
            rows.append((0, None))
            continue
        bucket_hyps = [hyps[i][1] if len(hyps[i]) > 1 else "" for i in ids]
        bucket_refs = [refs[i][0] if refs[i] else "" for i in ids]
        rows.append((len(ids), sacrebleu.corpus_bleu(bucket_hyps, [bucket_refs], tokenize=tokenize).score))
    return rows


def _bucket_latency(buckets, stats_path, metric):
    """[mean of ``metric`` or None when the bucket is empty] per bucket (sentence ids of
    :func:`_length_bucket_ids` over a decoding), from the rows of that decoding's
    ``--stats-output`` ``stats_path``."""
    ids = sorted(i for bucket in buckets for i in bucket)
    lags = dict(zip(ids, sentence_latency(stats_path, metric, ids)))
    return [sum(lags[i] for i in bucket) / len(bucket) if bucket else None for bucket in buckets]


def bucket_curve_distances(systems, latency, baselines):
    """[(name, [BLEU minus the curve's, or None] per bucket)] for each system of ``latency`` outside
    ``baselines``: in each bucket the curve is the piecewise-linear one through the baselines'
    (mean latency, BLEU) of that bucket (``report.curve_bleu``; None outside their range or where a
    bucket is empty). ``systems``: [(name, [(sentences, BLEU)] per bucket)]; ``latency``: [(name,
    [mean latency] per bucket)], every baseline among them."""
    from .report import check_curve_names, curve_bleu

    means = dict(latency)
    check_curve_names(baselines, [name for name, _ in systems])
    missing = [name for name in baselines if name not in means]
    if missing:
        raise VisionAttnError(f"--curve: {', '.join(missing)} has no latency: give it as NAME=GEN:STATS")
    bleu = {name: [value for _, value in rows] for name, rows in systems}
    distances = []
    for name, own in latency:
        if name in baselines:
            continue
        column = []
        for b, at in enumerate(own):
            points = [(means[base][b], bleu[base][b]) for base in baselines]
            on_curve = None if at is None or any(None in p for p in points) else curve_bleu(points, at)
            column.append(None if on_curve is None else bleu[name][b] - on_curve)
        distances.append((name, column))
    return distances


def bucket_curve_intervals(systems, buckets, baselines, metric, tokenize="none"):
    """[(name, [95% interval (low, high) of the distance to the curve, or None] per bucket)] for
    each system of ``systems`` ([(name, gen_path, stats_path)], every one with STATS) outside
    ``baselines``: the paired bootstrap of ``report.resampled_curve_distances``, each bucket's
    sentences (``buckets``: their ids) resampled within it."""
    from .report import percentile_interval, resampled_curve_distances

    names = [name for name, _, _ in systems if name not in baselines]
    columns = {name: [] for name in names}
    for ids in buckets:
        distances = resampled_curve_distances(systems, baselines, metric, ids, tokenize) if ids else {}
        for name in names:
            columns[name].append(percentile_interval(distances[name]) if ids else None)
    return list(columns.items())


def check_same_buckets(systems, edges):
    """Every output of ``systems`` ([(name, [(sentences, BLEU)] per bucket)]) holds as many
    sentences in each bucket: decodings of one subset."""
    for b, (lo, hi) in enumerate(length_buckets(edges)):
        counts = {rows[b][0] for _, rows in systems}
        if len(counts) > 1:
            raise VisionAttnError(
                f"bucket {lo}-{hi or ''}: the outputs hold {sorted(counts)} sentences; decode the same subset"
            )


def format_bleu_by_length(systems, edges, tokenize, latency=(), metric="DAL", distances=(), intervals=()):
    """One row per bucket: its source lengths, sentences, each system's BLEU (- when empty), then
    ``latency``'s columns: (name, the bucket means of ``metric``), headed "NAME METRIC", then
    ``distances``' (name, per bucket BLEU minus the curve's, :func:`bucket_curve_distances`),
    headed "NAME to_curve_METRIC", then ``intervals``' (name, per bucket the distance's interval,
    :func:`bucket_curve_intervals`), headed "NAME to_curve_METRIC_ci95_low" and "..._high"."""
    lines = [f"# corpus BLEU per source-length bucket (sacrebleu, tokenize {tokenize})"]
    header = ["source length", "sentences", *(name for name, _ in systems)]
    header += [f"{name} {metric}" for name, _ in latency]
    header += [f"{name} to_curve_{metric}" for name, _ in distances]
    for name, _ in intervals:
        header += [f"{name} to_curve_{metric}_ci95_low", f"{name} to_curve_{metric}_ci95_high"]
    lines.append("\t".join(header))
    check_same_buckets(systems, edges)
    for b, (lo, hi) in enumerate(length_buckets(edges)):
        cells = ["-" if rows[b][1] is None else f"{rows[b][1]:.2f}" for _, rows in systems]
        cells += ["-" if means[b] is None else f"{means[b]:.2f}" for _, means in latency]
        cells += ["-" if values[b] is None else f"{values[b]:+.2f}" for _, values in distances]
        for _, values in intervals:
            cells += ["-", "-"] if values[b] is None else [f"{bound:+.2f}" for bound in values[b]]
        lines.append("\t".join([f"{lo}-{hi}" if hi else f"{lo}+", str(systems[0][1][b][0]), *cells]))
    return "\n".join(lines)


def increasing_edges(edges):
    if any(e <= 0 for e in edges) or any(a >= b for a, b in zip(edges, edges[1:])):
        raise VisionAttnError(f"--edges {' '.join(map(str, edges))}: give increasing positive lengths")
    return edges


def step_agreement(attn, reference, target_lengths):
    """How one model's attention agrees with a reference model's, summed over every step but the
    first of each sentence: ``(steps, [same peak, previous peak, same overlap, previous overlap,
    peak before, peak after])``.
    attn, reference: ``B x T x S`` distributions over the source at each target step (teacher-forced
    on the same batch); target_lengths: the ``B`` target lengths. "same": the reference's step t,
    "previous": its step t - 1; a peak counts when both argmaxes are the same position; the overlap
    of two distributions is sum_s min(a_s, b_s); "peak before" / "after": the model's argmax is an
    earlier / a later source position than the reference's at step t."""
    import torch

    steps, sums = 0, torch.zeros(6, dtype=torch.float64)
    for a, r, length in zip(attn, reference, target_lengths.tolist()):
        a, same, previous = a[1:length], r[1:length], r[: length - 1]
        if len(a) == 0:
            continue
        peak, same_peak = a.argmax(-1), same.argmax(-1)
        sums += torch.stack(
            [
                (peak == same_peak).sum(),
                (peak == previous.argmax(-1)).sum(),
                torch.minimum(a, same).sum(),
                torch.minimum(a, previous).sum(),
                (peak < same_peak).sum(),
                (peak > same_peak).sum(),
            ]
        ).double()
        steps += len(a)
    return steps, sums.tolist()


def teacher_forced_attention(model, batch):
    """The ``B x T x S`` attention a model's decoder returns, teacher-forced on a batch (eval mode):
    this package's ``extra["attn"][0]`` or fairseq's ``lstm``'s tensor; ValueError if it has none."""
    import torch

    with torch.no_grad():
        extra = model(**batch["net_input"])[1]
    attn = extra.get("attn", [None])[0] if isinstance(extra, dict) else extra
    if attn is None:
        raise ValueError("its decoder returns no attention")
    return attn.float()


def attention_agreement(model, reference, batches, pad):
    """(steps, agreement sums of :func:`step_agreement`, [model's, reference's] distributions) over
    the batches: each target step's weights on its sentence's source positions (pads dropped).
    Both models' weights must index right-padded positions (this package's encoder, fairseq's
    ``lstm``): a ValueError otherwise."""
    from .tasks.translation_vision_attn import attends_right_padded

    if not all(attends_right_padded(m) for m in (model, reference)):
        raise ValueError("its encoder does not attend right-padded source positions (compare LSTM models)")
    model.eval()
    reference.eval()
    steps, sums, distributions = 0, [0.0] * 6, ([], [])
    for batch in batches:
        lengths = batch["target"].ne(pad).sum(-1)
        source_lengths = batch["net_input"]["src_lengths"].tolist()
        attns = [teacher_forced_attention(m, batch) for m in (model, reference)]
        n, batch_sums = step_agreement(*attns, lengths)
        steps, sums = steps + n, [a + b for a, b in zip(sums, batch_sums)]
        for rows, attn in zip(distributions, attns):
            for weights, source_length, length in zip(attn, source_lengths, lengths.tolist()):
                rows += weights[:length, :source_length].tolist()
    return steps, sums, distributions


def run_attention_agreement(args):
    model, task, sentences, batches = load_subset(args)
    reference, reference_task = load_checkpoint(args.reference, args.data, "--reference")
    for side in ("source", "target"):
        if len(getattr(task, f"{side}_dictionary")) != len(getattr(reference_task, f"{side}_dictionary")):
            raise VisionAttnError(
                f"--path {args.path} and --reference {args.reference} have different {side} "
                "dictionaries: compare models trained on the same data"
            )
    pad = task.target_dictionary.pad()
    try:
        steps, sums, distributions = attention_agreement(model, reference, batches, pad)
    except ValueError as error:
        raise VisionAttnError(f"{args.path} or {args.reference}: {error}") from None
    if steps == 0:
        raise VisionAttnError(f"{args.subset} has no sentence of two or more target tokens to compare")
    same, previous, overlap, previous_overlap, before, after = (value / steps for value in sums)
    lines = [
        f"# {args.path} against the reference {args.reference}, {sentences} {args.subset} sentences, "
        "teacher-forced, dropout off",
        format_sharpness(
            [(label, sharpness(rows)) for label, rows in zip(("model", "reference"), distributions)]
        ),
        f"the model's step t ({steps} steps, t >= 2) against the reference's\tsame peak\toverlap"
        "\tpeak before it\tpeak after it",
        f"step t\t{same:.3f}\t{overlap:.3f}\t{before:.3f}\t{after:.3f}",
        f"step t - 1\t{previous:.3f}\t{previous_overlap:.3f}\t-\t-",
    ]
    return "\n".join(lines)


def format_sharpness(rows):
    lines = ["distributions\tcount\tmean peak weight\tnormalised entropy\tshare peak > 0.5"]
    for label, (count, peak, entropy, sharp) in rows:
        lines.append(f"{label}\t{count}\t{peak:.3f}\t{entropy:.3f}\t{sharp:.3f}")
    return "\n".join(lines)


def add_argmax_output(parser, what):
    """--argmax-output FILE and its formatting flags --remove-bpe and --tokenizer."""
    parser.add_argument(
        "--argmax-output",
        metavar="FILE",
        help=f"write {what} (the most probable word given the reference prefix) as "
        "fairseq-generate's T-/H-/D- lines, for report.py (a new file)",
    )
    parser.add_argument(
        "--post-process",
        "--remove-bpe",
        nargs="?",
        const="@@ ",
        default=None,
        help="--argmax-output's BPE removal, as fairseq-generate's (e.g. subword_nmt; default: none)",
    )
    parser.add_argument(
        "--tokenizer",
        choices=["moses"],
        default=None,
        help="--argmax-output's detokenizer, as fairseq-generate's (default: none)",
    )


def get_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    words = sub.add_parser("temperature-by-word", help="mean SACT temperature on function vs content words")
    words.add_argument("--generate", required=True, help="fairseq-generate output")
    words.add_argument("--stats", required=True, help="its --stats-output (a model with a temperature)")
    words.add_argument("--dict", required=True, help="the target dictionary (dict.TGT.txt)")
    words.add_argument("--function-words", type=int, default=50, metavar="N")
    words.add_argument("--min-count", type=int, default=20, metavar="N")
    bound = sub.add_parser(
        "window-bound", help="flexible attention: the window each threshold leaves, and its bound at g = 1"
    )
    bound.add_argument("--stats", required=True, help="--stats-output of a flexible model (g and focus)")
    bound.add_argument(
        "--sigma", type=positive_float, default=1.5, help="the model's --flex-sigma (default 1.5)"
    )
    bound.add_argument(
        "--taus", type=positive_float, nargs="+", default=[0.3, 0.5, 0.8, 1.0, 1.2, 1.6], metavar="TAU"
    )
    mismatch = sub.add_parser(
        "monotonic-mismatch",
        help="a streaming model's NLL, DAL and top-1 accuracy, hard policy and expected alignment",
    )
    mismatch.add_argument("--path", required=True, help="a monotonic, MoChA or MILk checkpoint")
    mismatch.add_argument("--data", required=True, help="the binarized data directory")
    mismatch.add_argument("--subset", default="valid", help="default: valid")
    mismatch.add_argument(
        "--noise-vars",
        type=non_negative_float,
        nargs="+",
        default=[0.0, 4.0],
        metavar="N",
        help="noise variances of the expected rows (default: 0 4)",
    )
    mismatch.add_argument(
        "--monotonic-stop",
        choices=STOP_RULES,
        default="energy",
        help="the hard policy's stopping rule, as fairseq-generate's (default: energy)",
    )
    mismatch.add_argument(
        "--context-shifts",
        type=nonzero_int,
        nargs="+",
        default=[],
        metavar="S",
        help="a probe: for each S, a hard-policy row whose context is built as if the head had "
        "stopped S positions later than the policy says (negative: earlier); non-zero integers",
    )
    add_argmax_output(mismatch, "the hard policy's teacher-forced choices")
    mismatch.add_argument("--max-tokens", type=int, default=4000, metavar="N")
    mismatch.add_argument("--seed", type=int, default=1, help="seed of the noise (default 1)")
    forced = sub.add_parser(
        "teacher-forced", help="any model's teacher-forced NLL, top-1 accuracy and DAL, and its choices"
    )
    forced.add_argument("--path", required=True, help="the model's checkpoint (any arch)")
    forced.add_argument("--data", required=True, help="the binarized data directory")
    forced.add_argument("--subset", default="valid", help="default: valid")
    add_argmax_output(forced, "the teacher-forced choices")
    forced.add_argument("--max-tokens", type=int, default=4000, metavar="N")
    sharp = sub.add_parser(
        "alignment-sharpness", help="how sharply each output step attends (--print-alignment soft)"
    )
    sharp.add_argument(
        "--generate",
        required=True,
        nargs="+",
        metavar="GEN",
        help="fairseq-generate outputs with --print-alignment soft",
    )
    by_word = sub.add_parser(
        "alignment-by-word", help="how sharply a model attends on function vs content output words"
    )
    by_word.add_argument("--generate", required=True, help="fairseq-generate output, --print-alignment soft")
    by_word.add_argument("--dict", required=True, help="the target dictionary (dict.TGT.txt)")
    by_word.add_argument("--function-words", type=int, default=50, metavar="N")
    slots = sub.add_parser("memory-slots", help="memory attention: how sharply each slot reads the source")
    slots.add_argument("--path", required=True, help="an lstm_memory checkpoint")
    slots.add_argument("--data", required=True, help="the binarized data directory")
    slots.add_argument("--subset", default="test", help="default: test")
    slots.add_argument("--max-tokens", type=int, default=4000, metavar="N")
    agree = sub.add_parser(
        "attention-agreement",
        help="where two models look when teacher-forced on the same references, step t and t - 1",
    )
    agree.add_argument("--path", required=True, help="the model's checkpoint")
    agree.add_argument("--reference", required=True, help="the reference model's checkpoint")
    agree.add_argument("--data", required=True, help="the binarized data directory (both models')")
    agree.add_argument("--subset", default="valid", help="default: valid")
    agree.add_argument("--max-tokens", type=int, default=4000, metavar="N")
    by_length = sub.add_parser("bleu-by-length", help="corpus BLEU per source-length bucket")
    by_length.add_argument(
        "--generate",
        required=True,
        nargs="+",
        metavar="NAME=GEN[:STATS]",
        help="fairseq-generate outputs of one subset (NAME= optional; split at the last '='), "
        "each with its --stats-output STATS_JSONL to add that system's mean --latency per bucket",
    )
    by_length.add_argument(
        "--edges",
        type=int,
        nargs="+",
        default=[20, 40, 60, 80],
        metavar="N",
        help="upper source lengths of the buckets but the last (default: 20 40 60 80)",
    )
    by_length.add_argument("--tokenize", default="none", help="sacrebleu tokenizer (default: none)")
    by_length.add_argument(
        "--latency",
        choices=LATENCY_METRICS,
        help="the per-sentence latency averaged for outputs given with STATS (default: DAL)",
    )
    by_length.add_argument(
        "--curve",
        type=lambda value: value.split(","),
        metavar="NAME,NAME,...",
        help="baselines of a latency/quality curve (at least two, each given with STATS): add each "
        "other system's BLEU minus the curve's at its mean latency, drawn bucket by bucket",
    )
    by_length.add_argument(
        "--curve-interval",
        action="store_true",
        help="add each distance's 95%% paired bootstrap interval (1,000 resamples of the bucket's "
        "sentences; every system given with STATS)",
    )
    return parser


@one_line_errors
def main(argv=None):
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.command == "monotonic-mismatch":
        print(run_monotonic_mismatch(args))
        return 0
    if args.command == "teacher-forced":
        print(run_teacher_forced(args))
        return 0
    if args.command == "memory-slots":
        print(run_memory_slots(args))
        return 0
    if args.command == "attention-agreement":
        print(run_attention_agreement(args))
        return 0
    if args.command == "bleu-by-length":
        edges = increasing_edges(args.edges)
        if args.curve_interval and not args.curve:
            raise VisionAttnError("--curve-interval needs --curve NAME,NAME,...: the baselines of the line")
        systems, latency, metric, with_stats, buckets = [], [], args.latency or "DAL", [], None
        for spec in args.generate:
            name, sep, paths = spec.rpartition("=")
            path, _, stats_path = (paths if sep else spec).partition(":")
            name = name if sep else path
            lines, own_buckets = _length_bucket_ids(path, edges)  # one parse for both columns
            buckets = own_buckets if buckets is None else buckets  # the first output's
            systems.append((name, _bucket_bleu(lines, own_buckets, args.tokenize)))
            if stats_path:
                latency.append((name, _bucket_latency(own_buckets, stats_path, metric)))
                with_stats.append((name, path, stats_path))
        if args.latency and not latency:
            raise VisionAttnError(
                f"--latency {args.latency} averages a --stats-output: give one as NAME=GEN:STATS"
            )
        distances = bucket_curve_distances(systems, latency, args.curve) if args.curve else ()
        intervals = ()
        if args.curve_interval:  # after bucket_curve_distances has checked the names and STATS
            check_same_buckets(systems, edges)
            intervals = bucket_curve_intervals(with_stats, buckets, args.curve, metric, args.tokenize)
        print(format_bleu_by_length(systems, edges, args.tokenize, latency, metric, distances, intervals))
        return 0
    if args.command == "alignment-sharpness":
        print(format_sharpness([(path, sharpness(read_soft_alignments(path))) for path in args.generate]))
        return 0
    if args.command == "alignment-by-word":
        groups = alignment_by_word(args.generate, read_frequent_types(args.dict, args.function_words))
        rows = [
            (group, sharpness(groups[group])) for group in ("function", "content", "</s>") if group in groups
        ]
        print(format_sharpness(rows))
        return 0
    if args.command == "window-bound":
        stats = read_stats(args.stats)
        full, rows = window_bound(stats, args.sigma, args.taus)
        if full is None:
            parser.error(f"{args.stats} has no 'g' and 'focus': decode a flexible model (lstm_flexible)")
        print(format_window_bound(full, rows, args.sigma, stats))
        return 0
    groups, per_type = temperature_by_word(
        read_sentences(args.generate),
        read_stats(args.stats),
        read_frequent_types(args.dict, args.function_words),
    )
    if not groups:
        parser.error(f"{args.stats} has no 'temperatures': decode a model with --attention-temperature")
    print(format_report(groups, per_type, args.min_count))
    return 0


if __name__ == "__main__":
    sys.exit(main())
