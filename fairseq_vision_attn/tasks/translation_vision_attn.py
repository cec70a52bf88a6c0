"""``--task translation_vision_attn``: fairseq's translation task plus this package's
generation-time flags.

fairseq-generate and fairseq-interactive accept new flags only through a task, so this task
owns every decoding option of the package: ``--stats-output``, ``--vision-span-threshold``
(flexible attention) and ``--test-waitk-lagging`` (wait-k), and it decodes every streaming
checkpoint with :class:`..simultaneous.SimultaneousGenerator` (greedy, simultaneous, with
delays). Training with it is identical to ``--task translation``, except that a resumed run
keeps its early-stopping count: fairseq-train keeps ``--patience``'s best validation loss and
the number of validations since it in memory only, so a run resumed from
``checkpoint_last.pt`` would start counting afresh (taking the first loss after the restart as
the best, even when it is worse) and train up to ``--patience`` epochs more than the same run
uninterrupted. The task saves both with every checkpoint and restores them on resume
(fairseq's ``get_checkpoint_dict`` / ``set_checkpoint_dict``); its learning-rate schedule is
kept by the package itself, whatever the task (:mod:`.._resume`). A resumed run also keeps its
batches: fairseq groups the training sentences into batches once, when it builds the epoch
iterator, with the seed plus that epoch, and reuses the grouping for every later epoch (only
their order is shuffled); a resume builds the iterator again at the resumed epoch, so from there
on fairseq alone trains on other batches than the same run uninterrupted. The task groups them
as at epoch 1 whatever the epoch, so that a run trained one epoch per call is the same run as one
trained in one call (on the same device and threads, the same to the bit). And fairseq-train hands
``--monotonic-stop``, ``--monotonic-stop-threshold`` and ``--vision-span-threshold`` to the model
it builds: validation (the loss, the logged DAL, ``checkpoint_best.pt``, the plateau rule) then
measures the policy that will be decoded, not the default one (training reads none of them).

``--stats-output FILE`` writes one JSON line per generated sentence::

    {"id": 3, "src_len": 9, "hypo_len": 10, "window_sizes": [9.0, ...], ...}

``src_len`` and ``hypo_len`` count real tokens and EOS (fairseq appends EOS to both sides);
each per-step list has one value per target token, the EOS step included (see
:mod:`..stats`). Streaming checkpoints add ``delays`` (source tokens read before each written
token, EOS included) and the sentence's ``AL``, ``AP``, ``DAL`` and ``ATD`` on |x| = ``src_len``
and |y| = ``hypo_len``, and ``LAAL`` with |y| = max(``hypo_len``, ``ref_len``), the reference's
length with EOS (fairseq-generate; fairseq-interactive has no reference: there LAAL = AL)
(:mod:`..latency`). Rows are written as sentences are decoded and sorted by ``id`` at the end of
the run. At the end of the run one line of corpus averages (including
the latency metrics) is printed after BLEU: the beam search's own per-step averages always, the chosen
hypotheses' per-token means only with ``--stats-output`` (after a beam search they cost one
teacher-forced pass, see :mod:`..stats`).
"""

import atexit
import collections
import contextlib
import dataclasses
import inspect
import json
import logging
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from fairseq import utils
from fairseq.sequence_generator import SequenceGeneratorWithAlignment
from fairseq.tasks import FairseqTask, register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..attention.monotonic import check_stop_threshold
from ..choices import STOP_RULES
from ..criterions.common import refuse_unaccepted
from ..errors import VisionAttnError
from ..latency import latency_scores
from ..models.lstm_attention import refuse_ignored_flags
from ..simultaneous import SimultaneousGenerator, streaming_attention
from ..stats import CorpusStats, SearchStats, format_summary, list_name, write_row

logger = logging.getLogger(__name__)

# fairseq's get_batch_iterator arguments, to read them however they were passed
_BATCH_ITERATOR = inspect.signature(FairseqTask.get_batch_iterator)


