"""The recipes refuse bad settings with one line naming the setting and exit 2, before any work;
they take [DATA_DIR] [OUT_DIR] in that order, resolve relative paths against the directory they
are started from, and report a failed training in one line.

Each refusal case runs the real script; a refusal must come before training or data preparation,
so the output directory is never created and nothing else runs.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
# model sizes a queue row or a training adds after train.sh's own (fairseq takes the last): a
# toy model of these trains 8 epochs in 11 s where the recipes' sizes take 19 s (one thread)
TINY = "--encoder-embed-dim 16 --encoder-hidden-size 16 --decoder-embed-dim 16 --decoder-hidden-size 16"
TINY += " --decoder-out-embed-dim 16"


def run_recipe(script, args, env_extra, cwd=None):
    env = dict(os.environ, **env_extra)
    # the recipes call `python -m ...` and fairseq's CLIs from the active environment (unless
    # the test sets PATH itself)
    if "PATH" not in env_extra:
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return subprocess.run(
        ["bash", str(ROOT / "recipes" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        # as conftest.run_cli: a hang fails the test, a machine busy with a training does not
        timeout=600,
        cwd=cwd,
    )


MEMORY_TOY = {"STAGES": "toy"}


@pytest.mark.parametrize(
    "script, env_extra, message",
    [
        (
            "memory_attention.sh",
            {**MEMORY_TOY, "BASELINES": "noattn lstm_global"},
            "BASELINES: 'lstm_global' is not one of: noattn, global",
        ),
        (
            "memory_attention.sh",
            {**MEMORY_TOY, "SIZES": "16 0"},
            "SIZES / NORM_K / SOFTMAX_K: '0' is not a positive integer",
        ),
        (
            "memory_attention.sh",
            {**MEMORY_TOY, "NORM_K": "x"},
            "SIZES / NORM_K / SOFTMAX_K: 'x' is not a positive integer",
        ),
        (
            "memory_attention.sh",
            {**MEMORY_TOY, "EPOCHS": "ten"},
            "EPOCHS: 'ten' is not a positive integer",
        ),
        (
            "memory_attention.sh",
            {**MEMORY_TOY, "PATIENCE": "0"},
            "PATIENCE: '0' is not a positive integer (epochs without a better validation BLEU)",
        ),
        (
            "memory_attention.sh",
            {**MEMORY_TOY, "SOFTMAX_K": "-4"},
            "SIZES / NORM_K / SOFTMAX_K: '-4' is not a positive integer",
        ),
        (
            "simultaneous.sh",
            {"TEST_WAITK": "2 -1"},
            "TEST_WAITK / TEST_WAITK_FROM: '-1' is not a positive integer",
        ),
        (
            "simultaneous.sh",
            {"TEST_WAITK": "2", "TEST_WAITK_FROM": "4", "WAITK": "3"},
            'TEST_WAITK_FROM=4: WAITK="3" trains no wait-k model with k = 4',
        ),
        ("flexible_attention.sh", {"TAUS": "0.5 x"}, "TAUS: 'x' is not a positive number"),
        ("flexible_attention.sh", {"FT_EPOCHS": "0"}, "FT_EPOCHS: '0' is not a positive integer"),
        (
            "flexible_attention.sh",
            {"MODELS": "no_models"},
            "no_models/flexible_s1/checkpoints/checkpoint_best.pt does not exist",
        ),
        (
            "flexible_attention.sh",
            {"MODELS": "no_models", "SEED": "3"},
            "no_models/flexible_s3/checkpoints/checkpoint_best.pt does not exist",
        ),
        ("flexible_attention.sh", {"SEED": "two"}, "SEED: 'two' is not a seed"),
        ("flexible_attention.sh", {"PAIR": "fren"}, "PAIR: 'fren' is not one of: enja, deen"),
        (
            "flexible_attention.sh",
            {"PAIR": "deen", "MODELS": "no_models:other_models"},
            "no_models/flexible_s1/checkpoints/checkpoint_best.pt does not exist",
        ),
        (
            "flexible_attention.sh",
            {"DATA_BIN": "no_bin"},
            "no_bin has no dict.en.txt (not a data-bin of recipes/prepare_data.sh enja)",
        ),
        (
            "claims/cpu_deen_lanes.sh",
            {"LANE_A": "deen_milk5"},
            "lane row 'deen_milk5' is not QUEUE:NAME (e.g. deen_milk5:milk_0.1_hold_s2)",
        ),
        (
            "claims/cpu_deen_lanes.sh",
            {"LANE_B": "deen_milk5:milk_0.1_hold_s2 deen_nine:x"},
            "lane row 'deen_nine:x': no queue recipes/claims/deen_nine.queue (the queues: cpu_deen ",
        ),
        (
            "claims/cpu_deen_lanes.sh",
            {"LANE_A": "deen_milk5:milk_9_s1"},
            "milk_9_s1 is not a row of recipes/claims/deen_milk5.queue (its rows: milk_0.3_noise16_s2 "
            "milk_0.3_noise16_s3 milk_0.1_hold_s2 milk_0.1_hold_s3)",
        ),
        (
            "claims/cpu_deen_lanes.sh",
            {"LANES": "3"},
            "LANES=3: valid values are 1 (one lane, two threads) and 2 (two lanes side by side, "
            "one thread each)",
        ),
    ],
)
def test_recipes_refuse_bad_settings(tmp_path, script, env_extra, message):
    """A bad setting stops a recipe with exit 2 and one line naming it, before it writes anything."""
    out = tmp_path / "out"
    result = run_recipe(script, [str(tmp_path / "no_data"), str(out)], env_extra)
    assert result.returncode == 2
    assert message in result.stderr
    assert not out.exists()


def path_with_a_marking_python(tmp_path):
    """A PATH whose first `python` only leaves a mark (a file) and fails: (PATH, the mark)."""
    fake, mark = tmp_path / "bin", tmp_path / "python_started"
    fake.mkdir()
    (fake / "python").write_text(f"#!/bin/sh\ntouch {mark}\nexit 1\n")
    (fake / "python").chmod(0o755)
    return f"{fake}{os.pathsep}{os.environ['PATH']}", mark


@pytest.mark.skipif(
    any(os.path.exists(node) for node in ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")),
    reason="a GPU driver's device node exists here: DEVICE=auto asks torch",
)
def test_device_auto_without_a_gpu_driver_starts_no_python(tmp_path):
    """lib.sh's DEVICE=auto is cpu where no GPU driver's device node exists, decided without
    importing torch: a `python` first on PATH that leaves a mark is never started, and the
    recipe's refusal of a bad setting is the same one line (against a real python: 2-3 s)."""
    path, mark = path_with_a_marking_python(tmp_path)
    env = {"PATH": path, "TAUS": "0.5 x"}
    result = run_recipe("flexible_attention.sh", [str(tmp_path / "no_data"), str(tmp_path / "out")], env)
    assert result.returncode == 2 and "TAUS: 'x' is not a positive number" in result.stderr
    assert not mark.exists()
    probe = "source recipes/lib.sh; echo $DEVICE ${DEVICE_FLAGS[*]}"
    env = {**os.environ, **env}
    shown = subprocess.run(["bash", "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
    assert shown.stdout.split() == ["cpu", "--cpu"] and not mark.exists()


def test_install_refuses_an_unknown_extension_set_before_pip(tmp_path):
    """install.sh's FAIRSEQ_EXTENSIONS takes translation or all: another value is refused in
    one line naming both, before anything is installed (a `python` first on PATH that leaves a
    mark is never started)."""
    path, mark = path_with_a_marking_python(tmp_path)
    env = {"PATH": path, "FAIRSEQ_EXTENSIONS": "nat"}
    result = run_recipe("install.sh", [], env)
    assert result.returncode == 2 and not mark.exists()
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("[install] error: FAIRSEQ_EXTENSIONS=nat: valid values are translation")
    assert "and all (" in line


def test_deen_lanes_without_a_data_bin_ask_for_the_corpus(tmp_path):
    """The De-En lanes prepare the data only from a corpus they are given: with neither a
    prepared OUT_DIR/prep nor DATA_DIR they say so in one line, before they write anything."""
    out = tmp_path / "out"
    result = run_recipe("claims/cpu_deen_lanes.sh", ["", str(out)], {})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"[cpu_deen_lanes] error: {out}/prep/data-bin does not exist: give the Multi30k corpus as "
        "DATA_DIR (e.g. ../shared/data/multi30k_de_en)"
    ]
    assert not out.exists()


def test_prepare_data_refuses_unknown_corpus(tmp_path):
    result = run_recipe("prepare_data.sh", ["fren", str(tmp_path / "raw"), str(tmp_path / "out")], {})
    assert result.returncode == 2
    assert "invalid choice: 'fren'" in result.stderr and "'raw', 'enja', 'deen'" in result.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "raw").exists()


