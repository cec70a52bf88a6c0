"""Shared helpers: small models built exactly as fairseq builds them from the command line."""

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys

import pytest
import torch

# The package before fairseq: its register() (run on import) quiets fairseq's import-time INFO
# line "Please install tensorboardX", which under pytest-xdist a worker printed after the summary.
import fairseq_vision_attn  # noqa: F401  (registers everything)

# isort: split
from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
from filelock import FileLock

from fairseq_vision_attn.models.lstm_attention import MODEL_NAME

# One thread per process, unless the caller chose: pytest.ini runs two workers on two cores, and
# a torch process on two threads beside another busy core runs about 1.5x slower than on one
# (a toy recipe training: 34.6 s against 23.2 s, docs/benchmarks.md). The tests' own torch calls
# and every command they start (the recipes, fairseq's commands) inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(REPO, "..", "shared", "data")


def our_archs():
    return sorted(
        a
        for a, m in ARCH_MODEL_REGISTRY.items()
        if m.__name__ == "VisionAttnLSTMModel" and not a.endswith("_shu")
    )


def make_dictionary(size=12):
    d = Dictionary()
    for i in range(size):
        d.add_symbol(f"w{i}")
    d.finalize(padding_factor=1)
    return d


class FakeTask:
    def __init__(self, src_dict, tgt_dict):
        self.source_dictionary = src_dict
        self.target_dictionary = tgt_dict


def build_model(arch, seed=0, **overrides):
    """Build ``arch`` with small sizes through the same path fairseq-train uses."""
    torch.manual_seed(seed)
    args = argparse.Namespace(
        arch=arch,
        encoder_embed_dim=8,
        encoder_hidden_size=6,
        decoder_embed_dim=7,
        decoder_hidden_size=9,
        decoder_out_embed_dim=5,
        dropout=0.0,
        local_window_d=2,
    )
    for key, value in overrides.items():
        setattr(args, key, value)
    ARCH_CONFIG_REGISTRY[arch](args)
    model_cls = ARCH_MODEL_REGISTRY[arch]
    model = model_cls.build_model(args, FakeTask(make_dictionary(), make_dictionary(11)))
    return model.eval()


def random_batch(model, lengths, tgt_len=6, seed=0, left_pad=True):
    """Left-padded source batch as fairseq's translation task makes it."""
    g = torch.Generator().manual_seed(seed)
    src_dict = model.encoder.dictionary
    tgt_dict = model.decoder.dictionary
    n, s = len(lengths), max(lengths)
    src = torch.full((n, s), src_dict.pad(), dtype=torch.long)
    for i, length in enumerate(lengths):
        tokens = torch.randint(src_dict.nspecial, len(src_dict), (length,), generator=g)
        tokens[-1] = src_dict.eos()
        if left_pad:
            src[i, s - length :] = tokens
        else:
            src[i, :length] = tokens
    prev = torch.randint(tgt_dict.nspecial, len(tgt_dict), (n, tgt_len), generator=g)
    prev[:, 0] = tgt_dict.eos()
    return src, torch.tensor(lengths), prev


def run_cli(args, cwd, check=True, timeout=600, input=None):
    """Run a real console script (fairseq-train ...) from the repository environment."""
    exe = shutil.which(args[0], path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [exe or args[0], *args[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return proc


def run_clis(commands, cwd, jobs=None):
    """run_cli for several independent commands, os.cpu_count() at a time (each one thread)."""
    with concurrent.futures.ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
        return list(pool.map(lambda args: run_cli(args, cwd), commands))


def imported_modules(stderr):
    """The modules named in Python's own import log (``python -X importtime``'s stderr)."""
    return {line.split("|")[-1].strip() for line in stderr.splitlines() if "|" in line}


def made_once(tmp_path_factory, name, make):
    """The folder ``name``, filled by ``make(folder)`` once per test run and then only read.

    Under pytest-xdist each worker has its own temporary folder, all in one parent: the first
    worker to ask makes the folder there under a file lock, the others wait and reuse it (a
    session fixture alone would be made once per worker). A failed ``make`` leaves nothing
    behind, so the next worker to ask tries again and fails in its own tests."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                make(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder


@pytest.fixture(scope="session")
def toy_data_bin(tmp_path_factory):
    """A tiny binarized toy reversal corpus, made with the package's own generator (once per
    test run: tests read it and write nothing into it)."""
    return made_once(tmp_path_factory, "toy", make_toy_data_bin)


def make_toy_data_bin(root):
    run_cli(
        [
            sys.executable,
            "-m",
            "fairseq_vision_attn.toydata",
            "--task",
            "reverse",
            "--out-dir",
            str(root / "raw"),
            "--train-size",
            "300",
            "--valid-size",
            "20",
            "--test-size",
            "12",
            "--vocab-size",
            "10",
            "--min-len",
            "2",
            "--max-len",
            "8",
        ],
        cwd=REPO,
    )
    run_cli(
        [
            "fairseq-preprocess",
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--trainpref",
            str(root / "raw/train"),
            "--validpref",
            str(root / "raw/valid"),
            "--testpref",
            str(root / "raw/test"),
            "--destdir",
            str(root / "data-bin"),
            "--joined-dictionary",
            "--workers",
            "1",
        ],
        cwd=REPO,
    )


__all__ = ["MODEL_NAME"]
