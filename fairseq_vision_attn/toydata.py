"""Synthetic parallel corpora (Britz et al. 2017, sec. 4.1), ready for fairseq-preprocess.

    python -m fairseq_vision_attn.toydata --task reverse --out-dir toy --max-len 20
    # or the console script: vision-attn-toydata ...

writes ``{train,valid,test}.{src,tgt}``: one sentence per line, tokens ``t0 .. t{V-1}``.

Tasks:
- ``copy``: the target is the source (Britz et al.'s toy task: vocabulary 20, random lengths
  up to L, 100,000 training and 1,000 validation examples);
- ``reverse``: the target is the source reversed (long-range, anti-diagonal alignment);
- ``reorder``: the source reversed inside consecutive blocks of ``--block-size`` tokens
  (local reordering, a diagonal band alignment).
"""

import argparse
import os
import random
import sys

from .errors import one_line_errors

TASKS = ("copy", "reverse", "reorder")


def transform(tokens, task, block_size=3):
    """Target tokens for ``tokens`` under ``task`` (see module docstring)."""
    if task == "copy":
        return list(tokens)
    if task == "reverse":
        return list(reversed(tokens))
    if task == "reorder":
        out = []
        for start in range(0, len(tokens), block_size):
            out.extend(reversed(tokens[start : start + block_size]))
        return out
    raise ValueError(f"unknown toy task {task!r}; valid choices: {', '.join(TASKS)}")


def sample_sentence(rng, vocab_size, min_len, max_len):
    length = rng.randint(min_len, max_len)
    return [f"t{rng.randrange(vocab_size)}" for _ in range(length)]


def write_split(out_dir, split, size, args, rng):
    with (
        open(os.path.join(out_dir, f"{split}.src"), "w") as src,
        open(os.path.join(out_dir, f"{split}.tgt"), "w") as tgt,
    ):
        for _ in range(size):
            tokens = sample_sentence(rng, args.vocab_size, args.min_len, args.max_len)
            src.write(" ".join(tokens) + "\n")
            tgt.write(" ".join(transform(tokens, args.task, args.block_size)) + "\n")


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def get_parser():
    parser = argparse.ArgumentParser(prog="vision-attn-toydata", description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=TASKS, default="copy")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--train-size", type=positive, default=100_000)
    parser.add_argument("--valid-size", type=positive, default=1_000)
    parser.add_argument("--test-size", type=positive, default=1_000)
    parser.add_argument("--vocab-size", type=positive, default=20)
    parser.add_argument("--min-len", type=positive, default=1)
    parser.add_argument("--max-len", type=positive, default=10, help="L in Britz et al.")
    parser.add_argument("--block-size", type=positive, default=3, help="block for --task reorder")
    parser.add_argument("--seed", type=int, default=1)
    return parser


@one_line_errors
def main(argv=None):
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.min_len > args.max_len:
        parser.error(f"--min-len ({args.min_len}) must not exceed --max-len ({args.max_len})")
    os.makedirs(args.out_dir, exist_ok=True)
    rng = random.Random(args.seed)
    for split, size in (("train", args.train_size), ("valid", args.valid_size), ("test", args.test_size)):
        write_split(args.out_dir, split, size, args, rng)
    print(f"wrote {args.task} corpora to {args.out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
