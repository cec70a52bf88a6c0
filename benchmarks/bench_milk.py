"""MILk benchmarks (issue 5): training speed against lstm_global, and the expected-alignment
function against fairseq's compiled ``expected_alignment_from_p_choose``.

    python benchmarks/bench_milk.py train [--data-bin DATA_BIN] [--updates 100] [--rounds 2]
    python benchmarks/bench_milk.py alignment [--batch 32] [--tgt-len 30] [--lengths 50 200 500]
    python benchmarks/bench_milk.py kernels [--device cpu|cuda]

``train``: fairseq-train words/second (its own ``wps``, median of the logged intervals after
the first) of ``lstm_global`` (cross-entropy) and ``lstm_milk`` (``--criterion
latency_augmented_cross_entropy --latency-weight 0.2``), 256 units, alternating runs so that
machine load hits both alike; prints the ratio of the medians. Without ``--data-bin`` it uses a
generated toy corpus (as ``bench_vs_fairseq_lstm.py``).

``alignment``: on the same random p (batch x tgt_len x src_len, p in (0.05, 0.95)) and no
padding, the milliseconds of fairseq's op (forward only: it has no backward), of ours forward
(:func:`fairseq_vision_attn.monotonic.expected_alignment_from_p`, no mass preservation, to match)
and ours forward + backward, interleaved repeats in one process, one thread, median [min-max]
(``common.py``'s protocol); and the maximum difference of each from a float64 evaluation of the
same recurrence (ours), with fairseq's default eps = 1e-6.

``kernels``: why a GPU trains ``lstm_milk`` at half ``lstm_global``'s speed (issue 21, item 7)
where a CPU does not. A recurrent decoder's training step on a GPU is bound by the kernels it
launches per target step and by the host time spent launching them, not by arithmetic; this
measures both without a GPU: the aten operations (views excluded: they launch nothing; about one
kernel each) dispatched by one forward and backward pass of a training batch, per target step
(the difference between 20 and 10 target steps, divided by 10), at 256 units, and the time that
pass takes per target step at 16 units, where the arithmetic is negligible and what remains is
Python and dispatch (interleaved repeats, median), for fairseq's ``lstm`` and our archs in
training mode, dropout 0. On a CPU the monotonic heads take the log-space form a GPU takes (the
CPU's linear form is switched off: ``fairseq_vision_attn.monotonic.LINEAR_FORM_DEVICES``);
``--device cuda`` measures on the GPU itself.
"""

import argparse
import collections
import os
import statistics
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_vs_fairseq_lstm import set_device, toy_data, train  # noqa: E402
from common import fresh_model, interleaved, machine_load_note, spread  # noqa: E402

from fairseq_vision_attn import monotonic  # noqa: E402
from fairseq_vision_attn.monotonic import expected_alignment_from_p  # noqa: E402

OURS = ["--user-dir", "fairseq_vision_attn", "--task", "translation_vision_attn", "--arch"]
SYSTEMS = {
    "lstm_global": (OURS + ["lstm_global"], ("--criterion", "cross_entropy")),
    "lstm_milk": (
        OURS + ["lstm_milk"],
        ("--criterion", "latency_augmented_cross_entropy", "--latency-weight", "0.2"),
    ),
}


def bench_train(args):
    set_device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        data_bin = args.data_bin or toy_data(tmp)
        wps = {name: [] for name in SYSTEMS}
        for round_ in range(args.rounds):
            for name, (system, criterion) in SYSTEMS.items():
                save_dir = os.path.join(tmp, f"{name}_{round_}")
                wps[name].append(train(name, data_bin, save_dir, args.updates, system, criterion))
                print(f"round {round_ + 1} {name}: train {wps[name][-1]:.0f} wps", flush=True)
    ours, base = statistics.median(wps["lstm_milk"]), statistics.median(wps["lstm_global"])
    print("\nmetric\tlstm_global\tlstm_milk\tratio (milk / global)")
    print(f"train wps\t{base:.0f}\t{ours:.0f}\t{ours / base:.2f}x")
    print(machine_load_note())


def fairseq_reference():
    import fairseq

    sys.path.insert(0, os.path.dirname(fairseq.__file__))  # its examples/ use absolute imports
    from examples.simultaneous_translation.utils.monotonic_attention import expected_alignment_from_p_choose

    return expected_alignment_from_p_choose


def alignment_row(reference, src_len, args):
    """One table row: timings and errors of both functions at one source length."""
    torch.manual_seed(0)
    p = torch.rand(args.batch, args.tgt_len, src_len) * 0.9 + 0.05
    mask = torch.zeros(args.batch, src_len, dtype=torch.bool)
    exact = expected_alignment_from_p(p.double(), mask)
    theirs, ours = reference(p, mask), expected_alignment_from_p(p, mask)

    def ours_backward():
        q = p.clone().requires_grad_(True)
        expected_alignment_from_p(q, mask).sum().backward()

    times = interleaved(
        {
            "fairseq": lambda: reference(p, mask),
            "ours": lambda: expected_alignment_from_p(p, mask),
            "ours_bwd": ours_backward,
        },
        args.repeats,
    )
    ratio = statistics.median(times["ours"]) / statistics.median(times["fairseq"])
    return (
        f"{src_len}\t{spread(times['fairseq'], 1000, 1)}\t{spread(times['ours'], 1000, 1)}\t"
        f"{spread(times['ours_bwd'], 1000, 1)}\t{ratio:.2f}x\t"
        f"{(theirs.double() - exact).abs().max():.2e}\t{(ours.double() - exact).abs().max():.2e}"
    )


