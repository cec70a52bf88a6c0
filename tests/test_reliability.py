"""Reliability through the real command lines (issue 8): a training run killed with SIGKILL in
the middle of an epoch resumes to the same result, and two processes over gloo train like one
process with the same effective batch, for each criterion of the package."""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

from .conftest import REPO, run_cli

pytestmark = pytest.mark.slow

# (arch, criterion flags): one per criterion of the package, and fairseq's own for lstm_global
RUNS = [
    ("lstm_global", ["--criterion", "cross_entropy"]),
    ("lstm_flexible", ["--criterion", "flexible_attention_cross_entropy", "--gt-regularizer-weight", "0.1"]),
    ("lstm_milk", ["--criterion", "latency_augmented_cross_entropy", "--latency-weight", "0.1"]),
]
IDS = [arch for arch, _ in RUNS]


@pytest.fixture(scope="module")
def copy_data(tmp_path_factory):
    """1,200 copy pairs: with --max-tokens 200, about 55 updates per epoch."""
    root = tmp_path_factory.mktemp("copy")
    toy = [
        sys.executable,
        "-m",
        "fairseq_vision_attn.toydata",
        "--task",
        "copy",
        "--out-dir",
        str(root / "raw"),
    ]
    toy += ["--train-size", "1200", "--valid-size", "50", "--test-size", "10", "--vocab-size", "10"]
    run_cli(toy + ["--min-len", "2", "--max-len", "8", "--seed", "2"], cwd=REPO)
    pre = ["fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt", "--joined-dictionary"]
    pre += ["--trainpref", str(root / "raw/train"), "--validpref", str(root / "raw/valid")]
    run_cli(pre + ["--destdir", str(root / "data-bin"), "--workers", "1"], cwd=REPO)
    return root / "data-bin"


def train_cmd(data_bin, save_dir, arch, criterion, *extra):
    cmd = [
        "fairseq-train",
        str(data_bin),
        "--user-dir",
        "fairseq_vision_attn",
        "--task",
        "translation_vision_attn",
    ]
    cmd += ["--arch", arch, *criterion, "--encoder-embed-dim", "16", "--encoder-hidden-size", "16"]
    cmd += ["--decoder-embed-dim", "16", "--decoder-hidden-size", "16", "--decoder-out-embed-dim", "16"]
    cmd += ["--optimizer", "adam", "--lr", "0.003", "--max-tokens", "200", "--max-epoch", "2", "--cpu"]
    cmd += ["--num-workers", "0", "--seed", "5", "--save-dir", str(save_dir), "--no-epoch-checkpoints"]
    cmd += ["--log-format", "simple", "--log-interval", "5", "--required-batch-size-multiple", "1"]
    return cmd + list(extra)


def updates_and_valid_loss(save_dir):
    state = torch.load(os.path.join(save_dir, "checkpoint_last.pt"), weights_only=True)
    return state["optimizer_history"][-1]["num_updates"], state


def epoch_summaries(log, split):
    """{epoch: {metric: value}} from fairseq's '| train | epoch 001 | loss 2.5 | ...' lines."""
    out = {}
    for line in log.splitlines():
        match = re.search(rf"\| {split} \| epoch (\d+) \| (.*)", line)
        if match:
            fields = [f.strip().split(" ", 1) for f in match.group(2).split("|")]
            out[int(match.group(1))] = {k: v for k, v in (f for f in fields if len(f) == 2)}
    return out


@pytest.mark.parametrize("arch,criterion", RUNS, ids=IDS)
def test_resume_after_sigkill_mid_epoch(arch, criterion, copy_data, tmp_path):
    save = ["--save-interval-updates", "20", "--keep-interval-updates", "1"]
    reference = run_cli(train_cmd(copy_data, tmp_path / "ref", arch, criterion, *save), cwd=REPO)
    ref_updates, ref_state = updates_and_valid_loss(tmp_path / "ref")

    killed_dir = tmp_path / "killed"
    cmd = train_cmd(copy_data, killed_dir, arch, criterion, *save)
    log_path = tmp_path / "killed.log"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 300
        # kill after the mid-epoch checkpoint of update 20, before epoch 1 ends
        while time.time() < deadline and proc.poll() is None:
            text = log_path.read_text()
            if "checkpoint_1_20.pt" in text and re.search(r"num_updates=2[5-9]", text):
                break
            time.sleep(0.05)
        assert proc.poll() is None, (
            "training ended before it could be killed:\n" + log_path.read_text()[-2000:]
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert "| train | epoch 001" not in log_path.read_text(), "killed too late: epoch 1 had ended"
    killed_updates, _ = updates_and_valid_loss(killed_dir)
    assert 20 <= killed_updates < ref_updates

    resumed = run_cli(cmd, cwd=REPO)
    assert "Loaded checkpoint" in resumed.stdout + resumed.stderr
    updates, state = updates_and_valid_loss(killed_dir)
    assert updates == ref_updates
    ref_valid = epoch_summaries(reference.stdout + reference.stderr, "valid")[2]
    valid = epoch_summaries(resumed.stdout + resumed.stderr, "valid")[2]
    assert float(valid["loss"]) == pytest.approx(float(ref_valid["loss"]), abs=0.02), (valid, ref_valid)
    for name, tensor in ref_state["model"].items():  # the package keeps no other training state
        torch.testing.assert_close(state["model"][name], tensor, rtol=1e-3, atol=1e-3, msg=name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("arch,criterion", RUNS, ids=IDS)
def test_two_gloo_ranks_train_like_one_process(arch, criterion, copy_data, tmp_path):
    """Two ranks each take every other batch; one process with --update-freq 2 takes the same
    pairs of batches per update, so losses and the package's metrics must agree."""
    quiet = ["--dropout", "0", "--max-epoch", "1", "--disable-validation"]
    if arch == "lstm_milk":
        quiet += ["--monotonic-noise-var", "0"]
    single = run_cli(
        train_cmd(copy_data, tmp_path / "one", arch, criterion, *quiet, "--update-freq", "2"), cwd=REPO
    )
    port = free_port()
    dist = ["--distributed-world-size", "2", "--distributed-init-method", f"tcp://127.0.0.1:{port}"]
    dist += ["--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp", "--distributed-no-spawn"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    procs = []
    for rank in range(2):
        cmd = train_cmd(
            copy_data, tmp_path / "two", arch, criterion, *quiet, *dist, "--distributed-rank", str(rank)
        )
        procs.append(
            subprocess.Popen(
                cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
            )
        )
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs[0][-3000:] + outputs[1][-3000:]
    one = epoch_summaries(single.stdout + single.stderr, "train")[1]
    two = epoch_summaries(outputs[0], "train")[1]
    assert one["num_updates"] == two["num_updates"]
    metrics = [m for m in ("loss", "nll_loss", "g_mean", "dal", "ap", "latency_loss") if m in one]
    assert "loss" in metrics
    for metric in metrics:
        assert float(two[metric]) == pytest.approx(float(one[metric]), rel=2e-3, abs=2e-3), (metric, one, two)
