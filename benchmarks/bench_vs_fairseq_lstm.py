"""lstm_global against fairseq's own ``--arch lstm`` at the same sizes, side by side.

    python benchmarks/bench_vs_fairseq_lstm.py --data-bin DATA_BIN [--updates 150] [--rounds 2]

Both models: 1-layer bidirectional LSTM encoder and LSTM decoder, 256 units, 256-d embeddings,
Adam, max-tokens 4000, CPU. fairseq's ``lstm`` uses dot-product attention with input feeding;
``lstm_global`` uses additive (Bahdanau) attention. The runs alternate (ours, theirs, ours,
theirs ...) so that machine load affects both alike; the script prints training words/second
(from fairseq-train's own ``wps``) and fairseq-generate sentences and tokens per second (beam
5) for each run, and the ratio of the medians. The two models write outputs of different
lengths after a short training, so tokens/second is the fairer decoding figure. Without
``--data-bin`` it generates a toy corpus.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [
    "--encoder-embed-dim",
    "256",
    "--encoder-hidden-size",
    "256",
    "--decoder-embed-dim",
    "256",
    "--decoder-hidden-size",
    "256",
    "--decoder-out-embed-dim",
    "256",
    "--dropout",
    "0.2",
]
SYSTEMS = {
    "lstm_global": [
        "--user-dir",
        "fairseq_vision_attn",
        "--task",
        "translation_vision_attn",
        "--arch",
        "lstm_global",
    ],
    # --user-dir only for its torch 2.6+ checkpoint-loading fix: the model is fairseq's own
    "fairseq lstm": [
        "--user-dir",
        "fairseq_vision_attn",
        "--task",
        "translation",
        "--arch",
        "lstm",
        "--encoder-bidirectional",
    ],
}


DEVICE_FLAGS = ["--cpu"]  # --device cuda empties it: fairseq then trains and decodes on the GPU


def set_device(device):
    DEVICE_FLAGS[:] = ["--cpu"] if device == "cpu" else []


def run(cmd):
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return proc.stdout + proc.stderr


def train(name, data_bin, save_dir, updates, system=None, criterion=("--criterion", "cross_entropy")):
    """Median fairseq-train ``wps`` of ``updates`` updates (``system``: model/task flags,
    default ``SYSTEMS[name]``)."""
    log = run(
        [
            "fairseq-train",
            data_bin,
            *(system or SYSTEMS[name]),
            *SIZES,
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--clip-norm",
            "3",
            "--max-tokens",
            "4000",
            "--max-update",
            str(updates),
            *DEVICE_FLAGS,
            "--num-workers",
            "0",
            "--seed",
            "1",
            "--save-dir",
            save_dir,
            "--no-epoch-checkpoints",
            "--disable-validation",
            "--log-format",
            "simple",
            "--log-interval",
            "10",
            *criterion,
        ]
    )
    # every train_inner line after the first (warm-up) interval
    wps = [float(m) for m in re.findall(r"train_inner \|.*?wps=([\d.]+)", log)[1:]]
    if not wps:
        sys.exit(f"{name}: no train_inner wps in the log; use more --updates")
    return statistics.median(wps)


def generate(name, data_bin, save_dir, subset):
    task = SYSTEMS[name][: SYSTEMS[name].index("--arch")]
    log = run(
        [
            "fairseq-generate",
            data_bin,
            *task,
            "--path",
            os.path.join(save_dir, "checkpoint_last.pt"),
            "--gen-subset",
            subset,
            "--beam",
            "5",
            "--batch-size",
            "64",
            *DEVICE_FLAGS,
            "--quiet",
        ]
    )
    match = re.search(r"Translated ([\d,]+) sentences .*? \(([\d.]+) sentences/s, ([\d.]+) tokens/s", log)
    return float(match.group(2)), float(match.group(3))


def toy_data(root):
    raw, data_bin = os.path.join(root, "raw"), os.path.join(root, "data-bin")
    run(
        [
            sys.executable,
            "-m",
            "fairseq_vision_attn.toydata",
            "--task",
            "reverse",
            "--out-dir",
            raw,
            "--train-size",
            "20000",
            "--valid-size",
            "500",
            "--test-size",
            "500",
            "--vocab-size",
            "1000",
            "--min-len",
            "5",
            "--max-len",
            "30",
        ]
    )
    run(
        [
            "fairseq-preprocess",
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--trainpref",
            f"{raw}/train",
            "--validpref",
            f"{raw}/valid",
            "--testpref",
            f"{raw}/test",
            "--destdir",
            data_bin,
            "--joined-dictionary",
            "--workers",
            "2",
        ]
    )
    return data_bin


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-bin", help="binarized corpus (default: a generated toy corpus)")
    parser.add_argument("--updates", type=int, default=150, help="training updates per run")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per system")
    parser.add_argument("--gen-subset", default="test")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    set_device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        data_bin = args.data_bin or toy_data(tmp)
        metrics = ("train wps", "generate sent/s", "generate tokens/s")
        results = {name: {metric: [] for metric in metrics} for name in SYSTEMS}
        for round_ in range(args.rounds):
            for name in SYSTEMS:
                save_dir = os.path.join(tmp, f"{name.replace(' ', '_')}_{round_}")
                results[name]["train wps"].append(train(name, data_bin, save_dir, args.updates))
                sentences, tokens = generate(name, data_bin, save_dir, args.gen_subset)
                results[name]["generate sent/s"].append(sentences)
                results[name]["generate tokens/s"].append(tokens)
                print(
                    f"round {round_ + 1} {name}: train {results[name]['train wps'][-1]:.0f} wps, "
                    f"generate {sentences:.1f} sent/s, {tokens:.0f} tokens/s",
                    flush=True,
                )
    print("\nmetric\tlstm_global\tfairseq lstm\tratio (ours / fairseq)")
    for metric in metrics:
        ours = statistics.median(results["lstm_global"][metric])
        theirs = statistics.median(results["fairseq lstm"][metric])
        print(f"{metric}\t{ours:.1f}\t{theirs:.1f}\t{ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
