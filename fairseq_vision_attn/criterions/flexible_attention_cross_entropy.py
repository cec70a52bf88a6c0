"""``--criterion flexible_attention_cross_entropy``: Shu & Nakayama's fine-tuning objective.

    J = sum_i [ -log p(y_i | x_i) ] - beta * (1 / T_i) sum_t g_i(t)            (Eq. 9)

beta is ``--gt-regularizer-weight`` (paper: 0.1 for one epoch of fine-tuning from a model trained
with beta = 0). The cross-entropy term is fairseq's label-smoothed one (``--label-smoothing``,
default 0), summed over tokens like every fairseq criterion; the regulariser is summed over
sentences, each sentence contributing the mean of g(t) over its real target tokens (EOS
included). Logged: ``g_mean`` (mean g(t) over target tokens), as a training and validation
metric.
"""

from dataclasses import dataclass, field

from fairseq import metrics, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)

from ..errors import VisionAttnError
from . import common


@dataclass
class FlexibleAttentionCrossEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    gt_regularizer_weight: float = field(
        default=0.0,
        metadata={"help": "beta of Shu & Nakayama Eq. 9: reward a strong position penalty g(t)"},
    )


def gt_regularizer(g, target_mask):
    """sum_i (1/T_i) sum_t g_i(t). g: batch x tgt_len; target_mask: batch x tgt_len (True = real)."""
    g = g.float() * target_mask
    return (g.sum(1) / target_mask.sum(1).clamp(min=1)).sum()


@register_criterion("flexible_attention_cross_entropy", dataclass=FlexibleAttentionCrossEntropyConfig)
class FlexibleAttentionCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    def __init__(
        self,
        task,
        sentence_avg,
        label_smoothing,
        gt_regularizer_weight=0.0,
        ignore_prefix_size=0,
        report_accuracy=False,
    ):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        if not gt_regularizer_weight >= 0:  # also catches NaN
            raise VisionAttnError(f"--gt-regularizer-weight must be >= 0, got {gt_regularizer_weight}")
        self.beta = gt_regularizer_weight

    #: what a model must have for this criterion (checked when the task builds it, and again here)
    NEEDS = (
        "--criterion flexible_attention_cross_entropy needs a model with flexible attention "
        "(--arch lstm_flexible)"
    )

    @staticmethod
    def accepts(mechanism) -> bool:
        """True for an attention mechanism that reports g(t) (flexible attention)."""
        return getattr(mechanism, "registry_name", None) == "flexible"

    def forward(self, model, sample, reduce=True):
        # 1) the usual forward pass and label-smoothed cross-entropy, 2) g(t) of every step
        net_output, loss, nll_loss, extras = common.forward_with_extras(
            self, model, sample, reduce, "g", self.NEEDS
        )
        target_mask = sample["target"].ne(self.padding_idx)
        regularizer = gt_regularizer(extras["g"], target_mask)
        # 3) Eq. 9: subtract beta * sum_i mean_t g_i(t)
        if self.beta > 0:
            loss = loss - self.beta * regularizer
        g_sum = (extras["g"].float() * target_mask).sum().data
        sample_size, logging_output = common.logging_output(
            self, model, net_output, sample, loss, nll_loss, g_sum=g_sum
        )
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        g_sum = sum(log.get("g_sum", 0) for log in logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        metrics.log_scalar("g_mean", utils.item(g_sum) / max(ntokens, 1), ntokens, round=4)
