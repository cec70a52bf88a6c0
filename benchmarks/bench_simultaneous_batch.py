"""Simultaneous decoding throughput: whole batches against one sentence at a time (issue 6).

    python benchmarks/bench_simultaneous_batch.py [--archs lstm_milk lstm_waitk] [--sentences 128]
        [--batch 64] [--repeats 3]

The same fresh model (1-layer 256-unit unidirectional LSTM encoder and LSTM decoder, vocabulary
1000, monotonic energy bias 0 so that heads stop at varied positions) decodes the same random
sources (lengths 10-30 + EOS) with :class:`fairseq_vision_attn.simultaneous.SimultaneousGenerator`,
greedy, every output cut at |x| tokens (``max_len_a 1``) so that both ways write the same
tokens; batched (``--batch`` sentences per call) and one sentence per call alternate
``--repeats`` times in one process, one thread. Prints sentences/second and the ratio of the
medians, and checks that both ways wrote the same tokens and delays.
"""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import fresh_model  # noqa: E402

from fairseq_vision_attn.simultaneous import SimultaneousGenerator  # noqa: E402


def sources(n, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(10, 31, (1,), generator=g))
        tokens = torch.randint(4, vocab, (length + 1,), generator=g)
        tokens[-1] = 2  # EOS
        out.append(tokens)
    return out


def batches(srcs, size, pad=1):
    for start in range(0, len(srcs), size):
        chunk = srcs[start : start + size]
        width = max(len(s) for s in chunk)
        tokens = torch.full((len(chunk), width), pad, dtype=torch.long)
        for i, s in enumerate(chunk):
            tokens[i, width - len(s) :] = s  # left-padded, as fairseq batches sources
        yield {"net_input": {"src_tokens": tokens, "src_lengths": torch.tensor([len(s) for s in chunk])}}


def decode_all(model, generator, srcs, size):
    out = []
    for sample in batches(srcs, size):
        out += [(h[0]["tokens"].tolist(), h[0]["delays"]) for h in generator.generate([model], sample)]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--archs", nargs="+", default=["lstm_milk", "lstm_waitk"])
    parser.add_argument("--sentences", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    srcs = sources(args.sentences, 1000)
    print("arch\tbatched sent/s\tone-at-a-time sent/s\tratio")
    for arch in args.archs:
        head = {} if arch == "lstm_waitk" else {"monotonic_energy_bias_init": 0.0}  # a head that moves
        model = fresh_model(arch, 1000, **head)
        generator = SimultaneousGenerator([model], model.decoder.dictionary, max_len_a=1.0, max_len_b=0)
        rates = {args.batch: [], 1: []}
        results = {}
        for _ in range(args.repeats):
            for size in (args.batch, 1):
                start = time.perf_counter()
                results[size] = decode_all(model, generator, srcs, size)
                rates[size].append(len(srcs) / (time.perf_counter() - start))
        assert results[args.batch] == results[1], "batched and single decoding differ"
        batched, single = statistics.median(rates[args.batch]), statistics.median(rates[1])
        print(f"{arch}\t{batched:.1f}\t{single:.1f}\t{batched / single:.1f}x", flush=True)


if __name__ == "__main__":
    main()