def test_flexible_recipe_on_deen_from_models_in_two_folders(tmp_path, toy_data_bin):
    """flexible_attention.sh PAIR=deen with MODELS: the queues' systems found across the
    ':'-separated folders (global_bi_s1 in one, flexible_s1 in the other, as deen_1 and deen_3
    train them), a system without a done marker left out of Table 1, the fine-tuning built with
    the De-En settings (shared embeddings: a model without them would not load the checkpoint),
    test and test1 decoded with BPE removed and Moses detokenization and scored with sacrebleu 13a,
    the span plot from a decoding in the model's own units (its statistics count BPE units)."""
    raw, bin_ = toy_data_bin / "raw", tmp_path / "data-bin"
    for lang, side in (("de", "src"), ("en", "tgt")):
        for split in ("train", "valid", "test"):
            (tmp_path / f"{split}.{lang}").write_text((raw / f"{split}.{side}").read_text())
    prefix = str(tmp_path)
    run_cli(
        ["fairseq-preprocess", "--source-lang", "de", "--target-lang", "en", "--trainpref", f"{prefix}/train"]
        + ["--validpref", f"{prefix}/valid", "--testpref", f"{prefix}/test,{prefix}/test"]  # test, test1
        + ["--destdir", str(bin_), "--joined-dictionary", "--workers", "1"],
        cwd=ROOT,
    )
    deen = [
        "--dropout",
        "0.3",
        "--share-decoder-input-output-embed",
        "--max-tokens",
        "500",
        "--flex-sigma",
        "1.5",
    ]
    first, second = tmp_path / "cpu_1", tmp_path / "cpu_3"
    trained = run_recipe(
        "train.sh",
        ["lstm_flexible", str(bin_), str(second / "flexible_s1"), *deen],
        {"EPOCHS": "1", "DEVICE": "cpu"},
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    # the same model stands in for deen_1's global_bi_s1 (the recipe only decodes that one)
    shutil.copytree(second / "flexible_s1", first / "global_bi_s1")
    (first / "global_bi_s1" / "done").touch()  # as queue.sh marks a finished system; local_s1 has none
    out = tmp_path / "flex"
    env = {
        "PAIR": "deen", "MODELS": f"{first}:{second}", "DATA_BIN": str(bin_), "TAUS": "0.5",
        "FIG3_SUBSETS": "", "SENTENCES": "1", "DEVICE": "cpu",
    }  # fmt: skip
    result = run_recipe("flexible_attention.sh", ["", str(out)], env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "MODELS has no finished local_s1 (no done marker)" in result.stderr
    for subset, table in (("test", "table1.tsv"), ("test1", "table1.test1.tsv")):
        rows = [line.split("\t") for line in (out / table).read_text().splitlines()]
        assert rows[0][2] == f"BLEU ({subset}, sacrebleu -tok 13a, beam 5)"
        assert [row[0] for row in rows[1:3]] == ["global", "flexible(tau=inf)"]
        assert rows[3][0].startswith("flexible(tau=") and rows[4][0].startswith("+fine-tuning(tau=")
        suffix = "" if subset == "test" else ".test1"
        decoded = out / "decode" / f"global{suffix}.txt"
        assert f"'gen_subset': '{subset}'" in (out / "decode" / f"global{suffix}.log").read_text()
        assert "'post_process': 'subword_nmt'" in (out / "decode" / f"global{suffix}.log").read_text()
        lines = decoded.read_text().splitlines()
        assert sum(line.startswith("D-") for line in lines) == 12  # every sentence, detokenized
    ft_log = (out / "lstm_flexible_ft" / "train.log").read_text()
    assert "share_decoder_input_output_embed=True" in ft_log
    spans = next((out / "decode").glob("spans*.log")).read_text()
    assert "'post_process': None" in spans and "'tokenizer': None" in spans
    assert (out / "spans" / "span_1.png").exists()


@pytest.mark.parametrize(
    "script, corpus_file", [("simultaneous.sh", "train.de"), ("memory_attention.sh", "train.en")]
)
def test_recipes_refuse_the_old_argument_order(tmp_path, script, corpus_file):
    """memory_attention.sh and simultaneous.sh took OUT_DIR first; now every recipe takes
    [DATA_DIR] [OUT_DIR]. A corpus given second is recognised and refused in one line."""
    corpus, out = tmp_path / "corpus", tmp_path / "out"
    corpus.mkdir()
    (corpus / corpus_file).write_text("x\n")
    result = run_recipe(script, [str(out), str(corpus)], {})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"[{script[:-3]}] error: the arguments are [DATA_DIR] [OUT_DIR]; {corpus} holds the corpus "
        f"({corpus_file}) and {out} does not: swap them"
    ]


def test_relative_paths_are_the_callers(tmp_path):
    """A relative DATA_BIN is resolved against the directory the recipe was started from (the
    recipe then works from the repository root)."""
    result = run_recipe("train.sh", ["lstm_global", "bin", "exp"], {}, cwd=tmp_path)
    assert result.returncode == 2
    assert f"DATA_BIN {tmp_path}/bin holds no fairseq dictionary" in result.stderr


@pytest.mark.parametrize("script", ["train.sh", "queue.sh", "quickstart.sh", "claims/cpu_deen_lanes.sh"])
def test_recipes_without_fairseq_on_path_say_how_to_get_it(tmp_path, script):
    """Started outside the environment recipes/install.sh made (fairseq-train not on PATH), a
    recipe says so in one line, exit 2, before it writes anything."""
    out, data_bin = tmp_path / "out", str(tmp_path / "bin")
    path = [p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "fairseq-train").exists()]
    args = {
        "train.sh": ["lstm_global", data_bin, str(out)],
        "queue.sh": [str(ROOT / "recipes/claims/enja_1.queue"), data_bin, str(out)],
        "quickstart.sh": [],  # OUT from the environment
        "claims/cpu_deen_lanes.sh": ["", str(out)],
    }[script]
    result = run_recipe(script, args, {"PATH": os.pathsep.join(path), "DEVICE": "cpu", "OUT": str(out)})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"[{Path(script).stem}] error: fairseq-train is not on PATH: activate the environment "
        "recipes/install.sh installed into (. .venv/bin/activate), or run recipes/install.sh"
    ]
    assert not out.exists()


