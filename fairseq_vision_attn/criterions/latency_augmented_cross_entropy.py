"""``--criterion latency_augmented_cross_entropy``: MILk's latency-augmented objective.

    L = sum_sentences [ -log p(y | x) + lambda * C(g) ]                        (MILk Eq. 15)

lambda is ``--latency-weight`` (>= 0; 0 = plain cross-entropy, bit for bit), C is
``--latency-metric`` {dal, ap} computed on the delays the model's streaming attention reports
(:mod:`..latency`): in training the expected delays g_i = sum_j j alpha_ij (Eq. 16), which are
differentiable; in validation (``model.eval()``) the hard delays of the test-time policy under
teacher forcing. The cross-entropy is fairseq's label-smoothed one (``--label-smoothing``,
default 0) summed over target tokens, as every fairseq criterion; the latency term is summed
over sentences, each sentence's C on its own |x| and |y| (EOS included on both sides), so
both terms are divided alike by fairseq's sample size.

``--latency-warmup-updates N`` (default 0) leaves the latency term out of the first N training
updates (the task passes fairseq's update count to the criterion; validation always includes it,
so that the plateau rule and the best checkpoint see one objective): the model first learns as
full attention what it needs to read, then lambda applies (why a head that can stop decisively
from the start needs it: docs/results.md, "MILk's energy ceiling"). Only ``--task
translation_vision_attn`` passes the count: any other task with a warm-up is refused.

Logged as training and validation metrics, averaged over sentences: ``dal`` and ``ap`` (both,
whichever drives the loss), and ``latency_loss`` (lambda * C, summed, per sentence).
"""

from dataclasses import dataclass, field

from fairseq import metrics, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.dataclass import ChoiceEnum

from ..errors import VisionAttnError
from ..latency import average_proportion, differentiable_average_lagging
from . import common

LATENCY_METRICS = {"dal": differentiable_average_lagging, "ap": average_proportion}


@dataclass
class LatencyAugmentedCrossEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    latency_weight: float = field(
        default=0.0,
        metadata={"help": "lambda of MILk Eq. 15: weight of the latency term (>= 0; 0 = none)"},
    )
    latency_metric: ChoiceEnum(list(LATENCY_METRICS)) = field(
        default="dal",
        metadata={"help": "the latency C(g) of Eq. 15, on expected delays: dal or ap"},
    )
    latency_warmup_updates: int = field(
        default=0,
        metadata={
            "help": "training updates at the start without the latency term (0 = none; "
            "validation always includes it)"
        },
    )


@register_criterion("latency_augmented_cross_entropy", dataclass=LatencyAugmentedCrossEntropyConfig)
class LatencyAugmentedCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    def __init__(
        self,
        task,
        sentence_avg,
        label_smoothing,
        latency_weight=0.0,
        latency_metric="dal",
        latency_warmup_updates=0,
        ignore_prefix_size=0,
        report_accuracy=False,
    ):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        if not latency_weight >= 0 or latency_weight == float("inf"):  # also catches NaN
            raise VisionAttnError(f"--latency-weight must be a finite number >= 0, got {latency_weight}")
        metric = str(latency_metric)
        if metric not in LATENCY_METRICS:
            raise VisionAttnError(
                f"--latency-metric: unknown metric {metric!r}; valid choices: {', '.join(LATENCY_METRICS)}"
            )
        if not latency_warmup_updates >= 0:
            raise VisionAttnError(
                f"--latency-warmup-updates must be a whole number >= 0, got {latency_warmup_updates}"
            )
        if latency_warmup_updates > 0 and not getattr(task, "passes_num_updates_to_criterion", False):
            raise VisionAttnError(
                "--latency-warmup-updates needs --task translation_vision_attn (the task that tells "
                f"the criterion fairseq's update count); this task is {type(task).__name__}"
            )
        self.latency_weight = latency_weight
        self.latency_metric = metric
        self.latency_warmup_updates = latency_warmup_updates
        self.num_updates = 0  # fairseq's update count, set by the task before each training step

    def set_num_updates(self, num_updates):
        self.num_updates = num_updates

    def current_latency_weight(self, model):
        """lambda, or 0 in training during the first ``--latency-warmup-updates`` updates."""
        if model.training and self.num_updates < self.latency_warmup_updates:
            return 0.0
        return self.latency_weight

    #: what a model must have for this criterion (checked when the task builds it, and again here)
    NEEDS = (
        "--criterion latency_augmented_cross_entropy needs a streaming arch (lstm_monotonic, "
        "lstm_mocha, lstm_milk or lstm_waitk)"
    )

    @staticmethod
    def accepts(mechanism) -> bool:
        """True for a streaming attention mechanism (it reports delays)."""
        return bool(getattr(mechanism, "streaming", False))

    def forward(self, model, sample, reduce=True):
        net_output, loss, nll_loss, extras = common.forward_with_extras(
            self, model, sample, reduce, "delay", self.NEEDS
        )
        target_mask = sample["target"].ne(self.padding_idx)  # batch x tgt_len, EOS included
        src_len = sample["net_input"]["src_lengths"]  # batch, EOS included
        delays = extras["delay"]
        latency = {name: fn(delays, src_len, target_mask) for name, fn in LATENCY_METRICS.items()}
        weight = self.current_latency_weight(model)
        latency_loss = weight * latency[self.latency_metric].sum()
        if weight > 0:
            loss = loss + latency_loss.to(loss.dtype)
        sample_size, logging_output = common.logging_output(
            self,
            model,
            net_output,
            sample,
            loss,
            nll_loss,
            dal_sum=latency["dal"].sum().data,
            ap_sum=latency["ap"].sum().data,
            latency_loss_sum=latency_loss.data,
        )
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        nsentences = max(sum(log.get("nsentences", 0) for log in logging_outputs), 1)
        for key in ("dal", "ap", "latency_loss"):
            total = sum(log.get(f"{key}_sum", 0) for log in logging_outputs)
            metrics.log_scalar(key, utils.item(total) / nsentences, nsentences, round=3)