@dataclass
class TranslationVisionAttnConfig(TranslationConfig):
    stats_output: Optional[str] = field(
        default=None,
        metadata={"help": "write one JSON line of decoding statistics per generated sentence here"},
    )
    vision_span_threshold: float = field(
        default=math.inf,
        metadata={
            "help": "flexible attention (lstm_flexible): score only source positions whose "
            "penalty is below this threshold tau (Shu & Nakayama sec. 3.1); inf = off"
        },
    )
    monotonic_stop: Optional[str] = field(
        default=None,
        metadata={
            "help": "monotonic, MoChA, MILk: the test-time stopping rule: energy (stop at the first "
            "energy > 0, Raffel et al.; the default) or cumulative (stop once the probability of "
            "having stopped reaches 1/2, the median of the trained expected alignment)"
        },
    )
    monotonic_stop_threshold: Optional[float] = field(
        default=None,
        metadata={
            "help": "monotonic, MoChA, MILk: where the test-time rule stops instead of 1/2: energy "
            "at the first p_ij > Q, cumulative once the probability of having stopped reaches Q "
            "(0 < Q < 1; above 1/2 reads more: a latency knob to choose on valid)"
        },
    )
    test_waitk_lagging: Optional[int] = field(
        default=None,
        metadata={
            "help": "wait-k (lstm_waitk): decode with this lagging k instead of the one the "
            "checkpoint was trained with"
        },
    )


#: the flags this task adds to fairseq's translation task
TASK_FLAGS = tuple(
    "--" + f.name.replace("_", "-")
    for f in dataclasses.fields(TranslationVisionAttnConfig)
    if f.name not in {g.name for g in dataclasses.fields(TranslationConfig)}
)


def refuse_task_flags_without_the_task(argv):
    """A fairseq command (fairseq-train, fairseq-generate, ...) given one of this task's flags
    under another ``--task`` fails in one line that names the task to add, where argparse would
    only call the flag unrecognized. ``argv``: the command line (``sys.argv``); other programs
    (pytest, simuleval, ``python -m``) are left alone."""
    if not os.path.basename(argv[0]).startswith("fairseq-"):
        return
    task, given = "translation", []  # fairseq's default task
    words = iter(argv[1:])
    for word in words:
        name, eq, value = word.partition("=")
        if name == "--task":
            task = value if eq else next(words, task)
        elif name in TASK_FLAGS:
            given.append(name)
    if given and task != "translation_vision_attn":
        raise VisionAttnError(
            f"{', '.join(given)}: {'a flag' if len(given) == 1 else 'flags'} of --task "
            "translation_vision_attn, and this command runs "
            f"--task {task}: add --task translation_vision_attn"
        )


def refuse_moses_without_languages(argv):
    """``--tokenizer moses`` without ``--source-lang`` and ``--target-lang`` fails in one line:
    fairseq's moses tokenizer takes its languages from them, and without them fairseq stops with a
    hydra config error a hundred lines long. ``argv`` as :func:`refuse_task_flags_without_the_task`."""
    if not os.path.basename(argv[0]).startswith("fairseq-"):
        return
    tokenizer, langs = None, set()
    words = iter(argv[1:])
    for word in words:
        name, eq, value = word.partition("=")
        if name == "--tokenizer":
            tokenizer = value if eq else next(words, None)
        elif name in ("-s", "--source-lang", "-t", "--target-lang"):
            langs.add("source" if name in ("-s", "--source-lang") else "target")
    if tokenizer == "moses" and langs != {"source", "target"}:
        raise VisionAttnError(
            "--tokenizer moses needs --source-lang and --target-lang (the moses tokenizer takes its "
            "languages from them): add e.g. --source-lang de --target-lang en"
        )


