"""What the package's criteria share: reading the attention's per-step statistics and fairseq's
usual logging output."""

from fairseq import utils


def attention_extras(net_output):
    """The decoder's stacked per-step statistics (``batch x tgt_len [x src_len]``), or {}."""
    extra = net_output[1]
    return extra.get("attention_extras", {}) if isinstance(extra, dict) else {}


def logging_output(criterion, model, net_output, sample, loss, nll_loss, **extra):
    """(sample_size, logging_output) as fairseq's label-smoothed cross-entropy makes them, plus
    ``extra`` entries (the criterion's own sums)."""
    sample_size = sample["target"].size(0) if criterion.sentence_avg else sample["ntokens"]
    output = {
        "loss": loss.data,
        "nll_loss": nll_loss.data,
        "ntokens": sample["ntokens"],
        "nsentences": sample["target"].size(0),
        "sample_size": sample_size,
        **extra,
    }
    if criterion.report_accuracy:
        n_correct, total = criterion.compute_accuracy(model, net_output, sample)
        output["n_correct"] = utils.item(n_correct.data)
        output["total"] = utils.item(total.data)
    return sample_size, output
