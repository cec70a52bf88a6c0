"""Decoding speed of fixed-size memory attention against global attention and no attention.

    python benchmarks/bench_memory_speed.py [--lengths 10 50 100 200] [--sizes 16 32 64]
        [--beam 10] [--repeats 3]

Britz et al. (2017) Table 1 measure the decoding time of the toy copy task, where the target is
as long as the source. Here the same sources are decoded by ``lstm_noattn``, ``lstm_memory``
(each K of ``--sizes``) and ``lstm_global``, side by side in one process, alternating systems on
every repeat so that machine load hits all alike. Each system encodes the source (memory
attention builds C there) and then runs one incremental decoder step per target token with
forced targets (as many steps as source tokens), ``--beam`` hypotheses as one batch, each step
followed by the reordering beam search does (incremental state and encoder output, by a random
order), the shape and work fairseq's beam search gives the decoder. Fresh models with the
paper's toy sizes (2x256 biLSTM encoder, 2x256 LSTM decoder, vocabulary 20); time does not
depend on the weights. Reported: seconds per sentence (encoder + decoder) and the ratio to
``lstm_global``.
"""

import argparse
import statistics
import time

import torch
from common import fresh_model, machine_load_note, spread


@torch.no_grad()
def decode_time(model, src, targets, orders):
    """Encoder, then one incremental step per target token, each followed by the reordering that
    fairseq's beam search does between steps (incremental state and encoder output)."""
    start = time.perf_counter()
    encoder_out = model.encoder(src, torch.full((src.size(0),), src.size(1)))
    state = {}
    for t in range(targets.size(1)):
        model.decoder(targets[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
        model.decoder.reorder_incremental_state(state, orders[t])
        encoder_out = model.encoder.reorder_encoder_out(encoder_out, orders[t])
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[10, 50, 100, 200])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64], help="memory sizes K")
    parser.add_argument("--beam", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=3, help="sentences per length and repeat")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vocab-size", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    systems = [("lstm_noattn", fresh_model("lstm_noattn", args.vocab_size, layers=2))]
    systems += [
        (f"lstm_memory K={k}", fresh_model("lstm_memory", args.vocab_size, layers=2, memory_size=k))
        for k in args.sizes
    ]
    systems += [("lstm_global", fresh_model("lstm_global", args.vocab_size, layers=2))]
    eos = systems[0][1].encoder.dictionary.eos()
    vocab = len(systems[0][1].encoder.dictionary)

    g = torch.Generator().manual_seed(1)
    print("length\tsystem\ts/sentence median [min-max]\tspeed-up vs lstm_global")
    for length in args.lengths:
        batch = []
        for _ in range(args.sentences):
            src = torch.randint(4, vocab, (1, length), generator=g).repeat(args.beam, 1)
            src[:, -1] = eos
            targets = torch.cat([torch.full((args.beam, 1), eos), src[:, :-1]], dim=1)  # copy task
            orders = [torch.randint(0, args.beam, (args.beam,), generator=g) for _ in range(length)]
            batch.append((src, targets, orders))
        times = {name: [] for name, _ in systems}
        for _ in range(args.repeats):
            for name, model in systems:
                times[name].append(sum(decode_time(model, *sentence) for sentence in batch) / len(batch))
        reference = statistics.median(times["lstm_global"])
        for name, _ in systems:
            median = statistics.median(times[name])
            print(f"{length}\t{name}\t{spread(times[name], digits=4)}\t{reference / median:.2f}x", flush=True)
    print(machine_load_note())


if __name__ == "__main__":
    main()
