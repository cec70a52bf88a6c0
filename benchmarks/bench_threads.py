"""The quick start's training with one and two torch threads, on idle cores and beside a busy one.

    python benchmarks/bench_threads.py [--epochs 2] [--rounds 2] [--cap 120]

One quick-start training (`recipes/quickstart.sh`'s toy reversal corpus and sizes, `lstm_global`,
``--epochs`` epochs, nothing saved) timed whole, as ``fairseq-train`` runs it, with
``OMP_NUM_THREADS`` 1 and 2, each alone and beside one busy process (a Python loop in a session of
its own, standing for a training started from another terminal). The four settings alternate
for ``--rounds`` rounds; each figure is the median wall time with its min and max. A run past
``--cap`` seconds is stopped and counted as the cap (the table then says ">"). Two cores is the
machine this is about. The session matters where Linux groups the CPU time by session
(``/proc/sys/kernel/sched_autogroup_enabled`` = 1, the default of many distributions): the
other session's group then gets its fair share of the core the two OpenMP workers also need,
one worker waits for its turn at every parallel region, and the other's spin-waiting counts
against the training's own share. Started in the same session, the same loop costs the
two-thread run about 2x, not more.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import machine_load_note  # noqa: E402

SIZES = (
    "--encoder-embed-dim 64 --encoder-hidden-size 64 --decoder-embed-dim 64 --decoder-hidden-size 128 "
    "--decoder-out-embed-dim 64 --dropout 0.0 --optimizer adam --lr 0.005 --clip-norm 3 --max-tokens 1000"
).split()


def run(command, **kwargs):
    proc = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise SystemExit(f"{command[0]} failed: {proc.stderr.strip().splitlines()[-1:]}")


def toy_data(root):
    """The quick start's corpus (recipes/quickstart.sh)."""
    raw, data_bin = os.path.join(root, "raw"), os.path.join(root, "data-bin")
    toy = "--task reverse --train-size 6000 --valid-size 200 --test-size 200 --vocab-size 20 --seed 1"
    run(
        [
            sys.executable,
            "-m",
            "fairseq_vision_attn.toydata",
            *toy.split(),
            *"--min-len 4 --max-len 16".split(),
            "--out-dir",
            raw,
        ]
    )
    flags = "--source-lang src --target-lang tgt --joined-dictionary --workers 1"
    splits = f"--trainpref {raw}/train --validpref {raw}/valid --testpref {raw}/test --destdir {data_bin}"
    run(["fairseq-preprocess", *flags.split(), *splits.split()])
    return data_bin


def train_seconds(data_bin, threads, epochs, cap):
    """Wall seconds of one training, or None past ``cap``."""
    task = "--user-dir fairseq_vision_attn --task translation_vision_attn --arch lstm_global"
    rest = f"--max-epoch {epochs} --criterion cross_entropy --seed 1 --cpu --num-workers 0 --no-save"
    command = ["fairseq-train", data_bin, *task.split(), *SIZES, *rest.split()]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore")
    start = time.perf_counter()
    try:
        run(command, env=env, timeout=cap)
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cap", type=float, default=120.0, help="seconds after which a run is stopped")
    args = parser.parse_args()
    settings = [(1, False), (2, False), (1, True), (2, True)]
    times = {setting: [] for setting in settings}
    with tempfile.TemporaryDirectory() as tmp:
        data_bin = toy_data(tmp)
        for round_ in range(args.rounds):
            for threads, busy in settings:
                other = None
                if busy:  # a session of its own, as a training started from another terminal
                    other = subprocess.Popen(
                        [sys.executable, "-c", "while True: pass"], start_new_session=True
                    )
                try:
                    seconds = train_seconds(data_bin, threads, args.epochs, args.cap)
                finally:
                    if other is not None:
                        other.kill()
                        other.wait()
                times[threads, busy].append(seconds)
                shown = f"{seconds:.1f} s" if seconds is not None else f"> {args.cap:.0f} s (stopped)"
                where = "beside a busy process" if busy else "idle"
                print(f"round {round_ + 1}: {threads} thread(s), {where}: {shown}", flush=True)
    base = statistics.median(args.cap if v is None else v for v in times[1, False])
    print("\ntorch threads\tother busy processes\twall s, median (min-max)\tagainst 1 thread idle")
    for (threads, busy), values in times.items():
        capped = any(v is None for v in values)
        values = [args.cap if v is None else v for v in values]
        median = statistics.median(values)
        mark = ">" if capped and median >= args.cap else ""
        print(
            f"{threads}\t{int(busy)}\t{mark}{median:.1f} ({min(values):.1f}-{max(values):.1f})\t"
            f"{mark}{median / base:.2f}x"
        )
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled", encoding="utf-8") as handle:
            autogroup = handle.read().strip()
    except OSError:
        autogroup = "unknown"
    print(f"{machine_load_note()}; sched_autogroup_enabled {autogroup}")


if __name__ == "__main__":
    main()