def train_recipe(toy_data_bin, out, epochs, *flags):
    args = ["lstm_global", str(toy_data_bin / "data-bin"), str(out), *flags]
    return run_recipe("train.sh", args, {"EPOCHS": str(epochs), "DEVICE": "cpu"})


def test_a_second_training_into_the_same_folder_is_refused(tmp_path, toy_data_bin):
    """While one training holds OUT_DIR (its lock), a second started into it (the same queue row
    twice) stops at once with one line, exit 2, and leaves the first one's files alone."""
    import fcntl

    out = tmp_path / "exp"
    out.mkdir()
    (out / "train.log").write_text("the first training's log\n")
    with open(out / ".train.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = train_recipe(toy_data_bin, out, 1)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"[train] error: {out} is being trained by another process already (its lock: "
        f"{out}/.train.lock): let it finish, or stop it, and run again"
    ]
    assert (out / "train.log").read_text() == "the first training's log\n"
    assert not (out / "checkpoints").exists()
    # the lock released, the same command trains
    assert train_recipe(toy_data_bin, out, 1).returncode == 0
    assert (out / "checkpoints" / "checkpoint_last.pt").exists()


def test_failed_training_is_one_line(tmp_path, toy_data_bin):
    """fairseq's output goes to the log; the terminal gets the one line that says why."""
    out = tmp_path / "exp"
    result = train_recipe(toy_data_bin, out, 1, "--memory-size", "3")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[0] == f"[train] lstm_global: training, up to 1 epochs (log: {out}/train.log)"
    assert len(lines) == 2 and lines[1].startswith("[train] error: lstm_global: training failed: ")
    assert "--memory-size 3 has no effect here" in lines[1] and "Traceback" not in result.stderr
    assert "--memory-size 3 has no effect here" in (out / "train.log").read_text()


def _hanging_train_env(tmp_path, pid_file):
    """An environment whose fairseq-train prints a warning, writes its pid and sleeps."""
    fake = tmp_path / "fake_bin"
    fake.mkdir()
    train = fake / "fairseq-train"
    train.write_text(
        f"#!/bin/sh\necho 'FutureWarning: torch.cuda.amp.autocast is deprecated' >&2\n"
        f"echo $$ > {pid_file}\nexec sleep 600\n"
    )
    train.chmod(0o755)
    env = dict(os.environ, DEVICE="cpu", EPOCHS="1")
    env["PATH"] = os.pathsep.join([str(fake), os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def test_training_stopped_by_time_limit_says_it_resumes(tmp_path, toy_data_bin):
    env = {**_hanging_train_env(tmp_path, tmp_path / "pid"), "TIME_LIMIT": "1"}
    out = tmp_path / "exp"
    args = ["lstm_global", str(toy_data_bin / "data-bin"), str(out)]
    command = ["bash", str(ROOT / "recipes" / "train.sh"), *args]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 3, run.stderr
    stopped = "lstm_global: stopped at TIME_LIMIT=1 s; it resumes from checkpoint_last.pt on the next run"
    assert f"{stopped} (log: {out}/train.log)" in run.stderr and "training failed" not in run.stderr


def test_training_stopped_by_a_signal_says_it_resumes(tmp_path, toy_data_bin):
    """A training killed from outside (a session's end) is not reported as failed with the log's
    last line (once a FutureWarning) but as stopped, resumable, with exit status 3."""
    pid_file = tmp_path / "pid"
    env = _hanging_train_env(tmp_path, pid_file)
    out = tmp_path / "exp"
    args = ["lstm_global", str(toy_data_bin / "data-bin"), str(out)]
    run = subprocess.Popen(
        ["bash", str(ROOT / "recipes" / "train.sh"), *args], env=env, stderr=subprocess.PIPE, text=True
    )
    for _ in range(600):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        time.sleep(0.1)
    os.kill(int(pid_file.read_text()), signal.SIGTERM)
    _, stderr = run.communicate(timeout=600)
    assert run.returncode == 3, stderr
    stopped = "lstm_global: stopped by signal TERM; it resumes from checkpoint_last.pt on the next run"
    assert f"{stopped} (log: {out}/train.log)" in stderr
    assert "training failed" not in stderr and "FutureWarning" not in stderr


def test_training_prints_one_line_per_epoch(tmp_path, toy_data_bin):
    out = tmp_path / "exp"
    result = train_recipe(toy_data_bin, out, 2, "--max-tokens", "500")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[1].startswith("lstm_global: epoch 1/2 valid loss ") and "left at most" in lines[1]
    assert lines[2].startswith("lstm_global: epoch 2/2 valid loss ") and lines[3].startswith(
        "lstm_global: done"
    )
    assert len(lines) == 4 and (out / "checkpoints" / "checkpoint_best.pt").exists()
    assert "fairseq_cli.train" in (out / "train.log").read_text()  # fairseq's own output is in the log


def test_queue_trains_resumes_skips_and_tabulates(tmp_path, toy_data_bin):
    """recipes/queue.sh: two systems side by side under the one rule, each decoded on valid and
    test as soon as it is trained, a finished system skipped on the next run, one table per
    subset."""
    queue = tmp_path / "queue.txt"
    queue.write_text(
        "# name arch flags\nglobal lstm_global --max-tokens 500\n\n"
        "fairseq_lstm lstm --encoder-bidirectional --max-tokens 500\n"  # fairseq's own arch, same rule
        "milk lstm_milk --max-tokens 500\n"
    )
    out = tmp_path / "claims"
    env = {"EPOCHS": "1", "DEVICE": "cpu", "RULE": "--lr-scheduler fixed", "MONOTONIC_STOP": "cumulative"}
    args = [str(queue), str(toy_data_bin / "data-bin"), str(out)]
    result = run_recipe("queue.sh", args, env)
    assert result.returncode == 0, result.stderr[-2000:]
    names = ["global", "fairseq_lstm", "milk"]
    for name in names:
        assert (out / name / "done").exists() and (out / name / "test.txt").exists()
    table = (out / "table.test.tsv").read_text().splitlines()
    # MONOTONIC_STOP: the monotonic head decoded with the other rule too, the others not
    assert table[0].startswith("system\tBLEU")
    assert [row.split("\t")[0] for row in table[1:]] == names + ["milk@cumulative"]
    assert "'monotonic_stop': 'cumulative'" in (out / "milk" / "test.cumulative.log").read_text()
    assert "fairseq_lstm: epoch 1/1 valid loss" in result.stderr  # progress lines carry the system's name
    # a system is decoded as soon as it is trained, in its slot: the third system starts only
    # after the first to finish has been decoded (a queue cut off later keeps its hypotheses)
    first_decoding = result.stderr.index("[queue] decoding ")
    assert first_decoding < result.stderr.index("[train] milk: training")
    again = run_recipe("queue.sh", args, env)
    assert again.returncode == 0 and again.stderr.count("trained already") == 3
    assert "decoding" not in again.stderr  # the hypotheses are newer than the checkpoints
    # DECODE_ONLY: a system cut before the rule finished it is decoded from its best checkpoint
    # and marked; nothing is trained
    (out / "fairseq_lstm" / "done").unlink()
    (out / "fairseq_lstm" / "test.txt").unlink()
    partial = run_recipe("queue.sh", args, {**env, "DECODE_ONLY": "1"})
    assert partial.returncode == 0 and "training" not in partial.stderr
    assert "decoding fairseq_lstm (test)" in partial.stderr and "decoding global" not in partial.stderr
    rows = [row.split("\t")[0] for row in (out / "table.test.tsv").read_text().splitlines()[1:]]
    assert rows == ["global", "fairseq_lstm (unfinished)", "milk", "milk@cumulative"]


def test_rule_fork_is_the_two_runs_uninterrupted(tmp_path, toy_data_bin):
    """claims/cpu_rule_fork.sh trains the common prefix of two rows that differ only in
    --lr-patience once, forks it at the first epoch without improvement and trains both on:
    each row's validation losses are those of the same row trained alone in one call (a rate of
    0.05 makes the toy loss rise early, and any difference in batches or schedule shows), the
    patience-0 row halves its rate at the fork and the patience-1 row does not; both are decoded.
    Rows that differ in anything else, or a row the queue lacks, are refused in one line."""
    queue = tmp_path / "rule.queue"
    queue.write_text(
        f"a lstm_global {TINY} --max-tokens 500 --lr 0.05\n"
        f"b lstm_global {TINY} --max-tokens 500 --lr 0.05 --lr-patience 1\n"
    )
    data_bin, out = str(toy_data_bin / "data-bin"), tmp_path / "fork"
    env = {"EPOCHS": "6", "DEVICE": "cpu", "PREFIX_THREADS": "1", "SUBSETS": "valid"}
    result = run_recipe("claims/cpu_rule_fork.sh", [str(queue), "a", "b", data_bin, str(out)], env)
    assert result.returncode == 0, result.stderr[-2000:]
    fork = re.search(r"epoch (\d+) did not improve: forking b into a", result.stderr)
    assert fork, result.stderr[-2000:]

    def losses(log):
        return re.findall(r"valid on 'valid' subset \| loss ([0-9.]+)", log.read_text())

    rule = queue_rule().split()
    for name, patience in (("a", "0"), ("b", "1")):
        alone = tmp_path / f"alone_{name}"
        flags = [*rule, *TINY.split(), "--max-tokens", "500", "--lr", "0.05", "--lr-patience", patience]
        alone_env = {**env, "OMP_NUM_THREADS": "1"}
        trained = run_recipe("train.sh", ["lstm_global", data_bin, str(alone), *flags], alone_env)
        assert trained.returncode == 0, trained.stderr[-2000:]
        assert losses(out / name / "train.log") == losses(alone / "train.log"), name
        assert (out / name / "done").exists() and (out / name / "valid.txt").exists()
    step = f"learning-rate step of epoch {fork.group(1)} "
    rates = {
        name: re.search(step + r".*?lr ([0-9.e-]+) -> ([0-9.e-]+)", (out / name / "train.log").read_text())
        for name in "ab"
    }
    assert [float(v) for v in rates["a"].groups()] == [0.05, 0.025]
    assert [float(v) for v in rates["b"].groups()] == [0.05, 0.05]

    queue.write_text("a lstm_global --lr 0.05\nb lstm_global --lr 0.01 --lr-patience 1\n")

    def fork_rows(*rows):
        return run_recipe("claims/cpu_rule_fork.sh", [str(queue), *rows, data_bin, str(tmp_path / "x")], env)

    refused = fork_rows("a", "b")
    assert refused.returncode == 2 and "a and b differ in more than --lr-patience" in refused.stderr
    refused = fork_rows("a", "c")
    assert refused.returncode == 2 and "c is not a row of" in refused.stderr
    assert "(its rows: a b)" in refused.stderr
    assert not (tmp_path / "x").exists()


def test_memory_toy_stage_skips_finished_systems_and_extends_them_with_a_larger_epochs(tmp_path):
    """memory_attention.sh's copy task: a system finished at EPOCHS is skipped when run again
    with EPOCHS or fewer, and trained on from its checkpoint_last.pt to a larger EPOCHS."""
    out = tmp_path / "memory"
    env = {"STAGES": "toy", "LENGTHS": "5", "SIZES": "", "NORM_K": "", "BASELINES": "noattn",
           "TRAIN": "200", "VALID": "20", "DIM": "16", "BEAM": "2", "CURVE_LENGTH": "0",
           "DEVICE": "cpu"}  # fmt: skip

    def run(epochs):
        return run_recipe("memory_attention.sh", ["", str(out)], {**env, "EPOCHS": epochs})

    system = out / "copy5" / "noattn"
    first = run("1")
    assert first.returncode == 0, first.stderr[-2000:]
    assert (system / "done").read_text().strip() == "1"
    assert "copy5/noattn: epoch 1/1 valid loss" in first.stderr
    again = run("1")
    assert again.returncode == 0 and "training" not in again.stderr
    longer = run("2")
    assert longer.returncode == 0, longer.stderr[-2000:]
    assert "copy5/noattn: epoch 2/2 valid loss" in longer.stderr
    assert "epoch 1/2" not in longer.stderr  # resumed after epoch 1, not trained again from 0
    assert (system / "done").read_text().strip() == "2"
    table = (out / "memory_table.tsv").read_text().splitlines()
    assert table[1].split("\t")[:2] == ["5", "noattn"]


def test_memory_toy_patience_stops_a_run_whose_validation_bleu_stops_rising(tmp_path):
    """PATIENCE=P ends a copy-task run once greedy validation BLEU has not risen for P epochs:
    with a learning rate of 0 the model never changes, so BLEU is flat from epoch 1 and a
    patience of 1 stops the run after epoch 2 of the 5 EPOCHS allows."""
    out = tmp_path / "memory"
    env = {"STAGES": "toy", "LENGTHS": "5", "SIZES": "", "NORM_K": "", "BASELINES": "noattn",
           "TRAIN": "200", "VALID": "20", "DIM": "16", "BEAM": "2", "CURVE_LENGTH": "0",
           "DEVICE": "cpu", "EPOCHS": "5", "PATIENCE": "1", "LR": "0"}  # fmt: skip
    result = run_recipe("memory_attention.sh", ["", str(out)], env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "copy5/noattn: epoch 2/5 valid loss" in result.stderr
    assert "epoch 3/5" not in result.stderr
    log = (out / "copy5" / "noattn" / "train.log").read_text()
    assert "early stop since valid performance hasn't improved for last 1 runs" in log


FAKE_GENERATE = """#!/bin/sh
# fairseq-generate's output for one sentence, its --stats-output file empty; then SLEEP seconds
while [ $# -gt 0 ]; do [ "$1" = --stats-output ] && : > "$2"; shift; done
printf 'S-0\\tein Hund\\nT-0\\ta dog\\nH-0\\t-0.1\\ta dog\\nD-0\\t-0.1\\ta dog\\n'
exec sleep %d
"""


def queue_with_fake_generate(tmp_path, rows, finished, seconds):
    """queue.sh over ROWS (a queue file's text), the systems FINISHED marked trained (`done`, an
    empty checkpoint_best.pt), fairseq-generate replaced by FAKE_GENERATE sleeping SECONDS: the
    fake's path, the output folder, the command and its environment."""
    fake = tmp_path / "fake_bin"
    fake.mkdir()
    generate = fake / "fairseq-generate"
    generate.write_text(FAKE_GENERATE % seconds)
    generate.chmod(0o755)
    queue = tmp_path / "queue.txt"
    queue.write_text(rows)
    out, data = tmp_path / "claims", tmp_path / "data-bin"
    for name in finished:
        (out / name / "checkpoints").mkdir(parents=True)
        (out / name / "checkpoints" / "checkpoint_best.pt").write_bytes(b"")
        (out / name / "done").touch()
    data.mkdir()
    path = os.pathsep.join([str(fake), os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    env = dict(os.environ, PATH=path, DEVICE="cpu", SUBSETS="test")
    command = ["bash", str(ROOT / "recipes" / "queue.sh"), str(queue), str(data), str(out)]
    return generate, out, command, env


def test_queue_with_a_failed_training_finishes_the_others_and_then_fails(tmp_path):
    """A system whose training fails (here: no dictionary in DATA_BIN) does not stop the queue:
    the trained system is decoded and tabled, then the queue exits 1 naming the failed one (the
    CPU lanes and scripts see it), where it used to say "resumes on the next run" and exit 0."""
    _, out, command, env = queue_with_fake_generate(
        tmp_path, "old lstm_global\nbroken lstm_global\n", ["old"], 0
    )
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr[-2000:]
    assert "[train] error: DATA_BIN" in result.stderr and "holds no fairseq dictionary" in result.stderr
    assert "[queue] broken: not trained (exit 2; its error is above)" in lines
    assert "resumes on the next run" not in result.stderr
    assert lines[-1] == "[queue] error: not trained: broken (each one's error is above)"
    rows = [row.split("\t")[0] for row in (out / "table.test.tsv").read_text().splitlines()[1:]]
    assert rows == ["old"] and not (out / "broken" / "done").exists()
    # ONLY the other row: the failure of a system not run now is not reported again
    again = subprocess.run(command, env={**env, "ONLY": "old"}, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]


def test_queue_decoding_cut_off_leaves_no_hypotheses(tmp_path):
    """A decoding killed half-way (a device call's deadline, a killed session) leaves no
    NAME/SUBSET.txt, so the next run decodes that subset again instead of tabling a truncated
    file as the system's hypotheses (a GPU call once lost six test sets that way)."""
    generate, out, command, env = queue_with_fake_generate(tmp_path, "sys lstm_global\n", ["sys"], 600)
    cut = subprocess.Popen(command, env=env, start_new_session=True, stderr=subprocess.DEVNULL)
    part = out / "sys" / "test.txt.part"
    for _ in range(600):
        if part.exists() and part.stat().st_size > 0:
            break
        time.sleep(0.1)
    os.killpg(cut.pid, signal.SIGKILL)  # the whole call: queue.sh and its fairseq-generate
    cut.wait()
    assert "H-0" in part.read_text() and not (out / "sys" / "test.txt").exists()
    generate.write_text(FAKE_GENERATE % 0)
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert "decoding sys (test)" in again.stderr, again.stderr[-2000:]
    assert (out / "sys" / "test.txt").read_text().count("H-0") == 1 and not part.exists()


def test_queue_only_trains_and_decodes_the_named_systems_and_tables_all(tmp_path):
    """ONLY: one row of a shared queue (a CPU taking one system of a GPU queue) is decoded, the
    unnamed unfinished row is not trained, the table still lists every system decoded before,
    and a name the queue does not have is refused with the queue's names."""
    rows = "old lstm_global\nnamed lstm_global\nother lstm_global\n"
    _, out, command, env = queue_with_fake_generate(tmp_path, rows, ["old", "named"], 0)
    first = subprocess.run(command, env={**env, "ONLY": "old"}, capture_output=True, text=True)
    assert first.returncode == 0 and "decoding old (test)" in first.stderr, first.stderr[-2000:]
    assert "decoding named" not in first.stderr and "[train] other" not in first.stderr
    result = subprocess.run(command, env={**env, "ONLY": "named"}, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "decoding named (test)" in result.stderr and "decoding old" not in result.stderr
    assert "[train] other" not in result.stderr and not (out / "other").exists()
    rows = [row.split("\t")[0] for row in (out / "table.test.tsv").read_text().splitlines()[1:]]
    assert rows == ["old", "named"]
    wrong = subprocess.run(command, env={**env, "ONLY": "named typo"}, capture_output=True, text=True)
    assert wrong.returncode == 2
    assert "ONLY: 'typo' is not a system of" in wrong.stderr and "old named other" in wrong.stderr


def test_queue_last_checkpoint_decodes_checkpoint_last_as_its_own_row(tmp_path):
    """LAST_CHECKPOINT=1: each system is also decoded from checkpoint_last.pt, into
    NAME/SUBSET.last.*, a row NAME@last beside NAME (the best checkpoint's); a later
    checkpoint_last.pt is decoded again, the best one's hypotheses are left; other values are
    refused."""
    generate, out, command, env = queue_with_fake_generate(tmp_path, "sys lstm_global\n", ["sys"], 0)
    generate.write_text(
        "#!/bin/sh\n# the hypothesis names the checkpoint decoded\n"
        'while [ $# -gt 0 ]; do case $1 in --path) p=$2;; --stats-output) : > "$2";; esac; shift; done\n'
        "printf 'S-0\\tein Hund\\nT-0\\ta dog\\nD-0\\t-0.1\\t%s\\n' \"${p##*/}\"\n"
    )
    (out / "sys" / "checkpoints" / "checkpoint_last.pt").write_bytes(b"")
    env = {**env, "LAST_CHECKPOINT": "1"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "decoding sys (test, checkpoint_last.pt)" in result.stderr
    assert "\tcheckpoint_best.pt\n" in (out / "sys" / "test.txt").read_text()
    assert "\tcheckpoint_last.pt\n" in (out / "sys" / "test.last.txt").read_text()
    rows = [row.split("\t")[0] for row in (out / "table.test.tsv").read_text().splitlines()[1:]]
    assert rows == ["sys", "sys@last"]
    time.sleep(1.1)  # a newer checkpoint_last.pt (file times have a resolution of a second at worst)
    (out / "sys" / "checkpoints" / "checkpoint_last.pt").write_bytes(b"")
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert "decoding sys (test, checkpoint_last.pt)" in again.stderr, again.stderr[-2000:]
    assert "decoding sys (test)" not in again.stderr
    wrong = subprocess.run(command, env={**env, "LAST_CHECKPOINT": "yes"}, capture_output=True, text=True)
    assert wrong.returncode == 2 and "LAST_CHECKPOINT: 'yes' is not 0 or 1" in wrong.stderr


def test_queue_refuses_a_line_without_an_arch(tmp_path):
    queue = tmp_path / "queue.txt"
    queue.write_text("lonely\n")
    result = run_recipe("queue.sh", [str(queue), str(tmp_path / "bin"), str(tmp_path / "out")], {})
    assert result.returncode == 2 and "line 'lonely' names no ARCH" in result.stderr


CLAIM_QUEUES = sorted((ROOT / "recipes" / "claims").glob("*.queue"))


def queue_rule():
    """The stopping rule queue.sh adds to every row (its RULE default: lib.sh's PLATEAU_RULE)."""
    assert "RULE=${RULE:-$PLATEAU_RULE}" in (ROOT / "recipes" / "queue.sh").read_text()
    return re.search(r'^PLATEAU_RULE="([^"]+)"$', (ROOT / "recipes" / "lib.sh").read_text(), re.M).group(1)


@pytest.mark.parametrize("queue", CLAIM_QUEUES, ids=[q.stem for q in CLAIM_QUEUES])
def test_claims_queues_parse_and_fit_one_gpu_call(queue):
    """Every system of the claims queues parses with fairseq-train's parser after queue.sh's
    stopping rule, as queue.sh runs it, and passes the package's flag checks (a typo must not
    cost a GPU call); at most 7 per queue, unique names."""

    from fairseq import options

    from fairseq_vision_attn.models.lstm_attention import refuse_ignored_flags, validate_args

    rule = queue_rule()
    lines = [
        line.split() for line in queue.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    assert 0 < len(lines) <= 7 and len({line[0] for line in lines}) == len(lines)
    for _name, arch, *flags in lines:
        argv = ["bin", "--user-dir", "fairseq_vision_attn", "--task", "translation_vision_attn"]  # fmt: skip
        argv += ["--arch", arch, *rule.split(), *flags]
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        if arch.startswith("lstm_"):
            validate_args(args)
            refuse_ignored_flags(args)


def test_lrhold_row_keeps_the_rate_through_the_swing_and_then_applies_the_plateau_rule():
    """deen_milk2.queue's lrhold row holds the learning rate through epochs 1-3 with fairseq's own
    warm-up (396 updates = 3 epochs of 132; the start rate equals --lr), so a validation loss that
    rises at epoch 3 (seed 1's swing) does not halve it, where the same row without the warm-up
    flags halves it; after the warm-up the plateau rule applies as before (a rise halves the rate)."""
    import torch
    from fairseq import optim, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.optim.lr_scheduler import build_lr_scheduler

    queue = (ROOT / "recipes" / "claims" / "deen_milk2.queue").read_text().splitlines()
    row = next(line.split() for line in queue if line.startswith("milk_0.3_lrhold_s1 "))
    rule = queue_rule()

    def rates(flags, losses):
        argv = ["bin", "--user-dir", "fairseq_vision_attn", "--task", "translation_vision_attn"]  # fmt: skip
        argv += ["--arch", row[1], "--optimizer", "adam", "--lr", "0.001", *rule.split(), *flags]
        cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
        optimizer = optim.build_optimizer(cfg.optimizer, [torch.nn.Parameter(torch.zeros(1))])
        scheduler = build_lr_scheduler(cfg.lr_scheduler, optimizer)
        scheduler.step_update(0)
        updates, out = 0, []
        for epoch, loss in enumerate(losses, 1):
            for _ in range(132):
                updates += 1
                scheduler.step_update(updates)
            out.append(scheduler.step(epoch, loss))
        return out

    losses = [7.3, 6.388, 6.872, 6.0, 5.2, 5.5, 4.9]  # a rise at epoch 3 (the swing) and at epoch 6
    held = rates(row[2:], losses)
    assert held == pytest.approx([1e-3] * 5 + [5e-4] * 2)
    plain = [f for f in row[2:] if f not in ("--warmup-updates", "396", "--warmup-init-lr", "0.001")]
    assert len(plain) == len(row[2:]) - 4
    assert rates(plain, losses) == pytest.approx([1e-3] * 2 + [5e-4] * 3 + [2.5e-4] * 2)


def test_deen_2_monotonic_heads_hold_the_rate_like_the_lrhold_row():
    """Every row of deen_2.queue trained with the latency loss carries the lrhold row's hold."""
    hold = "--warmup-updates 396 --warmup-init-lr 0.001"
    rows = (ROOT / "recipes" / "claims" / "deen_2.queue").read_text().splitlines()
    monotonic = [row for row in rows if not row.startswith("#") and "latency_augmented_cross_entropy" in row]
    assert len(monotonic) == 7 and all(hold in line for line in monotonic)
    lrhold = (ROOT / "recipes" / "claims" / "deen_milk2.queue").read_text()
    assert any(line.startswith("milk_0.3_lrhold_s1 ") and hold in line for line in lrhold.splitlines())


def test_pack_best_brings_back_the_models_without_optimizer_state(tmp_path):
    """recipes/claims/pack_best.sh: every system's checkpoint_best.pt comes back in pieces of at
    most 15 MB (a device call returns 8 files of 16 MB), without its optimizer state, and the
    pieces put together give the same model weights; no checkpoint: a one-line refusal."""
    import torch

    work, dest = tmp_path / "work", tmp_path / "out"
    weights = {"a": torch.arange(5_000_000, dtype=torch.float32), "b": torch.ones(3, 4)}  # 20 MB
    for name in ("milk", "waitk"):
        (work / name / "checkpoints").mkdir(parents=True)
        state = {"model": weights, "cfg": {"arch": name}, "last_optimizer_state": {"exp_avg": torch.ones(10)}}
        torch.save(state, work / name / "checkpoints" / "checkpoint_best.pt")
    (work / "unfinished").mkdir()  # no checkpoint yet: skipped
    result = run_recipe("claims/pack_best.sh", [str(work), str(dest)], {})
    assert result.returncode == 0, result.stderr
    pieces = sorted(dest.glob("best.tar.part*"))
    assert len(pieces) >= 3 and all(p.stat().st_size <= 15 * 2**20 for p in pieces)
    back = tmp_path / "back"
    back.mkdir()
    subprocess.run(f"cat {' '.join(map(str, pieces))} | tar -x -C {back}", shell=True, check=True)
    for name in ("milk", "waitk"):
        state = torch.load(back / name / "checkpoints" / "checkpoint_best.pt", weights_only=False)
        assert "last_optimizer_state" not in state and state["cfg"] == {"arch": name}
        assert all(torch.equal(state["model"][k], weights[k]) for k in weights)
    assert sorted(p.name for p in back.iterdir()) == ["milk", "waitk"]
    empty = run_recipe("claims/pack_best.sh", [str(tmp_path / "none"), str(dest)], {})
    assert empty.returncode == 2 and "no checkpoints/checkpoint_best.pt under" in empty.stderr
    # systems named: only those come back; a named system without a checkpoint is refused
    chosen, again = tmp_path / "chosen", tmp_path / "again"
    assert run_recipe("claims/pack_best.sh", [str(work), str(chosen), "waitk"], {}).returncode == 0
    again.mkdir()
    subprocess.run(f"cat {chosen}/best.tar.part* | tar -x -C {again}", shell=True, check=True)
    assert [p.name for p in again.iterdir()] == ["waitk"]
    missing = run_recipe("claims/pack_best.sh", [str(work), str(chosen), "waitk", "unfinished"], {})
    assert missing.returncode == 2 and "no " in missing.stderr and "unfinished" in missing.stderr
