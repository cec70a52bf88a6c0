"""Progress of a fairseq run on the terminal, its full output in a log (standard library only).

    fairseq-train ... 2>&1 | python recipes/progress.py --name NAME --log FILE --max-epoch M
    python recipes/progress.py --explain FILE     # the one line that says why a run failed

The filter appends every line to FILE and prints (on stderr) one line per validated epoch (validation loss,
BLEU when fairseq computes it, time so far and roughly how long is left at this pace), and one
line when fairseq reports the end of training. ``--explain`` prints the last error line of a log
(an exception or an ``error:`` line), or its last line when it has none.
"""

import argparse
import re
import sys
import time

VALID = re.compile(r"epoch (\d+) \| valid on '[^']*' subset \| loss ([-\d.]+)")
BLEU = re.compile(r"\| bleu ([-\d.]+)")
DONE = re.compile(r"done training in ([\d.]+) seconds")
ERROR = re.compile(r"^(?:[\w.]*(?:Error|Exception)\b|.*\berror: )")
NOT_ERRORS = ("Warning", "warnings.warn")


def minutes(seconds):
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def follow(stream, log, name, max_epoch, out=sys.stderr):
    start, first = time.time(), None
    for line in stream:
        log.write(line)
        log.flush()
        valid = VALID.search(line)
        if valid:
            epoch = int(valid.group(1))
            first = epoch if first is None else first
            elapsed = time.time() - start
            text = f"{name}: epoch {epoch}/{max_epoch} valid loss {valid.group(2)}"
            bleu = BLEU.search(line)
            if bleu:
                text += f" bleu {bleu.group(1)}"
            text += f" | {minutes(elapsed)} so far"
            if max_epoch > epoch:
                per_epoch = elapsed / (epoch - first + 1)
                text += f", about {minutes(per_epoch * (max_epoch - epoch))} left at most"
            print(text, file=out, flush=True)
        done = DONE.search(line)
        if done:
            print(f"{name}: done ({minutes(float(done.group(1)))} of training)", file=out, flush=True)


def explain(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines = [line.rstrip() for line in handle if line.strip()]
    errors = [line for line in lines if ERROR.match(line) and not any(w in line for w in NOT_ERRORS)]
    return (errors or lines or ["(empty log)"])[-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--name", default="fairseq")
    parser.add_argument("--log")
    parser.add_argument("--max-epoch", type=int, default=0)
    parser.add_argument("--explain", metavar="LOG")
    args = parser.parse_args()
    if args.explain:
        print(explain(args.explain))
        return 0
    if not args.log:
        parser.error("--log is required to follow a run")
    with open(args.log, "a", encoding="utf-8") as log:
        follow(sys.stdin, log, args.name, args.max_epoch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