def check_stats_output(path):
    """Refuse a ``--stats-output`` that cannot be written, before anything is decoded (and
    without creating or emptying the file)."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise VisionAttnError(f"--stats-output {path}: directory {directory} does not exist")
    if os.path.isdir(path) or not os.access(path if os.path.exists(path) else directory, os.W_OK):
        raise VisionAttnError(f"--stats-output {path}: cannot be written")


def open_stats_output(path):
    """Open ``--stats-output`` for writing (checked at setup), or explain why it cannot be."""
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as err:
        raise VisionAttnError(f"--stats-output {path}: cannot be written ({err.strerror})") from None


def sort_rows_by_id(path):
    """Rewrite a finished ``--stats-output`` file in sentence-id order (it is written in batch
    order as decoding goes, so an interrupted run keeps what it decoded)."""
    with open(path, encoding="utf-8") as handle:
        lines = handle.readlines()
    lines.sort(key=lambda line: json.loads(line)["id"])
    partial = f"{path}.sorting"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.writelines(lines)
    os.replace(partial, path)


def set_generation_flag(model, attention, attribute, value, flag, needs):
    """Set ``attention.<attribute> = value`` for ``flag``, or refuse a checkpoint without it."""
    if not hasattr(attention, attribute):
        name = getattr(attention, "registry_name", type(model).__name__)
        raise VisionAttnError(f"{flag} needs {needs}; this checkpoint uses {name!r}")
    setattr(attention, attribute, value)


def attends_right_padded(model):
    """True when a model's attention weights index right-padded source positions: this package's
    encoder, and fairseq's own LSTM encoder with ``left_pad`` (its default), both convert a
    left-padded batch to right padding before the decoder attends."""
    from fairseq.models.lstm import LSTMEncoder as FairseqLSTMEncoder

    encoder = getattr(model, "encoder", None)
    if getattr(encoder, "right_pads_source", False):
        return True
    return isinstance(encoder, FairseqLSTMEncoder) and encoder.left_pad


@torch.no_grad()
def forced_statistics(model, sample, hypo_tokens):
    """Re-run the decoder on each sentence's chosen hypothesis and return its per-step lists.

    Args:
        model: a :class:`VisionAttnLSTMModel` (eval mode).
        sample: the fairseq batch the hypotheses were generated from.
        hypo_tokens: one 1-D tensor per sentence of the batch (target tokens, EOS last).

    Returns:
        one dict per sentence: ``{list_name(key): [value per target token]}``.
    """
    decoder = model.decoder
    eos, pad = decoder.dictionary.eos(), decoder.dictionary.pad()
    lengths = [len(t) for t in hypo_tokens]
    prev = torch.full((len(hypo_tokens), max(lengths)), pad, dtype=torch.long)
    for i, tokens in enumerate(hypo_tokens):
        prev[i, 0] = eos
        prev[i, 1 : lengths[i]] = tokens[: lengths[i] - 1].cpu()
    prev = prev.to(sample["net_input"]["src_tokens"].device)

    observer, decoder.step_observer = decoder.step_observer, None
    try:
        encoder_out = model.encoder(sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"])
        _, extra = decoder(prev, encoder_out=encoder_out)
    finally:
        decoder.step_observer = observer
    rows = []
    for i, n in enumerate(lengths):
        rows.append(
            {
                list_name(key): [round(float(v), 4) for v in value[i, :n].float().tolist()]
                for key, value in extra["attention_extras"].items()
                if value.dim() == 2
            }
        )
    return rows


class RightPaddedAlignmentGenerator(SequenceGeneratorWithAlignment):
    """``--print-alignment`` for models whose attention indexes right-padded source positions.

    fairseq reads each hypothesis's attention columns at the positions of the batch's source
    tokens, left-padded by default (``--left-pad-source``): for every sentence shorter than
    the longest in its batch it would print the weights of other positions (the padding's, the
    last tokens' cut off). Here the source tokens the alignment is read against are right-padded
    too, so that column s is source token s in every sentence.
    """

    def _prepare_batch_for_alignment(self, sample, hypothesis):
        src_tokens, src_lengths, prev_output_tokens, tgt_tokens = super()._prepare_batch_for_alignment(
            sample, hypothesis
        )
        src_tokens = utils.convert_padding_direction(src_tokens, self.pad, left_to_right=True)
        return src_tokens, src_lengths, prev_output_tokens, tgt_tokens


@register_task("translation_vision_attn", dataclass=TranslationVisionAttnConfig)
class TranslationVisionAttnTask(TranslationTask):
    cfg: TranslationVisionAttnConfig
    passes_num_updates_to_criterion = True  # train_step below; --latency-warmup-updates needs it

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        tau = cfg.vision_span_threshold
        if math.isnan(tau) or tau <= 0:
            raise VisionAttnError(f"--vision-span-threshold must be a number > 0 (or inf), got {tau}")
        if cfg.monotonic_stop is not None and cfg.monotonic_stop not in STOP_RULES:
            raise VisionAttnError(
                f"--monotonic-stop: unknown rule {cfg.monotonic_stop!r}; "
                f"valid choices: {', '.join(STOP_RULES)}"
            )
        if cfg.monotonic_stop_threshold is not None:
            check_stop_threshold(cfg.monotonic_stop_threshold)
        lagging = cfg.test_waitk_lagging
        if lagging is not None and lagging < 1:
            raise VisionAttnError(f"--test-waitk-lagging must be a positive integer, got {lagging}")
        if cfg.stats_output:
            check_stats_output(cfg.stats_output)
        self.stats_handle = None  # opened by build_generator; fairseq-train refuses the flag
        self.corpus_stats = CorpusStats()
        self.search_stats = SearchStats()
        self._summary_registered = False
        self._interactive_lines = 0  # input lines fairseq-interactive has handed over so far
        # fairseq-interactive's sentences in the order they will be decoded, as 0-indexed input
        # lines (its S-/H- numbers): its batches come sorted by length within a --buffer-size
        # and its samples carry no id
        self._interactive_order = collections.deque()
        self.length_limited = []  # ids of streaming hypotheses cut at --max-len-a/--max-len-b

    def get_checkpoint_dict(self):
        """Saved by fairseq-train in every checkpoint's ``extra_state``: ``--patience``'s state
        (module docstring)."""
        stop = _early_stopping()
        if stop is None or getattr(stop, "best", None) is None:
            return {}
        state = {"best": float(stop.best), "num_runs": int(stop.num_runs)}  # weights_only-safe types
        return {type(self).__name__: {"early_stop": state}}

    def set_checkpoint_dict(self, state):
        """Called by fairseq-train when it resumes from a checkpoint saved by this task."""
        saved, stop = state.get("early_stop"), _early_stopping()
        if saved and stop is not None:
            stop.best, stop.num_runs = saved["best"], saved["num_runs"]
            logger.info(
                f"early stopping resumes at best {saved['best']}, "
                f"{saved['num_runs']} validation(s) without improvement"
            )

    def get_batch_iterator(self, dataset, *args, **kwargs):
        """As fairseq's, but never drops sentences outside training, and a resumed training
        keeps the batches of epoch 1.

        fairseq 0.12.3 (``data_utils.batch_by_size``) discards the last batch when its size is
        not a multiple of ``--required-batch-size-multiple`` (default 8), so fairseq-generate and
        validation would silently skip up to 7 sentences. Only the training subset keeps the
        multiple (it is a speed setting there). For the training subset, an iterator built at a
        later epoch (a resume) groups the sentences with epoch 1's seed, as the iterator that
        an uninterrupted run reuses (module docstring); where fairseq rebuilds the batches every
        epoch anyway (a dataset it cannot reuse an iterator for), nothing changes.
        """
        arguments = _BATCH_ITERATOR.bind(self, dataset, *args, **kwargs).arguments
        del arguments["self"]
        if dataset is not self.datasets.get(self.cfg.train_subset):
            arguments["required_batch_size_multiple"] = 1
            return super().get_batch_iterator(**arguments)
        epoch = arguments.get("epoch", 1)
        rebuilt = arguments.get("update_epoch_batch_itr") or not self.can_reuse_epoch_itr(dataset)
        if epoch == 1 or rebuilt or getattr(self.cfg, "rebuild_batches", False):
            return super().get_batch_iterator(**arguments)
        cached = self.dataset_to_epoch_iter.get(dataset)
        iterator = super().get_batch_iterator(**{**arguments, "epoch": 1})
        if iterator is not cached:  # built now: it starts at the epoch asked for
            iterator.epoch = epoch
        return iterator

    def build_model(self, cfg, from_checkpoint=False):
        """As fairseq's; a model built from the command line (fairseq-train: from scratch or to
        resume) also refuses flags its attention ignores, and takes the test-time policy flags
        (``--monotonic-stop``, ``--monotonic-stop-threshold``, ``--vision-span-threshold``), so
        that validation, hence the best checkpoint and the plateau rule, measures the policy that
        will be decoded. Only eval mode reads them: training is unchanged. A checkpoint does not
        carry them: fairseq-generate, fairseq-interactive and the agent take them again."""
        model = super().build_model(cfg, from_checkpoint)
        attention = getattr(getattr(model, "decoder", None), "attention", None)
        self.built_mechanism = getattr(attention, "mechanism", attention)
        if not from_checkpoint:  # flags typed by the user, not a checkpoint's
            if _is_ours(model):
                refuse_ignored_flags(cfg)
            if self.cfg.test_waitk_lagging is not None:
                raise VisionAttnError(
                    "--test-waitk-lagging is a decoding flag (fairseq-generate, fairseq-interactive): "
                    "train another lagging with --waitk-lagging"
                )
            if self.cfg.stats_output:
                raise VisionAttnError(
                    "--stats-output is a decoding flag (fairseq-generate, fairseq-interactive): "
                    "fairseq-train writes no per-sentence rows"
                )
            self.apply_policy_flags(model, self.built_mechanism)
        return model

    def build_criterion(self, cfg, from_checkpoint=False):
        """As fairseq's, but a criterion that needs a kind of model (``accepts``) is refused here,
        with one line, when the model built before it lacks it: fairseq-train builds the model,
        then the criterion, so this fails before any training step (and before fairseq writes a
        ``crash.pt``)."""
        criterion = super().build_criterion(cfg, from_checkpoint)
        refuse_unaccepted(type(criterion), getattr(self, "built_mechanism", None))
        return criterion

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        """As fairseq's; a criterion with a schedule (``set_num_updates``, e.g. the latency
        term's ``--latency-warmup-updates``) first learns fairseq's update count."""
        if hasattr(criterion, "set_num_updates"):
            criterion.set_num_updates(update_num)
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        """fairseq-interactive's input, one buffer of lines at a time: remember which input
        lines it holds, so that an over-long line can be named and skipped."""
        dataset = super().build_dataset_for_inference(src_tokens, src_lengths, constraints=constraints)
        dataset.vision_attn_first_line = self._interactive_lines + 1
        self._interactive_lines += len(src_lengths)
        return dataset

    def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        """As fairseq's, but a sentence longer than the limits is one clear error, not a
        traceback (fairseq-generate), and fairseq-interactive names the input line, skips it and
        goes on."""
        kept, too_long = dataset.filter_indices_by_size(indices, max_positions)
        first_line = getattr(dataset, "vision_attn_first_line", None)
        if first_line is not None:  # fairseq-interactive: batches follow ``kept``'s order
            limit = max_positions[0] if isinstance(max_positions, (tuple, list)) else max_positions
            for index in too_long:
                size = int(np.atleast_1d(dataset.size(index))[0])
                print(
                    f"warning: input line {first_line + int(index)} skipped: {size} tokens (with EOS), "
                    f"over the limit {limit} (--max-source-positions)",
                    file=sys.stderr,
                    flush=True,
                )
            self._interactive_order.extend(first_line - 1 + int(index) for index in kept)
            return kept
        if len(too_long) > 0 and not ignore_invalid_inputs:
            size = tuple(int(n) for n in np.atleast_1d(dataset.size(too_long[0])))
            raise VisionAttnError(
                f"sentence {too_long[0]} has (source, target) length {size}, over the limits "
                f"{max_positions}: raise --max-source-positions / "
                "--max-target-positions, or skip such sentences with "
                "--skip-invalid-size-inputs-valid-test"
            )
        if len(too_long) > 0:
            logger.warning(f"skipping {len(too_long):,} sentences over the length limits {max_positions}")
        return kept

    def build_generator(self, models, args, **kwargs):
        for model in models:
            self.configure_for_inference(model, print_alignment=bool(getattr(args, "print_alignment", False)))
        if self.cfg.stats_output and self.stats_handle is None:  # once the flags are accepted
            self.stats_handle = open_stats_output(self.cfg.stats_output)
        if not any(streaming_attention(model) for model in models):
            if getattr(args, "print_alignment", False) and kwargs.get("seq_gen_cls") is None:
                if all(attends_right_padded(model) for model in models):
                    kwargs["seq_gen_cls"] = RightPaddedAlignmentGenerator
                    extra = kwargs.get("extra_gen_cls_kwargs") or {}
                    kwargs["extra_gen_cls_kwargs"] = {**extra, "print_alignment": args.print_alignment}
            return super().build_generator(models, args, **kwargs)
        if len(models) > 1:
            raise VisionAttnError("simultaneous decoding takes one checkpoint (--path), not an ensemble")
        beam = getattr(args, "beam", 1)
        if beam != 1:
            if any(word == "--beam" or word.startswith("--beam=") for word in sys.argv):
                logger.warning(
                    f"--beam {beam} ignored: streaming archs decode greedily (simultaneous decoding)"
                )
            with contextlib.suppress(Exception):  # fairseq's own lines ("... with beam=N") then say 1
                args.beam = 1
        return SimultaneousGenerator(
            models,
            self.target_dictionary,
            max_len_a=getattr(args, "max_len_a", 0),
            max_len_b=getattr(args, "max_len_b", 200),
            min_len=getattr(args, "min_len", 1),
        )

    def configure_for_inference(self, model, print_alignment=False):
        """Hand this task's generation flags to a model's attention, or refuse them clearly.

        Memory attention computes its effective alignment alpha . beta only for
        ``--print-alignment``, so that a search step reads nothing of source length.
        """
        decoder = getattr(model, "decoder", None)
        attention = getattr(decoder, "attention", None)
        attention = getattr(attention, "mechanism", attention)  # under a temperature wrapper
        if hasattr(attention, "expose_alignment"):
            attention.expose_alignment = print_alignment
        self.apply_policy_flags(model, attention)
        lagging = self.cfg.test_waitk_lagging
        if lagging is not None:
            set_generation_flag(
                model,
                attention,
                "lagging",
                lagging,
                "--test-waitk-lagging",
                "a wait-k checkpoint (--arch lstm_waitk)",
            )
        if hasattr(decoder, "step_observer"):
            decoder.step_observer = self.search_stats.observe

    def apply_policy_flags(self, model, attention):
        """Hand ``--vision-span-threshold``, ``--monotonic-stop`` and ``--monotonic-stop-threshold``
        (when given) to a model's attention, or refuse a model that lacks them in one line."""
        tau = self.cfg.vision_span_threshold
        if not math.isinf(tau):
            set_generation_flag(
                model,
                attention,
                "span_threshold",
                tau,
                "--vision-span-threshold",
                "a model with flexible attention (--arch lstm_flexible)",
            )
        stop = getattr(self.cfg, "monotonic_stop", None)
        if stop is not None:
            set_generation_flag(
                model,
                attention,
                "stop_rule",
                stop,
                "--monotonic-stop",
                "a model with a monotonic head (--arch lstm_monotonic, lstm_mocha or lstm_milk)",
            )
        q = getattr(self.cfg, "monotonic_stop_threshold", None)
        if q is not None:
            set_generation_flag(
                model,
                attention,
                "stop_threshold",
                q,
                "--monotonic-stop-threshold",
                "a model with a monotonic head (--arch lstm_monotonic, lstm_mocha or lstm_milk)",
            )

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        hypos = super().inference_step(generator, models, sample, prefix_tokens, constraints)
        self._record(models[0], sample, hypos)
        return hypos

    def _record(self, model, sample, hypos):
        if not self._summary_registered:
            atexit.register(self._print_summary)
            self._summary_registered = True
        best = [h[0]["tokens"] for h in hypos]
        per_step = self._per_token_statistics(model, sample, hypos, best)
        src_lengths = sample["net_input"]["src_lengths"].tolist()
        if "id" in sample:
            ids = sample["id"].tolist()
        elif len(self._interactive_order) >= len(best):  # fairseq-interactive: input lines
            ids = [self._interactive_order.popleft() for _ in best]
        else:  # a caller that filtered nothing through this task: numbered as they come
            ids = list(range(self.corpus_stats.sentences, self.corpus_stats.sentences + len(best)))
        target = sample.get("target")  # absent in fairseq-interactive
        for i, sample_id in enumerate(ids):
            row = {"id": sample_id, "src_len": int(src_lengths[i]), "hypo_len": len(best[i])}
            row.update(per_step[i])
            if "delays" in hypos[i][0]:  # simultaneous decoding: the delays it wrote with
                row["delays"] = hypos[i][0]["delays"]
                scores = dict(hypos[i][0]["latency"])  # AL, AP, DAL on the hypothesis length
                if target is not None:  # LAAL with the reference (EOS included, like hypo_len)
                    row["ref_len"] = int(target[i].ne(self.tgt_dict.pad()).sum())
                    scores.update(
                        latency_scores(row["delays"], row["src_len"], row["ref_len"], metrics=("LAAL",))
                    )
                row.update({name: round(value, 4) for name, value in scores.items()})
                if hypos[i][0].get("length_limited"):
                    row["length_limited"] = True
                    self.length_limited.append(sample_id)
            self.corpus_stats.add(row)
            if self.stats_handle is not None:
                write_row(self.stats_handle, row)
        if self.stats_handle is not None:
            self.stats_handle.flush()

    def _per_token_statistics(self, model, sample, hypos, best):
        """Per-token lists of the chosen hypotheses: from the search where it kept them
        (simultaneous decoding), else, only for --stats-output, from one teacher-forced pass
        over the chosen hypotheses (beam search does not keep them per hypothesis)."""
        if all("step_statistics" in h[0] for h in hypos):
            return [h[0]["step_statistics"] for h in hypos]
        if not self.cfg.stats_output or not _is_ours(model):
            return [{}] * len(best)
        return forced_statistics(model, sample, best)

    def _print_summary(self):
        if self.corpus_stats.sentences:
            print(format_summary(self.corpus_stats, self.search_stats), flush=True)
        if self.length_limited:
            ids = sorted(self.length_limited)
            shown = ", ".join(map(str, ids[:10])) + (" ..." if len(ids) > 10 else "")
            print(
                f"warning: {len(ids)} of {self.corpus_stats.sentences} hypotheses were cut at the length "
                f"limit (--max-len-a * |x| + --max-len-b) where the model had not written EOS (ids {shown}); "
                "their AL can be negative: see docs/simultaneous.md, 'Negative AL'",
                file=sys.stderr,
                flush=True,
            )
        if self.stats_handle is not None:
            self.stats_handle.close()
            sort_rows_by_id(self.cfg.stats_output)


def _early_stopping():
    """fairseq-train's ``should_stop_early`` (it keeps ``best`` and ``num_runs`` as function
    attributes), or None outside fairseq-train. ``python -m fairseq_cli.train`` runs that module
    as ``__main__``, not under its own name."""
    for module in ("fairseq_cli.train", "__main__"):
        stop = getattr(sys.modules.get(module), "should_stop_early", None)
        if stop is not None:
            return stop
    return None


def _is_ours(model):
    return hasattr(getattr(model, "decoder", None), "step_observer")