def bench_alignment(args):
    reference = fairseq_reference()
    print(
        "src_len\tfairseq fwd ms\tours fwd ms\tours fwd+bwd ms\tours / fairseq (fwd)\t"
        "fairseq max |diff|\tours max |diff|"
    )
    for src_len in args.lengths:
        print(alignment_row(reference, src_len, args), flush=True)
    print(machine_load_note())


def bench_kernels(args):
    from fairseq.data import Dictionary
    from fairseq.models.lstm import LSTMModel
    from fairseq.models.lstm import base_architecture as fairseq_lstm_defaults
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        views = {"t", "detach", "view", "select", "unsqueeze", "squeeze", "slice", "transpose", "expand"}
        views |= {"_unsafe_view", "unsafe_split", "alias", "permute", "as_strided", "split", "unbind"}

        def __init__(self):
            super().__init__()
            self.ops = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name not in self.views:
                self.ops[name] += 1
            return func(*args, **(kwargs or {}))

    def fairseq_lstm(dim):
        torch.manual_seed(0)
        d = Dictionary()
        for i in range(100):
            d.add_symbol(f"w{i}")
        flags = dict(arch="lstm", encoder_bidirectional=True, dropout=0.0, criterion="cross_entropy")
        for name in ("encoder_embed_dim", "encoder_hidden_size", "decoder_embed_dim"):
            flags[name] = dim
        flags.update(decoder_hidden_size=dim, decoder_out_embed_dim=dim)
        model_args = argparse.Namespace(**flags)
        fairseq_lstm_defaults(model_args)
        task = argparse.Namespace(source_dictionary=d, target_dictionary=d)
        return LSTMModel.build_model(model_args, task)

    def training_pass(model, tgt_len):
        """One forward and backward pass of a batch of 8 sentences, source 12, target tgt_len."""
        torch.manual_seed(0)
        src = torch.randint(4, 100, (8, 12), device=args.device)
        lengths = torch.full((8,), 12, device=args.device)
        prev = torch.randint(4, 100, (8, tgt_len), device=args.device)

        def run():
            out, extra = model(src, lengths, prev)
            loss = out.float().logsumexp(-1).sum()
            delay = ((extra or {}).get("attention_extras") or {}).get("delay")
            if delay is not None:  # the latency loss's path
                loss = loss + delay.sum()
            loss.backward()
            if args.device == "cuda":
                torch.cuda.synchronize()

        return run

    def ops_per_step(model):
        counts = []
        for tgt_len in (10, 20):
            with Counter() as counter:
                training_pass(model, tgt_len)()
            counts.append(counter.ops)
        return {name: (counts[1][name] - counts[0][name]) / 10 for name in counts[1]}

    if args.device == "cpu":
        monotonic.LINEAR_FORM_DEVICES = ()  # the log-space form, as on a GPU
    archs = ("lstm_global", "lstm_waitk", "lstm_monotonic", "lstm_mocha", "lstm_milk")
    builders = {"fairseq lstm": fairseq_lstm}
    builders.update({arch: (lambda dim, arch=arch: fresh_model(arch, 100, dim=dim)) for arch in archs})
    rows = {name: ops_per_step(build(256).to(args.device).train()) for name, build in builders.items()}
    # host time per target step with (almost) no arithmetic: 16 units, interleaved repeats
    tiny = {name: build(16).to(args.device).train() for name, build in builders.items()}
    passes = {(name, n): training_pass(model, n) for name, model in tiny.items() for n in (10, 20)}
    times = interleaved(passes, args.repeats)
    per_step = {
        name: (statistics.median(times[(name, 20)]) - statistics.median(times[(name, 10)])) / 10 * 1e6
        for name in tiny
    }
    base = sum(rows["lstm_global"].values())
    print(
        "system\toperations per target step (forward + backward)\tratio to lstm_global\t"
        "host time per target step at 16 units (us)\tratio to lstm_global\tthe most frequent operations"
    )
    for name, ops in rows.items():
        total = sum(ops.values())
        top = ", ".join(f"{op} {n:g}" for op, n in sorted(ops.items(), key=lambda kv: -kv[1])[:5] if n)
        host, host_ratio = per_step[name], per_step[name] / per_step["lstm_global"]
        print(f"{name}\t{total:g}\t{total / base:.2f}x\t{host:.0f}\t{host_ratio:.2f}x\t{top}")
    print(
        f"# device: {args.device}; views excluded; batch 8, source 12, (target 20 - target 10) / 10; "
        f"host time: median of {args.repeats} interleaved repeats, one thread"
    )
    print(machine_load_note())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    t = sub.add_parser("train")
    t.add_argument("--data-bin", help="binarized corpus (default: a generated toy corpus)")
    t.add_argument("--updates", type=int, default=100)
    t.add_argument("--rounds", type=int, default=2)
    t.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: the GPU goal of issue 21")
    a = sub.add_parser("alignment")
    a.add_argument("--batch", type=int, default=32)
    a.add_argument("--tgt-len", type=int, default=30)
    a.add_argument("--lengths", type=int, nargs="+", default=[50, 200, 500])
    a.add_argument("--repeats", type=int, default=15)
    a.add_argument("--threads", type=int, default=1)
    k = sub.add_parser("kernels")
    k.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    k.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(getattr(args, "threads", 1))
    {"train": bench_train, "alignment": bench_alignment, "kernels": bench_kernels}[args.what](args)


if __name__ == "__main__":
    main()
