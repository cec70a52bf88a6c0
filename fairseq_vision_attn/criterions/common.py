"""What the package's criteria share: reading the attention's per-step statistics and fairseq's
usual logging output."""

from fairseq import utils

from ..errors import VisionAttnError


def attention_extras(net_output):
    """The decoder's stacked per-step statistics (``batch x tgt_len [x src_len]``), or {}."""
    extra = net_output[1]
    return extra.get("attention_extras", {}) if isinstance(extra, dict) else {}


def refuse_unaccepted(criterion, mechanism):
    """One line when ``criterion`` (a criterion class with ``accepts`` and ``NEEDS``) cannot train
    a model with this attention ``mechanism``; criteria without ``accepts`` take any model."""
    accepts = getattr(criterion, "accepts", None)
    if accepts is not None and mechanism is not None and not accepts(mechanism):
        name = getattr(mechanism, "registry_name", type(mechanism).__name__)
        raise VisionAttnError(f"{criterion.NEEDS}; this model's attention is {name!r}")


def forward_with_extras(criterion, model, sample, reduce, key, needs):
    """The forward pass, fairseq's label-smoothed cross-entropy and the per-step statistics;
    a model whose attention does not report ``key`` is refused (``needs``: which archs do)."""
    net_output = model(**sample["net_input"])
    loss, nll_loss = criterion.compute_loss(model, net_output, sample, reduce=reduce)
    extras = attention_extras(net_output)
    if key not in extras:
        attention = getattr(getattr(model, "decoder", None), "attention", None)
        name = getattr(attention, "registry_name", type(model).__name__)
        raise VisionAttnError(f"{needs}; this model's attention is {name!r}")
    return net_output, loss, nll_loss, extras


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
