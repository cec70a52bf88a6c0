"""Decoding speed of flexible attention with and without the vision-span threshold.

    python benchmarks/bench_flexible_speed.py [--flexible-ckpt F.pt --global-ckpt G.pt]
        [--lengths 100 300 1000] [--steps 40] [--beam 5] [--repeats 3]

Decodes the same long sources with ``lstm_global``, ``lstm_flexible`` at tau = inf and at
tau = 1.0 (and any ``--taus``), side by side in one process, alternating systems on every
repeat so that machine load hits all alike. As in Shu & Nakayama sec. 5.5, the decoder is fed
the same target tokens at every step (forced decoding), so every system runs the same number
of steps; ``--beam`` hypotheses per sentence are decoded as one batch, the shape beam search
gives the decoder. Reported: decoder seconds per sentence (incremental steps, encoder excluded:
it is the same for all systems), the average window size, and time ratios.

With checkpoints, sources are random in-vocabulary tokens fed to the trained models. Without,
the models are freshly initialised at 256 units with a 3000-word vocabulary (the size of
Shu's character-level Japanese side, where the paper measured speed), and the strength bias
b_g of the flexible model is set to ``--strength-bias`` (default 2.0: g about 0.88, a strongly
penalising model); the window sizes printed say what was measured.
"""

import argparse
import statistics
import time

import torch
from common import fresh_model, machine_load_note, spread
from fairseq import checkpoint_utils


def flexible_or_global(arch, strength_bias, vocab_size):
    model = fresh_model(arch, vocab_size)
    if arch == "lstm_flexible":
        torch.nn.init.constant_(model.decoder.attention.strength_v.bias, strength_bias)
    return model


def load_model(path):
    models, _ = checkpoint_utils.load_model_ensemble([path])
    return models[0].eval()


@torch.no_grad()
def decode_time(model, src, targets):
    """Seconds for the incremental decoder over targets (batch x steps); mean window size."""
    encoder_out = model.encoder(src, torch.full((src.size(0),), src.size(1)))
    state, windows = {}, []
    start = time.perf_counter()
    for t in range(targets.size(1)):
        _, extra = model.decoder(targets[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
        windows.append(extra["attention_extras"]["window_size"])
    elapsed = time.perf_counter() - start
    return elapsed, float(torch.cat(windows).float().mean())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flexible-ckpt")
    parser.add_argument("--global-ckpt")
    parser.add_argument("--lengths", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--taus", type=float, nargs="+", default=[1.0])
    parser.add_argument("--steps", type=int, default=40, help="forced decoder steps per sentence")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--strength-bias", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=3000,
        help="fresh models' vocabulary (Shu's char-level Japanese side: 3000)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    if bool(args.flexible_ckpt) != bool(args.global_ckpt):
        parser.error("give both --flexible-ckpt and --global-ckpt, or neither")
    if args.flexible_ckpt:
        glob, flex = load_model(args.global_ckpt), load_model(args.flexible_ckpt)
    else:
        glob = flexible_or_global("lstm_global", None, args.vocab_size)
        flex = flexible_or_global("lstm_flexible", args.strength_bias, args.vocab_size)
    systems = [("global", glob, float("inf")), ("flexible tau=inf", flex, float("inf"))]
    systems += [(f"flexible tau={tau:g}", flex, tau) for tau in args.taus]

    g = torch.Generator().manual_seed(1)
    vocab = len(flex.encoder.dictionary)
    tgt_vocab = len(flex.decoder.dictionary)
    print("src_len\tsystem\tdecoder s/sentence median [min-max]\tmean window\tspeed-up vs tau=inf")
    for length in args.lengths:
        src = torch.randint(4, vocab, (1, length), generator=g).repeat(args.beam, 1)
        src[:, -1] = flex.encoder.dictionary.eos()
        targets = torch.randint(4, tgt_vocab, (1, args.steps), generator=g).repeat(args.beam, 1)
        targets[:, 0] = flex.decoder.dictionary.eos()
        times = {name: [] for name, _, _ in systems}
        windows = {}
        for _ in range(args.repeats):
            for name, model, tau in systems:
                if hasattr(model.decoder.attention, "span_threshold"):
                    model.decoder.attention.span_threshold = tau
                elapsed, windows[name] = decode_time(model, src, targets)
                times[name].append(elapsed)
        reference = statistics.median(times["flexible tau=inf"])
        for name, _, _ in systems:
            median = statistics.median(times[name])
            print(
                f"{length}\t{name}\t{spread(times[name])}\t{windows[name]:.1f}\t{reference / median:.2f}x",
                flush=True,
            )
    print(machine_load_note())


if __name__ == "__main__":
    main()
