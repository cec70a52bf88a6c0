"""End to end through the real command lines: preprocess, train, generate, interactive, resume.

Each model is tiny and trains one short epoch: these tests check behaviour (flags parse,
checkpoints load under torch >= 2.6, statistics are written), not quality.
"""

import json
import math
import re
import shutil
import sys

import pytest
import torch

from fairseq_vision_attn.latency import corpus_latency, latency_scores

from .conftest import REPO, made_once, our_archs, run_cli, run_clis

pytestmark = pytest.mark.slow

SMALL = [
    "--encoder-embed-dim",
    "16",
    "--encoder-hidden-size",
    "16",
    "--decoder-embed-dim",
    "16",
    "--decoder-hidden-size",
    "16",
    "--decoder-out-embed-dim",
    "16",
    "--dropout",
    "0.1",
]


def train_args(data_bin, save_dir, arch, *extra):
    return [
        "fairseq-train",
        str(data_bin / "data-bin"),
        "--user-dir",
        "fairseq_vision_attn",
        "--task",
        "translation_vision_attn",
        "--arch",
        arch,
        *SMALL,
        *(["--local-window-d", "2"] if arch == "lstm_local" else []),
        "--optimizer",
        "adam",
        "--lr",
        "0.003",
        "--max-tokens",
        "400",
        "--max-epoch",
        "1",
        "--cpu",
        "--num-workers",
        "0",
        "--seed",
        "3",
        "--save-dir",
        str(save_dir),
        "--no-epoch-checkpoints",
        "--log-format",
        "simple",
        *extra,
    ]


def generate_args(data_bin, checkpoint, *extra):
    return [
        "fairseq-generate",
        str(data_bin / "data-bin"),
        "--user-dir",
        "fairseq_vision_attn",
        "--task",
        "translation_vision_attn",
        "--path",
        str(checkpoint),
        "--gen-subset",
        "test",
        "--beam",
        "3",
        "--batch-size",
        "5",
        "--cpu",
        *extra,
    ]


def without_task(args):
    """A command line less its ``--task NAME``: fairseq's default task, translation."""
    at = args.index("--task")
    return args[:at] + args[at + 2 :]


def interactive_args(data_bin, checkpoint, *extra):
    return [
        "fairseq-interactive",
        str(data_bin / "data-bin"),
        "--user-dir",
        "fairseq_vision_attn",
        "--task",
        "translation_vision_attn",
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--path",
        str(checkpoint),
        "--cpu",
        "--buffer-size",
        "4",
        *extra,
    ]


@pytest.fixture(scope="module")
def trained(toy_data_bin, tmp_path_factory):
    """arch -> checkpoint directory, each trained one epoch through fairseq-train (once per test
    run: tests only read these checkpoints)."""

    def train_all(root):
        run_clis([train_args(toy_data_bin, root / arch, arch) for arch in our_archs()], cwd=REPO)

    root = made_once(tmp_path_factory, "trained", train_all)
    return {arch: root / arch for arch in our_archs()}


@pytest.mark.parametrize("arch", our_archs())
def test_generate_writes_statistics(arch, trained, toy_data_bin, tmp_path):
    stats_path = tmp_path / "stats.jsonl"
    proc = run_cli(
        generate_args(toy_data_bin, trained[arch] / "checkpoint_best.pt", "--stats-output", str(stats_path)),
        cwd=REPO,
    )
    assert "BLEU4" in proc.stdout
    summary = [line for line in proc.stdout.splitlines() if line.startswith("| vision-attn stats")]
    assert len(summary) == 1 and "src_len" in summary[0] and "window_size" in summary[0]
    rows = [json.loads(line) for line in stats_path.read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(12))  # sorted by id, not in batch order
    refs = {
        int(line.split("\t")[0][2:]): line.split("\t")[1].split()
        for line in proc.stdout.splitlines()
        if line.startswith("T-")
    }
    hypos = {
        int(line.split("\t")[0][2:]): line.split("\t")[2].split()
        for line in proc.stdout.splitlines()
        if line.startswith("H-")
    }
    for row in rows:
        assert row["hypo_len"] == len(hypos[row["id"]]) + 1  # + EOS
        assert len(row["window_sizes"]) == row["hypo_len"]
        assert all(0 <= w <= row["src_len"] for w in row["window_sizes"])
        if arch == "lstm_global":
            assert row["window_sizes"] == [row["src_len"]] * row["hypo_len"]
        if arch == "lstm_sact":  # one temperature per output token, inside (1/lambda, lambda)
            assert len(row["temperatures"]) == row["hypo_len"]
            assert all(0.25 < t < 4 for t in row["temperatures"])
    if arch == "lstm_sact":
        assert "temperatures" in summary[0]
    if arch in STREAMING:  # one delay per written token (EOS included), non-decreasing, <= |x|
        assert "beam 3 ignored" in proc.stderr  # simultaneous decoding is greedy
        for row in rows:
            delays = row["delays"]
            assert len(delays) == row["hypo_len"]
            assert all(1 <= d <= row["src_len"] for d in delays)
            assert all(a <= b for a, b in zip(delays, delays[1:]))
            assert row["ref_len"] == len(refs[row["id"]]) + 1  # + EOS, as hypo_len
            expected = latency_scores(delays, row["src_len"])
            with_ref = latency_scores(delays, row["src_len"], ref_len=row["ref_len"])
            for name in ("AL", "AP", "DAL", "ATD"):
                assert row[name] == pytest.approx(expected[name], abs=1e-4), name
            assert row["LAAL"] == pytest.approx(with_ref["LAAL"], abs=1e-4)
        for name in ("AL", "AP", "DAL", "LAAL", "ATD"):  # corpus values: means over sentences
            mean = sum(row[name] for row in rows) / len(rows)
            assert f"| {name} {mean:.3f}" in summary[0], summary[0]


STREAMING = ["lstm_monotonic", "lstm_mocha", "lstm_milk", "lstm_waitk"]


@pytest.mark.parametrize("arch", STREAMING)
def test_streaming_arch_trains_with_the_latency_loss(arch, toy_data_bin, tmp_path):
    """fairseq-train with --criterion latency_augmented_cross_entropy logs dal and ap in
    training and validation; the checkpoint then decodes. wait-k's k = 12 exceeds every toy
    source (2..8 tokens + EOS), which must still train and decode (fairseq issue 3445)."""
    extra = {"lstm_waitk": ["--waitk-lagging", "12"], "lstm_mocha": ["--mocha-chunk-size", "2"]}.get(arch, [])
    proc = run_cli(
        train_args(
            toy_data_bin,
            tmp_path,
            arch,
            "--criterion",
            "latency_augmented_cross_entropy",
            "--latency-weight",
            "0.1",
            "--label-smoothing",
            "0.1",
            "--best-checkpoint-metric",
            "nll_loss",
            *extra,
        ),
        cwd=REPO,
    )
    log = proc.stdout + proc.stderr
    train_line = next(line for line in log.splitlines() if "| train |" in line)
    valid_line = next(line for line in log.splitlines() if "| valid |" in line)
    for line in (train_line, valid_line):
        assert "| dal " in line and "| ap " in line and "| latency_loss " in line, line
    assert_best_checkpoint_scored_by_nll_loss(log)
    out = run_cli(generate_args(toy_data_bin, tmp_path / "checkpoint_best.pt", "--beam", "1"), cwd=REPO)
    assert "BLEU4" in out.stdout


def test_latency_warmup_keeps_the_latency_term_out_of_training_only(toy_data_bin, tmp_path):
    """--latency-warmup-updates longer than the run: fairseq-train's training lines log no latency
    loss (the term is off), its validation lines do (validation always includes it)."""
    proc = run_cli(
        train_args(toy_data_bin, tmp_path, "lstm_milk", "--criterion", "latency_augmented_cross_entropy")
        + ["--latency-weight", "0.5", "--latency-warmup-updates", "100000"],
        cwd=REPO,
    )
    log = (proc.stdout + proc.stderr).splitlines()
    latency = {
        kind: float(
            re.search(r"\| latency_loss ([0-9.]+)", next(line for line in log if f"| {kind} |" in line))[1]
        )
        for kind in ("train", "valid")
    }
    assert latency["train"] == 0 and latency["valid"] > 0, latency


def test_training_validates_the_stop_rule_it_is_given(toy_data_bin, tmp_path):
    """fairseq-train --monotonic-stop cumulative: training is the same run (its training line is
    the default run's), and validation measures the hard head under the cumulative rule: its
    logged nll_loss and dal are analysis monotonic-mismatch's cumulative hard-policy row for the
    saved checkpoint (an oracle that sets the rule itself), and the default run's are the energy
    row. --test-waitk-lagging, --stats-output (an existing file stays as it was), and a policy
    flag the model's attention lacks, are refused by fairseq-train in one line before any
    training."""
    analysis = ["python", "-m", "fairseq_vision_attn.analysis", "monotonic-mismatch"]
    analysis += ["--data", str(toy_data_bin / "data-bin"), "--noise-vars", "0"]
    lines = {}
    for rule in ("energy", "cumulative"):
        save_dir = tmp_path / rule
        flags = ["--criterion", "latency_augmented_cross_entropy", "--latency-weight", "0"]
        flags += ["--monotonic-energy-bias-init", "0"]  # p near 1/2 after one epoch: the rules differ
        flags += ["--monotonic-stop", rule] if rule == "cumulative" else []
        proc = run_cli(train_args(toy_data_bin, save_dir, "lstm_milk", *flags), cwd=REPO)
        log = (proc.stdout + proc.stderr).splitlines()
        train = [line.split("| train |")[1] for line in log if "| train |" in line]
        valid = next(line for line in reversed(log) if "| valid |" in line)
        logged = {key: float(re.search(rf"\| {key} ([0-9.]+)", valid)[1]) for key in ("nll_loss", "dal")}
        ckpt = save_dir / "checkpoint_last.pt"
        out = run_cli(analysis + ["--path", str(ckpt), "--monotonic-stop", rule], cwd=REPO).stdout
        hard = out.splitlines()[2].split("\t")
        assert hard[0] == f"hard policy ({rule})"
        assert logged["nll_loss"] == pytest.approx(float(hard[1]), abs=2e-3)
        assert logged["dal"] == pytest.approx(float(hard[2]), abs=2e-3)
        lines[rule] = ([re.sub(r" \| (wps|ups|wall|train_wall) [0-9.]+", "", t) for t in train], logged)
    assert lines["energy"][0] == lines["cumulative"][0]  # training reads no test-time flag
    assert lines["energy"][1]["dal"] > lines["cumulative"][1]["dal"]  # never later, here earlier
    kept = tmp_path / "kept.jsonl"
    kept.write_text('{"id": 0}\n')
    for arch, flags, message in [
        ("lstm_waitk", ["--test-waitk-lagging", "2"], "--test-waitk-lagging is a decoding flag"),
        ("lstm_global", ["--stats-output", str(kept)], "--stats-output is a decoding flag"),
        (
            "lstm_global",
            ["--monotonic-stop", "cumulative"],
            "--monotonic-stop needs a model with a monotonic head",
        ),
        (
            "lstm_milk",
            ["--vision-span-threshold", "1.2"],
            "--vision-span-threshold needs a model with flexible",
        ),
    ]:
        proc = run_cli(train_args(toy_data_bin, tmp_path / arch, arch, *flags), cwd=REPO, check=False)
        assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / arch / "checkpoint_last.pt").exists()
    assert kept.read_text() == '{"id": 0}\n'  # neither emptied nor rewritten


@pytest.mark.parametrize("arch", our_archs())
def test_interactive_reads_piped_input(arch, trained, toy_data_bin, tmp_path):
    """Every arch through fairseq-interactive on piped input: an empty line, unknown words and
    a 2,000-token line each get a hypothesis; streaming archs decode simultaneously."""
    cmd = interactive_args(toy_data_bin, trained[arch] / "checkpoint_best.pt", "--beam", "2")
    long_line = " ".join(["t3", "t1", "t7", "t2"] * 500)
    lines = f"t1 t2 t3\n\nzebra t4 unicorn\n{long_line}\nt9 t8 t7 t6 t5\n"
    proc = run_cli([*cmd, "--max-source-positions", "2100"], cwd=REPO, input=lines)
    hypos = [line for line in proc.stdout.splitlines() if line.startswith("H-")]
    assert len(hypos) == 5, proc.stdout[-2000:]
    assert "Traceback" not in proc.stderr
    if arch in STREAMING:
        assert "| AL " in proc.stdout and "| DAL " in proc.stdout
    if arch in ("lstm_global", "lstm_milk"):  # over fairseq's default 1024 positions: named, skipped
        stats = tmp_path / f"{arch}.jsonl"
        proc = run_cli([*cmd, "--stats-output", str(stats)], cwd=REPO, input=lines)
        assert "warning: input line 4 skipped: 2001 tokens (with EOS), over the limit 1024" in proc.stderr
        hypos = [line.split("\t")[0] for line in proc.stdout.splitlines() if line.startswith("H-")]
        assert hypos == ["H-0", "H-1", "H-2", "H-4"] and "Traceback" not in proc.stderr
        # --stats-output rows carry the same numbers, though the buffer of 4 lines is decoded
        # sorted by length (the empty line first) and line 4 comes after a skipped one
        rows = [json.loads(line) for line in stats.read_text().splitlines()]
        assert [(row["id"], row["src_len"]) for row in rows] == [(0, 4), (1, 1), (2, 4), (4, 6)]


def test_streaming_beam_message_and_length_limit(trained, toy_data_bin, tmp_path):
    """Without --beam nothing is said about it and fairseq's own line says beam=1; a hypothesis
    cut at the length limit is named once at the end and marked in its --stats-output row."""
    ckpt = trained["lstm_milk"] / "checkpoint_best.pt"
    args = generate_args(toy_data_bin, ckpt)
    at = args.index("--beam")
    args = args[:at] + args[at + 2 :]  # no --beam on the command line (fairseq's default is 5)
    stats = tmp_path / "stats.jsonl"
    limits = ["--max-len-a", "0", "--max-len-b", "2", "--min-len", "2"]  # the model may not stop before
    proc = run_cli([*args, *limits, "--stats-output", str(stats)], cwd=REPO)
    assert "ignored" not in proc.stderr and "with beam=1" in proc.stderr + proc.stdout
    rows = [json.loads(line) for line in stats.read_text().splitlines()]
    cut = [row["id"] for row in rows if row.get("length_limited")]
    assert len(cut) == 12 and all(row["hypo_len"] == 2 for row in rows)
    warnings = [line for line in proc.stderr.splitlines() if "cut at the length limit" in line]
    assert len(warnings) == 1 and f"warning: {len(cut)} of 12 hypotheses" in warnings[0]
    assert f"ids {', '.join(map(str, cut[:10]))}" in warnings[0]
    beam = run_cli([*args, "--beam", "4"], cwd=REPO)
    assert beam.stderr.count("--beam 4 ignored") == 1


def test_plain_translation_task_is_named_once_and_ours_is_not(trained, toy_data_bin):
    """fairseq's default --task translation decodes our checkpoints with fairseq's own generator (no
    delays, no latency line): one warning names the task to add; translation_vision_attn says
    nothing of it."""
    ckpt = trained["lstm_milk"] / "checkpoint_best.pt"
    ours = generate_args(toy_data_bin, ckpt)
    plain = without_task(ours)
    hint = "add --task translation_vision_attn"
    proc = run_cli(plain, cwd=REPO)
    output = proc.stdout + proc.stderr
    assert output.count(hint) == 1 and "BLEU4" in output and "| vision-attn stats" not in output
    proc = run_cli(ours, cwd=REPO)
    assert hint not in proc.stdout + proc.stderr and "| vision-attn stats" in proc.stdout


@pytest.mark.parametrize(
    "argv,named",
    [
        (["fairseq-generate", "bin", "--vision-span-threshold", "1.2"], "--vision-span-threshold"),
        (["fairseq-train", "bin", "--task", "translation", "--monotonic-stop=energy"], "--monotonic-stop"),
        (["fairseq-interactive", "--stats-output", "s", "--test-waitk-lagging", "2"], "--stats-output, "),
        (["fairseq-generate", "bin", "--task", "translation_vision_attn", "--stats-output", "s"], None),
        (["fairseq-generate", "--task=translation_vision_attn", "--monotonic-stop-threshold", "0.6"], None),
        (["fairseq-generate", "bin", "--task", "translation", "--beam", "5"], None),  # none of ours
        (["simuleval", "--stats-output", "s"], None),  # not a fairseq command
    ],
)
def test_task_flags_without_the_task_are_named(argv, named):
    """The task's flags (its config's own fields) under fairseq's default task or another one:
    one error naming them and the task to add; with the task, or no such flag, or another
    program: nothing."""
    from fairseq_vision_attn.errors import VisionAttnError
    from fairseq_vision_attn.tasks.translation_vision_attn import refuse_task_flags_without_the_task

    if named is None:
        refuse_task_flags_without_the_task(argv)
        return
    with pytest.raises(VisionAttnError) as error:
        refuse_task_flags_without_the_task(argv)
    message = str(error.value)
    assert message.startswith(named) and message.endswith("add --task translation_vision_attn")


def test_task_flag_without_the_task_fails_in_one_line(trained, toy_data_bin):
    """Through the real command: where fairseq alone says 'unrecognized arguments', the flag and
    the task to add, in one line, before anything is loaded."""
    args = generate_args(toy_data_bin, trained["lstm_flexible"] / "checkpoint_best.pt")
    proc = run_cli(without_task(args) + ["--vision-span-threshold", "1.2"], cwd=REPO, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "fairseq-vision-attn: error: --vision-span-threshold: a flag of --task translation_vision_attn, "
        "and this command runs --task translation: add --task translation_vision_attn"
    )


@pytest.mark.parametrize(
    "argv,refused",
    [
        (["fairseq-generate", "bin", "--tokenizer", "moses"], True),
        (["fairseq-interactive", "bin", "--tokenizer=moses", "-s", "de"], True),
        (["fairseq-generate", "bin", "--tokenizer", "moses", "-s", "de", "--target-lang=en"], False),
        (["fairseq-generate", "bin", "--tokenizer", "space"], False),
        (["python", "--tokenizer", "moses"], False),  # not a fairseq command
    ],
)
def test_moses_without_languages_is_named(argv, refused):
    """fairseq's moses tokenizer takes its languages from --source-lang / --target-lang; without
    both, one error says so (fairseq alone stops with a hydra error a hundred lines long)."""
    from fairseq_vision_attn.errors import VisionAttnError
    from fairseq_vision_attn.tasks.translation_vision_attn import refuse_moses_without_languages

    if not refused:
        refuse_moses_without_languages(argv)
        return
    with pytest.raises(VisionAttnError, match="^--tokenizer moses needs --source-lang and --target-lang"):
        refuse_moses_without_languages(argv)


def test_moses_without_languages_fails_in_one_line(trained, toy_data_bin):
    """Through the real command, before anything is loaded: the one line, exit status 2."""
    args = generate_args(toy_data_bin, trained["lstm_global"] / "checkpoint_best.pt")
    proc = run_cli(args + ["--tokenizer", "moses"], cwd=REPO, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "hydra" not in proc.stderr, (
        proc.stderr[-2000:]
    )
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith("fairseq-vision-attn: error: --tokenizer moses needs --source-lang and --target-lang")
    )


def test_streaming_decoding_flags_and_input(trained, toy_data_bin, tmp_path):
    """--test-waitk-lagging changes wait-k's schedule at test time and is refused (one line)
    by any other checkpoint."""
    stats = tmp_path / "stats.jsonl"
    ckpt = trained["lstm_waitk"] / "checkpoint_best.pt"
    run_cli(
        generate_args(toy_data_bin, ckpt, "--test-waitk-lagging", "1", "--stats-output", str(stats)), cwd=REPO
    )
    for row in map(json.loads, stats.read_text().splitlines()):
        assert row["delays"] == [float(min(row["src_len"], i + 1)) for i in range(row["hypo_len"])]
    for arch in ("lstm_global", "lstm_milk"):
        proc = run_cli(
            generate_args(toy_data_bin, trained[arch] / "checkpoint_best.pt", "--test-waitk-lagging", "2"),
            cwd=REPO,
            check=False,
        )
        assert proc.returncode != 0 and "--test-waitk-lagging needs a wait-k checkpoint" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_monotonic_stop_and_the_mismatch_analysis(trained, toy_data_bin, tmp_path):
    """--monotonic-stop: energy is the default rule (same output as without the flag), and so is
    --monotonic-stop-threshold 0.5; cumulative decodes (one delay per token, non-decreasing), any
    other rule, a threshold outside (0, 1) and any model without a monotonic head are refused in
    one line. analysis monotonic-mismatch's hard-policy
    NLL is what fairseq-validate reports for the checkpoint."""
    ckpt = trained["lstm_milk"] / "checkpoint_best.pt"
    plain = run_cli(generate_args(toy_data_bin, ckpt), cwd=REPO).stdout
    energy = run_cli(generate_args(toy_data_bin, ckpt, "--monotonic-stop", "energy"), cwd=REPO).stdout
    hypotheses = [line for line in plain.splitlines() if line.startswith("H-")]
    assert hypotheses and hypotheses == [line for line in energy.splitlines() if line.startswith("H-")]
    half = run_cli(generate_args(toy_data_bin, ckpt, "--monotonic-stop-threshold", "0.5"), cwd=REPO).stdout
    assert hypotheses == [line for line in half.splitlines() if line.startswith("H-")]
    stats = tmp_path / "cumulative.jsonl"
    run_cli(
        generate_args(toy_data_bin, ckpt, "--monotonic-stop", "cumulative", "--stats-output", str(stats)),
        cwd=REPO,
    )
    for row in map(json.loads, stats.read_text().splitlines()):
        delays = row["delays"]
        assert len(delays) == row["hypo_len"] and all(a <= b for a, b in zip(delays, delays[1:]))
    waitk = trained["lstm_waitk"] / "checkpoint_best.pt"
    for args, message in [
        (generate_args(toy_data_bin, ckpt, "--monotonic-stop", "median"), "choices: energy, cumulative"),
        (
            generate_args(toy_data_bin, ckpt, "--monotonic-stop-threshold", "1"),
            "--monotonic-stop-threshold must lie strictly between 0 and 1, got 1.0",
        ),
        (
            generate_args(toy_data_bin, waitk, "--monotonic-stop-threshold", "0.7"),
            "--monotonic-stop-threshold needs a model with a monotonic head",
        ),
        (
            generate_args(toy_data_bin, waitk, "--monotonic-stop", "energy"),
            "--monotonic-stop needs a model with a monotonic head",
        ),
    ]:
        proc = run_cli(args, cwd=REPO, check=False)
        assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr
    data = str(toy_data_bin / "data-bin")
    validate = run_cli(
        ["fairseq-validate", data, "--user-dir", "fairseq_vision_attn", "--task", "translation_vision_attn"]
        + ["--path", str(ckpt), "--valid-subset", "valid", "--cpu", "--max-tokens", "4000"],
        cwd=REPO,
    )
    log = validate.stdout + validate.stderr
    loss = float(re.search(r"valid on 'valid' subset \| loss ([0-9.]+)", log)[1])
    analysis = ["python", "-m", "fairseq_vision_attn.analysis", "monotonic-mismatch", "--data", data]
    out = run_cli(analysis + ["--path", str(ckpt)], cwd=REPO).stdout.splitlines()
    hard, clean, noisy = (line.split("\t") for line in out[2:5])
    assert hard[0] == "hard policy (energy)" and float(hard[1]) == pytest.approx(loss, abs=1e-3)
    assert clean[0] == "expected, noise 0" and noisy[0] == "expected, noise 4"
    assert all(float(row[2]) >= 1 for row in (hard, clean, noisy))  # DAL >= one token read
    assert hard[3] == "-" and all(0 <= float(row[3]) <= 1 for row in (clean, noisy))
    head = re.fullmatch(
        r"# energy \(normalized\): g (\S+), r (\S+); ceiling (\S+): noise-free p <= (\S+)", out[-1]
    )
    g, r, ceiling, p_max = map(float, head.groups())
    # the L1 norm of a unit vector in d = 16 dims lies in [1, 4]: the ceiling lies in [r + g, r + 4 g]
    assert r + abs(g) - 1e-3 <= ceiling <= r + 4 * abs(g) + 1e-3 and p_max == pytest.approx(
        1 / (1 + math.exp(-ceiling)), abs=1e-3
    )
    cumulative = run_cli(analysis + ["--path", str(ckpt), "--monotonic-stop", "cumulative"], cwd=REPO)
    row = cumulative.stdout.splitlines()[2].split("\t")
    assert row[0] == "hard policy (cumulative)" and float(row[2]) >= 1
    other = cumulative.stdout.splitlines()
    assert out[3:5] == other[3:5] and out[-1] == other[-1]  # the expected rows do not depend on it
    assert out[5].startswith("# top-1 accuracy by reference piece: word-initial ")
    assert out[6].startswith("# top-1 accuracy after a ") and ", lead " in out[6]  # hard policy: delays
    glob_ckpt = str(trained["lstm_global"] / "checkpoint_best.pt")
    proc = run_cli(analysis + ["--path", glob_ckpt], cwd=REPO, check=False)
    assert proc.returncode == 2 and "no monotonic head" in proc.stderr and "Traceback" not in proc.stderr


def test_mismatch_share_of_uncertain_stops_follows_the_head_energies(trained, toy_data_bin):
    """monotonic_mismatch's last column, on the trained toy MILk with its energies set by hand:
    every stopping probability 1/2 (g = r = 0) puts all stopping mass on uncertain positions,
    energies of +50 put none there; the model's heads come back as they were."""
    import argparse

    import torch

    from fairseq_vision_attn.analysis import load_subset, monotonic_mismatch

    ckpt, data = str(trained["lstm_milk"] / "checkpoint_best.pt"), str(toy_data_bin / "data-bin")
    subset = argparse.Namespace(path=ckpt, data=data, subset="valid", max_tokens=4000)
    model, task, _, batches = load_subset(subset)
    batches = list(batches)
    energy = model.decoder.attention.energy
    pad = task.target_dictionary.pad()
    for g, r, share in [(0.0, 0.0, 1.0), (0.0, 50.0, 0.0)]:
        with torch.no_grad():
            energy.g.fill_(g)
            energy.r.fill_(r)
        rows = monotonic_mismatch(model, batches, [0, 4], pad)
        assert rows[0][3] is None and rows[1][3] == pytest.approx(share, abs=1e-6)
    assert "training_alignment" not in vars(model.decoder.attention)


def test_mismatch_accuracy_and_argmax_output_follow_the_argmax(trained, toy_data_bin, tmp_path):
    """monotonic_mismatch's accuracy column and --argmax-output, on the trained toy MoChA with its
    output layer pushed toward one word: toward EOS the accuracy is the share of reference tokens
    that are EOS (one a sentence, counted from the data) and every written hypothesis is empty;
    toward a word the references lack it is 0 and each hypothesis is that word once per
    reference token. The trained model's accuracy lies between; through the CLI it is the last
    column, the written references are fairseq-generate's, and an existing file is refused."""
    import argparse

    import torch

    from fairseq_vision_attn.analysis import load_subset, monotonic_mismatch, write_argmax_output
    from fairseq_vision_attn.report import parse_generate_output

    ckpt, data = str(trained["lstm_mocha"] / "checkpoint_best.pt"), str(toy_data_bin / "data-bin")
    model, task, _, batches = load_subset(
        argparse.Namespace(path=ckpt, data=data, subset="test", max_tokens=4000)
    )
    batches, vocab = list(batches), task.target_dictionary
    targets = torch.cat([b["target"][b["target"].ne(vocab.pad())] for b in batches])
    lengths = {int(i): int(t.ne(vocab.pad()).sum()) for b in batches for i, t in zip(b["id"], b["target"])}
    absent = next(w for w in range(vocab.nspecial, len(vocab)) if not targets.eq(w).any())
    trained_accuracy = monotonic_mismatch(model, batches, [0], vocab.pad())[0][4]
    output_layer = model.decoder.output_layer
    eos_share = int(targets.eq(vocab.eos()).sum()) / len(targets)
    for word, expected, words in [(vocab.eos(), eos_share, ""), (absent, 0.0, vocab[absent])]:
        push = torch.zeros(len(vocab))
        push[word] = 1e4
        model.decoder.output_layer = lambda features, push=push, **kwargs: output_layer(features) + push
        argmax = {}
        rows = monotonic_mismatch(model, batches, [0], vocab.pad(), argmax=argmax)
        assert [row[4] for row in rows] == pytest.approx([expected] * 2, abs=1e-9), word
        written = tmp_path / f"{word}.txt"
        write_argmax_output(written, argmax, task)
        hypotheses = {i: f[1] for i, f in parse_generate_output(written)["H"].items()}
        assert hypotheses == {i: " ".join([words] * n) if words else "" for i, n in lengths.items()}
    assert expected < trained_accuracy <= 1
    del model.decoder.output_layer
    analysis = ["python", "-m", "fairseq_vision_attn.analysis", "monotonic-mismatch", "--data", data]
    analysis += ["--path", ckpt, "--subset", "test", "--argmax-output", str(tmp_path / "tf.txt")]
    out = run_cli(analysis, cwd=REPO).stdout.splitlines()
    assert out[1].split("\t")[-1] == "top-1 accuracy"
    assert float(out[2].split("\t")[-1]) == pytest.approx(trained_accuracy, abs=1e-4)
    (tmp_path / "generated.txt").write_text(run_cli(generate_args(toy_data_bin, ckpt), cwd=REPO).stdout)
    generated = parse_generate_output(tmp_path / "generated.txt")["T"]
    assert parse_generate_output(tmp_path / "tf.txt")["T"] == generated and len(generated) == len(lengths)
    written = (tmp_path / "tf.txt").read_text()
    without_file = analysis[: analysis.index("--argmax-output")]
    for args, message in [
        (analysis, "exists: name a new file"),
        (analysis[:-1] + [str(tmp_path / "no" / "tf.txt")], "its folder does not exist"),
        (without_file + ["--remove-bpe"], "--remove-bpe formats --argmax-output's file"),
        (without_file + ["--tokenizer", "moses"], "--tokenizer formats --argmax-output's file"),
    ]:
        proc = run_cli(args, cwd=REPO, check=False)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert (tmp_path / "tf.txt").read_text() == written


def test_accuracy_by_piece_splits_at_the_bpe_joiner():
    """accuracy_by_piece on a hand-made dictionary: a piece after one ending in "@@" continues a
    word, every other word piece begins one, EOS apart; counts by hand."""
    from fairseq.data import Dictionary

    from fairseq_vision_attn.analysis import accuracy_by_piece, format_accuracy_by_piece

    vocab = Dictionary()
    a, b, c = (vocab.add_symbol(word) for word in ("a@@", "b", "c"))
    eos = vocab.eos()
    argmax = {0: ([a, b, eos], [a, c, eos]), 1: ([c, a, b, eos], [c, a, b, c])}
    counts = accuracy_by_piece(argmax, vocab)
    assert counts == {"word-initial": (3, 3), "continuation": (1, 2), "EOS": (1, 2)}
    assert format_accuracy_by_piece(counts) == (
        "# top-1 accuracy by reference piece: word-initial 1.0000 (3), continuation 0.5000 (2), "
        "EOS 0.5000 (2)"
    )


def test_accuracy_after_splits_by_the_previous_choice():
    """accuracy_after by hand: each position after the first falls under whether the previous one
    was chosen right; the lead is the tokens read before a position minus its index."""
    from fairseq_vision_attn.analysis import accuracy_after, format_accuracy_after

    argmax = {0: ([5, 6, 2], [5, 7, 2]), 1: ([6, 5, 6, 2], [7, 5, 6, 6])}
    delays = {0: [3.0, 4.0, 4.0], 1: [1.0, 1.0, 3.0, 5.0]}
    # after a right token: (s0, 1) wrong, (s1, 2) right, (s1, 3) wrong, leads 3, 1, 2;
    # after a wrong one: (s0, 2) right, (s1, 1) right, leads 2, 0
    rows = accuracy_after(argmax, delays)
    assert rows == {
        "right": (1, 3, pytest.approx((3 + 1 + 2) / 3)),
        "wrong": (2, 2, pytest.approx((2 + 0) / 2)),
    }
    assert accuracy_after(argmax) == {"right": (1, 3, None), "wrong": (2, 2, None)}
    assert format_accuracy_after(rows) == (
        "# top-1 accuracy after a right token 0.3333 (3, lead 2.00); "
        "after a wrong token 1.0000 (2, lead 1.00)"
    )


def test_teacher_forced_matches_fairseq_validate_and_wait_k_lags_k(trained, toy_data_bin, tmp_path):
    """analysis teacher-forced, on the trained toy wait-k (k = 3) and global models: the NLL is
    fairseq-validate's loss (cross-entropy, bits per token) on the same subset; wait-k's DAL is
    min(k, |x|) per sentence (Cherry & Foster's DAL of g_i = min(k + i - 1, |x|) when, as in the
    toy reversal, |y| = |x|), averaged from the data's source lengths; an offline model has none;
    --argmax-output writes fairseq-generate's references, one hypothesis per sentence."""
    import argparse

    from fairseq_vision_attn.analysis import load_subset
    from fairseq_vision_attn.report import parse_generate_output

    data = str(toy_data_bin / "data-bin")
    analysis = ["python", "-m", "fairseq_vision_attn.analysis", "teacher-forced", "--data", data]
    for arch in ("lstm_waitk", "lstm_global"):
        ckpt = str(trained[arch] / "checkpoint_best.pt")
        validate = run_cli(
            ["fairseq-validate", data, "--user-dir", "fairseq_vision_attn", "--task"]
            + ["translation_vision_attn", "--path", ckpt, "--valid-subset", "valid", "--cpu"]
            + ["--max-tokens", "4000"],
            cwd=REPO,
        )
        log = validate.stdout + validate.stderr
        loss = float(re.search(r"valid on 'valid' subset \| loss ([0-9.]+)", log)[1])
        out = run_cli(analysis + ["--path", ckpt], cwd=REPO).stdout.splitlines()
        assert out[1] == "nll (bits/token)\ttop-1 accuracy\tDAL"
        nll, accuracy, dal = out[2].split("\t")
        assert float(nll) == pytest.approx(loss, abs=1e-3) and 0 < float(accuracy) <= 1
        pieces = re.findall(r"(\S+) ([0-9.]+) \((\d+)\)", out[3])  # the toy has no BPE: no continuations
        after = re.fullmatch(
            r"# top-1 accuracy after a right token ([0-9.]+) \((\d+)(?:, lead (\S+))?\); "
            r"after a wrong token ([0-9.]+) \((\d+)(?:, lead (\S+))?\)",
            out[4],
        )
        assert [kind for kind, _, _ in pieces] == ["word-initial", "EOS"]
        correct = sum(float(share) * int(n) for _, share, n in pieces)
        assert correct / sum(int(n) for _, _, n in pieces) == pytest.approx(float(accuracy), abs=1e-3)
        if arch == "lstm_global":
            assert dal == "-" and after[3] is None and after[6] is None
            continue
        subset = argparse.Namespace(path=ckpt, data=data, subset="valid", max_tokens=4000)
        _, _, _, batches = load_subset(subset)
        src_lengths = [int(n) for b in batches for n in b["net_input"]["src_lengths"]]
        assert float(dal) == pytest.approx(sum(min(3, n) for n in src_lengths) / len(src_lengths), abs=1e-3)
        # the lead after the first position: min(k + i, |x|) - i, |y| = |x| in the toy reversal
        leads = [min(3 + i, n) - i for n in src_lengths for i in range(1, n)]
        right, wrong = int(after[2]), int(after[5])
        assert right + wrong == len(leads)
        lead = (right * float(after[3]) + wrong * float(after[6])) / len(leads)
        assert lead == pytest.approx(sum(leads) / len(leads), abs=1e-2)
    written = tmp_path / "tf.txt"  # the offline model's choices (ckpt: lstm_global's, the loop's last)
    run_cli(analysis + ["--path", ckpt, "--subset", "test", "--argmax-output", str(written)], cwd=REPO)
    (tmp_path / "generated.txt").write_text(run_cli(generate_args(toy_data_bin, ckpt), cwd=REPO).stdout)
    generated = parse_generate_output(tmp_path / "generated.txt")["T"]
    lines = parse_generate_output(written)
    assert lines["T"] == generated and set(lines["H"]) == set(generated)
    proc = run_cli(analysis + ["--path", ckpt, "--argmax-output", str(written)], cwd=REPO, check=False)
    assert proc.returncode == 2 and "exists: name a new file" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_mismatch_context_shifts_move_the_hard_context(trained, toy_data_bin):
    """--context-shifts on the trained toy hard monotonic model with its energies set by hand:
    with every head at the last source token (energies of -50) a later context is clipped to the
    sentence and changes nothing, an earlier one does; with every head at the first token
    (energies of +50) the reverse; the heads come back as they were."""
    import argparse

    import torch

    from fairseq_vision_attn.analysis import load_subset, monotonic_mismatch

    ckpt, data = str(trained["lstm_monotonic"] / "checkpoint_best.pt"), str(toy_data_bin / "data-bin")
    model, task, _, batches = load_subset(
        argparse.Namespace(path=ckpt, data=data, subset="valid", max_tokens=4000)
    )
    batches, pad = list(batches), task.target_dictionary.pad()
    head = model.decoder.attention
    for r, same, moved in [(-50.0, [1, 3], [-1]), (50.0, [-1, -3], [1])]:
        with torch.no_grad():
            head.energy.g.fill_(0.0)
            head.energy.r.fill_(r)
        rows = monotonic_mismatch(model, batches, [], pad, context_shifts=same + moved)
        hard, shifted = rows[0], dict(zip(same + moved, rows[1:]))
        assert [row[0] for row in rows[1:]] == [
            f"hard policy (energy), context at the stop {s:+d}" for s in same + moved
        ]
        for s in same:
            assert shifted[s][1:3] == pytest.approx(hard[1:3], abs=1e-6), (r, s)
        for s in moved:
            assert abs(shifted[s][1] - hard[1]) > 1e-5, (r, s)  # another state: another NLL
    assert "hard_weights" not in vars(head) and "training_alignment" not in vars(head)
    proc = run_cli(
        ["python", "-m", "fairseq_vision_attn.analysis", "monotonic-mismatch", "--data", data, "--path", ckpt]
        + ["--context-shifts", "0"],
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 2 and "non-zero integer" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "arch, flags",
    [
        ("lstm_milk", []),
        ("lstm_milk", ["--monotonic-stop", "cumulative"]),
        ("lstm_milk", ["--monotonic-stop", "cumulative", "--monotonic-stop-threshold", "0.7"]),
        ("lstm_waitk", []),
    ],
)
def test_simuleval_agent_agrees_with_the_generator(arch, flags, trained, toy_data_bin, tmp_path):
    """SimulEval 1.1.4's own CLI with this package's agent: same translations, the same delays
    (in SimulEval's units, simuleval_delays), and SimulEval's default metrics (LAAL, AL, AP, DAL,
    ATD) equal ours on them, empty hypotheses skipped by both; also with the cumulative
    stopping rule, whose decisions must not change when the source arrives token by token, at
    the default threshold and at another one."""
    pytest.importorskip("simuleval", reason="SimulEval is not installed (pip install .[simuleval])")
    from fairseq_vision_attn.agent import simuleval_delays

    ckpt = trained[arch] / "checkpoint_best.pt"
    limits = ["--max-len-a", "1.5", "--max-len-b", "3", *flags]
    stats = tmp_path / "stats.jsonl"
    gen = run_cli(generate_args(toy_data_bin, ckpt, "--stats-output", str(stats), *limits), cwd=REPO)
    hypos = {
        int(line.split("\t")[0][2:]): line.split("\t")[2]
        for line in gen.stdout.splitlines()
        if line.startswith("H-")
    }
    rows = {row["id"]: row for row in map(json.loads, stats.read_text().splitlines())}
    raw = toy_data_bin / "raw"
    run_cli(
        [
            "simuleval",
            "--agent-class",
            "fairseq_vision_attn.agent.StreamingAgent",
            "--checkpoint",
            str(ckpt),
            "--data-bin",
            str(toy_data_bin / "data-bin"),
            "--source",
            str(raw / "test.src"),
            "--target",
            str(raw / "test.tgt"),
            "--output",
            str(tmp_path / "simuleval"),
            "--no-progress-bar",  # SimulEval's default metrics: LAAL, AL, AP, DAL, ATD
            *limits,
        ],
        cwd=REPO,
    )
    instances = [
        json.loads(line) for line in (tmp_path / "simuleval" / "instances.log").read_text().splitlines()
    ]
    assert len(instances) == len(rows) == 12
    sentences = []
    for instance in instances:
        row = rows[instance["index"]]
        delays, words = simuleval_delays(row["delays"], row["src_len"])
        assert instance["prediction"] == hypos[instance["index"]]
        assert instance["delays"] == delays and instance["source_length"] == words
        sentences.append(latency_scores(delays, words, ref_len=len(instance["reference"].split())))
    header, values = (tmp_path / "simuleval" / "scores.tsv").read_text().splitlines()[:2]
    theirs = dict(zip(header.split("\t"), map(float, values.split("\t"))))
    ours = corpus_latency(sentences)
    for name in ("LAAL", "AL", "AP", "DAL"):
        assert theirs[name] == pytest.approx(ours[name], abs=2e-3), name
    # With --output, SimulEval 1.1.4 re-reads its instances from instances.log (LogInstance) and
    # its ATD scorer then takes the speech branch (300 units per source token, target tokens of
    # length 0). The text-to-text ATD is what its scorer gives on text instances: compare that.
    from simuleval.evaluator.instance import TextToTextInstance
    from simuleval.evaluator.scorers.latency_scorer import ATDScorer

    text_instances = {}
    for i, instance in enumerate(instances):
        text_instances[i] = object.__new__(TextToTextInstance)
        text_instances[i].delays, text_instances[i].metrics = instance["delays"], {}
    assert ATDScorer()(text_instances) == pytest.approx(ours["ATD"])


def test_streaming_attention_plot(trained, toy_data_bin, tmp_path):
    """plots streaming-attention decodes simultaneously and draws the head; a non-streaming
    checkpoint is refused with a message naming the streaming archs."""
    base = ["python", "-m", "fairseq_vision_attn.plots", "streaming-attention", "--data-bin"]
    base += [str(toy_data_bin / "data-bin"), "--ids", "0", "3", "--out-dir", str(tmp_path)]
    run_cli(base + ["--path", str(trained["lstm_milk"] / "checkpoint_best.pt")], cwd=REPO)
    assert (tmp_path / "streaming_0.png").stat().st_size > 5_000 and (tmp_path / "streaming_3.png").exists()
    proc = run_cli(
        base + ["--path", str(trained["lstm_global"] / "checkpoint_best.pt")], cwd=REPO, check=False
    )
    assert proc.returncode != 0 and "not a streaming checkpoint" in proc.stderr
    proc = run_cli(
        base + ["--path", str(trained["lstm_waitk"] / "checkpoint_best.pt"), "--monotonic-stop", "energy"],
        cwd=REPO,
        check=False,
    )
    assert proc.returncode != 0 and "--monotonic-stop needs a model with a monotonic head" in proc.stderr


def test_streaming_attention_plot_stop_rule(trained, toy_data_bin, tmp_path):
    """--monotonic-stop reaches the plotted decoding: up to the first token where they differ, the
    cumulative rule's head is never further right than the energy rule's (it stops no later)."""
    from fairseq_vision_attn.plots import streaming_attentions

    ckpt, data_bin = str(trained["lstm_milk"] / "checkpoint_best.pt"), str(toy_data_bin / "data-bin")
    ids = list(range(8))
    energy = streaming_attentions(ckpt, data_bin, ids, str(tmp_path / "energy"), "test", "energy")
    cumulative = streaming_attentions(ckpt, data_bin, ids, str(tmp_path / "cum"), "test", "cumulative")
    for i in ids:
        assert (tmp_path / "cum" / f"streaming_{i}.png").exists()
        # same prefix of outputs until the rules first disagree; there cumulative reads no more
        first = next((j for j, (a, b) in enumerate(zip(energy[i], cumulative[i])) if a != b), None)
        if first is not None:
            assert cumulative[i][first] < energy[i][first]


def test_resume_after_eval_bleu_checkpoint(toy_data_bin, tmp_path):
    """numpy values (--eval-bleu) and argparse.Namespace load under weights_only torch.load."""
    bleu = [
        "--eval-bleu",
        "--eval-bleu-args",
        '{"beam": 1}',
        "--best-checkpoint-metric",
        "bleu",
        "--maximize-best-checkpoint-metric",
    ]
    run_cli(train_args(toy_data_bin, tmp_path, "lstm_global", *bleu), cwd=REPO)
    first = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)
    updates = first["optimizer_history"][-1]["num_updates"]
    proc = run_cli(train_args(toy_data_bin, tmp_path, "lstm_global", *bleu) + ["--max-epoch", "2"], cwd=REPO)
    assert "Loaded checkpoint" in proc.stdout + proc.stderr
    second = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)
    epoch = first["extra_state"]["train_iterator"]["epoch"]  # fairseq stores the next epoch
    assert second["extra_state"]["train_iterator"]["epoch"] == epoch + 1
    assert second["optimizer_history"][-1]["num_updates"] == 2 * updates


def test_resume_keeps_the_early_stopping_count(toy_data_bin, tmp_path):
    """--patience counts validations without improvement across a resume: a run stopped after
    epoch 2 and resumed stops at the epoch where the same run uninterrupted stops (fairseq alone
    would restart the count and take the first loss after the restart as the best). With a
    learning rate of 1e-9 the validation loss never improves after epoch 1, so --patience 3
    stops both at epoch 4 (fairseq alone: the resumed run at 6). Also when fairseq-train is run
    as `python -m fairseq_cli.train` (as the GPU machine's setup does), where fairseq's module is
    `__main__`."""
    flags = ["--lr", "1e-9", "--patience", "3", "--max-epoch", "10"]
    whole = run_cli(train_args(toy_data_bin, tmp_path / "whole", "lstm_global", *flags), cwd=REPO)

    def last_epoch(save_dir):  # the saved iterator holds the next epoch to train
        state = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)
        return state["extra_state"]["train_iterator"]["epoch"] - 1

    assert "early stop since valid performance hasn't improved" in whole.stdout + whole.stderr
    assert last_epoch(tmp_path / "whole") == 4
    for launcher in (["fairseq-train"], [sys.executable, "-m", "fairseq_cli.train"]):
        parts = tmp_path / f"parts{len(launcher)}"
        args = train_args(toy_data_bin, parts, "lstm_global", *flags)[1:]  # without "fairseq-train"
        run_cli(launcher + args + ["--max-epoch", "2"], cwd=REPO)
        resumed = run_cli(launcher + args, cwd=REPO)
        assert "early stop since valid performance hasn't improved" in resumed.stdout + resumed.stderr
        assert "early stopping resumes at best" in resumed.stdout + resumed.stderr, launcher
        assert last_epoch(parts) == 4, launcher


def test_resume_keeps_the_learning_rate_schedule(toy_data_bin, tmp_path):
    """A run resumed from an end-of-epoch checkpoint_last.pt trains each epoch at the rate of the
    same run uninterrupted (fairseq alone saves the checkpoint before the plateau rule sees the
    epoch's validation loss and drops that step on resume, and forgets --lr-patience's count).
    --lr-threshold 0.9 counts a loss as better only below a tenth of the best, which the rate of
    1e-4 never reaches after epoch 1 (torch ignores halvings of less than 1e-8, so the rate
    cannot be tiny), so --lr-patience 1 halves the rate after epochs 3 and 5: 1e-4 for epochs
    1-3, 5e-5 for 4-5, 2.5e-5 for 6. The run stopped after epoch 3 needs both epoch 3's step and
    epoch 2's count (fairseq alone: 1e-4 through epoch 5, 5e-5 for 6)."""
    flags = ["--lr", "1e-4", "--lr-scheduler", "reduce_lr_on_plateau", "--lr-shrink", "0.5"]
    flags += ["--lr-threshold", "0.9", "--lr-patience", "1", "--max-epoch", "6"]
    whole = run_cli(train_args(toy_data_bin, tmp_path / "whole", "lstm_global", *flags), cwd=REPO)
    parts = tmp_path / "parts"
    first = run_cli(train_args(toy_data_bin, parts, "lstm_global", *flags, "--max-epoch", "3"), cwd=REPO)
    resumed = run_cli(train_args(toy_data_bin, parts, "lstm_global", *flags), cwd=REPO)

    def rates(*procs):  # {epoch: lr} from fairseq's end-of-epoch "| train |" lines
        lines = "".join(p.stdout + p.stderr for p in procs)
        found = re.findall(r"\| train \| epoch (\d+) \|.*?\| lr ([^ |]+)", lines)
        return {int(epoch): float(lr) for epoch, lr in found}

    expected = {1: 1e-4, 2: 1e-4, 3: 1e-4, 4: 5e-5, 5: 5e-5, 6: 2.5e-5}
    assert rates(whole) == pytest.approx(expected, rel=1e-6)
    assert rates(first, resumed) == pytest.approx(expected, rel=1e-6)
    assert "made up on resume: lr 0.0001 -> 5e-05" in resumed.stdout + resumed.stderr


def test_resume_trains_on_the_batches_of_the_same_run_uninterrupted(toy_data_bin, tmp_path):
    """A run trained one epoch per fairseq-train call is the same run as one trained in one call:
    the same validation loss at every epoch and the same weights to the bit. fairseq groups the
    training sentences into batches once, with the seed plus the epoch it builds the iterator
    at, and an uninterrupted run keeps epoch 1's grouping; a resume builds it at the resumed
    epoch, so fairseq alone trains the resumed epochs on other batches (here epoch 2's loss
    already differs). Dropout on (the context's too), so the per-update seeding is covered too."""
    flags = ["--dropout", "0.2", "--decoder-dropout-context", "0.2"]
    flags += ["--lr-scheduler", "reduce_lr_on_plateau", "--lr-patience", "0"]

    def valid_losses(*procs):
        lines = "".join(p.stdout + p.stderr for p in procs)
        return re.findall(r"valid on 'valid' subset \| loss ([0-9.]+)", lines)

    def train(run, epochs):
        return run_cli(
            train_args(toy_data_bin, tmp_path / run, "lstm_global", *flags, "--max-epoch", epochs), cwd=REPO
        )

    whole = train("whole", "3")
    parts = [train("parts", str(epoch)) for epoch in (1, 2, 3)]
    assert len(valid_losses(whole)) == 3
    assert valid_losses(*parts) == valid_losses(whole)
    models = [
        torch.load(tmp_path / run / "checkpoint_last.pt", weights_only=True)["model"]
        for run in ("whole", "parts")
    ]
    assert models[0].keys() == models[1].keys()
    assert all(torch.equal(models[0][name], models[1][name]) for name in models[0])


# (arch, invalid flags, text the one-line error must name): checks across flags, criteria and
# files; each model flag's own values are swept in test_flag_sweep.py
BAD = [
    (
        "lstm_global",
        ["--share-decoder-input-output-embed", "--decoder-out-embed-dim", "8"],
        "--share-decoder-input-output-embed",
    ),
    ("lstm_global", ["--encoder-embed-path", "/no/such/embeddings.txt"], "--encoder-embed-path"),
    (
        "lstm_flexible",
        ["--criterion", "flexible_attention_cross_entropy", "--gt-regularizer-weight", "-0.1"],
        "--gt-regularizer-weight",
    ),
    (
        "lstm_flexible",
        ["--criterion", "flexible_attention_cross_entropy", "--gt-regularizer-weight", "nan"],
        "--gt-regularizer-weight",
    ),
    ("lstm_global", ["--attention-temperature", "fixed", "--fixed-temperature", "0"], "--fixed-temperature"),
    ("lstm_noattn", ["--attention-temperature", "sact"], "cannot be applied to --attention none"),
    ("lstm_milk", ["--encoder-bidirectional", "true"], "--encoder-bidirectional"),
    (
        "lstm_milk",
        ["--criterion", "latency_augmented_cross_entropy", "--latency-weight", "-1"],
        "--latency-weight",
    ),
    (
        "lstm_milk",
        ["--criterion", "latency_augmented_cross_entropy", "--latency-weight", "nan"],
        "--latency-weight",
    ),
    (
        "lstm_milk",
        ["--criterion", "latency_augmented_cross_entropy", "--latency-metric", "al"],
        "--latency-metric",
    ),
    (
        "lstm_milk",
        ["--criterion", "latency_augmented_cross_entropy", "--latency-warmup-updates", "-1"],
        "--latency-warmup-updates",
    ),
    ("lstm_global", ["--criterion", "latency_augmented_cross_entropy"], "needs a streaming arch"),
    ("lstm_global", ["--criterion", "flexible_attention_cross_entropy"], "flexible"),
]


@pytest.mark.parametrize("arch,flags,named", BAD, ids=[f"{a}:{n}={f[-1]}" for a, f, n in BAD])
def test_bad_training_flags_fail_clearly(arch, flags, named, toy_data_bin, tmp_path):
    proc = run_cli(train_args(toy_data_bin, tmp_path, arch) + flags, cwd=REPO, check=False)
    assert proc.returncode != 0
    assert named in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    # refused before any training step: no checkpoint, and no crash.pt from a failed update
    assert not list(tmp_path.glob("*.pt")), sorted(p.name for p in tmp_path.iterdir())


@pytest.mark.parametrize(
    "arch,criterion,named",
    [
        ("lstm_global", "latency_augmented_cross_entropy", "needs a streaming arch"),
        ("lstm_milk", "flexible_attention_cross_entropy", "needs a model with flexible attention"),
    ],
)
def test_criterion_for_another_arch_is_refused_under_fairseqs_task_too(
    arch, criterion, named, toy_data_bin, tmp_path
):
    """Without --task (fairseq's translation) the model refuses the criterion as it is built, as
    translation_vision_attn does: one line, before any update, so no crash.pt."""
    args = train_args(toy_data_bin, tmp_path, arch) + ["--criterion", criterion]
    proc = run_cli(without_task(args), cwd=REPO, check=False)
    assert proc.returncode != 0 and named in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert not list(tmp_path.glob("*.pt")), sorted(p.name for p in tmp_path.iterdir())


def test_unwritable_stats_output_fails_clearly(trained, toy_data_bin, tmp_path):
    missing = tmp_path / "no" / "such" / "dir" / "stats.jsonl"
    proc = run_cli(
        generate_args(
            toy_data_bin, trained["lstm_global"] / "checkpoint_best.pt", "--stats-output", str(missing)
        ),
        cwd=REPO,
        check=False,
    )
    assert proc.returncode != 0
    assert "--stats-output" in proc.stderr and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_checkpoint_or_subset_fails_clearly(trained, toy_data_bin, tmp_path):
    """fairseq's own errors about a missing checkpoint or split, shown as one line."""
    ckpt = trained["lstm_global"] / "checkpoint_best.pt"
    cases = [
        (generate_args(toy_data_bin, tmp_path / "none.pt"), "Model file not found"),
        (generate_args(toy_data_bin, ckpt, "--gen-subset", "test9"), "Dataset not found: test9"),
    ]
    for cmd, message in cases:
        proc = run_cli(cmd, cwd=REPO, check=False)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert message in proc.stderr.splitlines()[-1]


def test_damaged_checkpoints_and_another_vocabulary_fail_in_one_line(trained, toy_data_bin, tmp_path):
    """A checkpoint cut to half its size, an empty one, and a data-bin whose target dictionary
    has another size: one line naming the problem, exit 2, no traceback (generate, interactive,
    resumed training, fine-tuning)."""
    good = trained["lstm_global"] / "checkpoint_best.pt"
    data = good.read_bytes()
    half, empty = tmp_path / "half.pt", tmp_path / "empty.pt"
    half.write_bytes(data[: len(data) // 2])
    empty.write_bytes(b"")
    other = tmp_path / "other"  # the toy data-bin with two more target words
    shutil.copytree(toy_data_bin / "data-bin", other / "data-bin")
    with open(other / "data-bin" / "dict.tgt.txt", "a", encoding="utf-8") as handle:
        handle.write("extra1 1\nextra2 1\n")
    resume = tmp_path / "resume"
    resume.mkdir()
    (resume / "checkpoint_last.pt").write_bytes(data[: len(data) // 3])
    cases = [
        (generate_args(toy_data_bin, half), "is damaged or truncated"),
        (generate_args(toy_data_bin, empty), "is damaged or truncated"),
        (interactive_args(toy_data_bin, half), "is damaged or truncated"),
        (train_args(toy_data_bin, resume, "lstm_global"), "is damaged or truncated"),
        (generate_args(other, good), "target vocabulary has"),
        (
            train_args(other, tmp_path / "ft", "lstm_global", "--finetune-from-model", str(good)),
            "target vocabulary has",
        ),
    ]
    for cmd, message in cases:
        proc = run_cli(cmd, cwd=REPO, check=False, input="")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (cmd[0], proc.stderr[-2000:])
        assert message in proc.stderr.splitlines()[-1], (cmd[0], proc.stderr[-500:])
    assert (resume / "checkpoint_last.pt").stat().st_size == len(data) // 3  # left as it was


def test_same_size_dictionary_in_another_order_is_refused(trained, toy_data_bin, tmp_path):
    """A data-bin whose target dictionary has the checkpoint's size but two words swapped would
    decode with wrong token ids: refused in one line (generate, fine-tuning); a checkpoint saved
    without fingerprints (older code) loads with a warning and decodes as before."""
    good = trained["lstm_global"] / "checkpoint_best.pt"
    swapped = tmp_path / "swapped"
    shutil.copytree(toy_data_bin / "data-bin", swapped / "data-bin")
    lines = (swapped / "data-bin" / "dict.tgt.txt").read_text().splitlines(keepends=True)
    lines[0], lines[1] = lines[1], lines[0]
    (swapped / "data-bin" / "dict.tgt.txt").write_text("".join(lines))
    for cmd in (
        generate_args(swapped, good),
        train_args(swapped, tmp_path / "ft", "lstm_global", "--finetune-from-model", str(good)),
    ):
        proc = run_cli(cmd, cwd=REPO, check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert "trained with another target dictionary than the data-bin's" in proc.stderr.splitlines()[-1]
    state = torch.load(good, map_location="cpu", weights_only=False)
    for key in ("source_dictionary_fingerprint", "target_dictionary_fingerprint"):
        assert state["model"].pop(key).dtype == torch.uint8
    old = tmp_path / "old.pt"
    torch.save(state, old)
    before = run_cli(generate_args(toy_data_bin, good), cwd=REPO)
    after = run_cli(generate_args(toy_data_bin, old), cwd=REPO)
    assert "stores no dictionary fingerprints" in after.stderr
    hypos = [[line for line in proc.stdout.splitlines() if line.startswith("H-")] for proc in (before, after)]
    assert hypos[0] == hypos[1] and len(hypos[0]) == 12


def test_checkpoint_of_another_arch_fails_clearly(trained, toy_data_bin, tmp_path):
    ckpt = trained["lstm_global"] / "checkpoint_best.pt"
    proc = run_cli(
        train_args(toy_data_bin, tmp_path, "lstm_local", "--restore-file", str(ckpt), "--reset-optimizer"),
        cwd=REPO,
        check=False,
    )
    assert proc.returncode != 0
    assert "checkpoint does not match --arch lstm_local" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_checkpoint_storing_an_ignored_flag_still_loads(toy_data_bin, tmp_path):
    """fairseq-train refuses --local-window-d on lstm_global, under either task
    (test_flag_sweep.py, test_ignored_flag_is_refused_under_fairseqs_task_too); a checkpoint that
    stores such a value (one trained before that refusal: here its stored arguments are edited)
    still decodes: the check applies to the user's flags, not to a checkpoint's."""
    run_cli(train_args(toy_data_bin, tmp_path / "plain", "lstm_global"), cwd=REPO)
    checkpoint = tmp_path / "plain" / "checkpoint_best.pt"
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    state["cfg"]["model"].local_window_d = 3
    torch.save(state, checkpoint)
    out = run_cli(generate_args(toy_data_bin, checkpoint), cwd=REPO)
    assert "BLEU4" in out.stdout


def test_ignored_flag_is_refused_under_fairseqs_task_too(toy_data_bin, tmp_path):
    """Without --task (fairseq's translation) fairseq-train refuses a flag the arch's attention
    ignores, in the line translation_vision_attn gives, before anything is written."""
    args = without_task(train_args(toy_data_bin, tmp_path, "lstm_global", "--local-window-d", "3"))
    proc = run_cli(args, cwd=REPO, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[-1].endswith(
        "--local-window-d 3 has no effect here: it is read only with --attention local, and this "
        "model has --attention additive (--arch lstm_global); drop the flag or pick that mechanism"
    ), proc.stderr[-2000:]
    assert not list(tmp_path.glob("*.pt")), sorted(p.name for p in tmp_path.iterdir())


def test_checkpoint_of_fairseqs_own_lstm(toy_data_bin, tmp_path):
    """A checkpoint of fairseq's ``--arch lstm``: decodes through this task (no attention
    statistics to write), and is refused in one line where this package's model is needed
    (our flags at decoding, restoring it into our arch, the plots)."""
    fairseq_lstm = train_args(toy_data_bin, tmp_path / "fs", "lstm_global")
    fairseq_lstm[fairseq_lstm.index("lstm_global")] = "lstm"
    run_cli(fairseq_lstm, cwd=REPO)
    ckpt = tmp_path / "fs" / "checkpoint_best.pt"
    stats = tmp_path / "stats.jsonl"
    proc = run_cli(generate_args(toy_data_bin, ckpt, "--stats-output", str(stats)), cwd=REPO)
    assert "BLEU4" in proc.stdout and len(stats.read_text().splitlines()) == 12
    refusals = [
        (
            generate_args(toy_data_bin, ckpt, "--vision-span-threshold", "1.0"),
            "this checkpoint uses 'LSTMModel'",
        ),
        (generate_args(toy_data_bin, ckpt, "--test-waitk-lagging", "2"), "this checkpoint uses 'LSTMModel'"),
        (
            train_args(toy_data_bin, tmp_path / "ours", "lstm_global", "--restore-file", str(ckpt)),
            "checkpoint does not match --arch lstm_global",
        ),
        (
            ["python", "-m", "fairseq_vision_attn.plots", "memory-alignment", "--path", str(ckpt)]
            + ["--data-bin", str(toy_data_bin / "data-bin"), "--ids", "0", "--out-dir", str(tmp_path / "p")],
            "a LSTMModel checkpoint",
        ),
    ]
    for cmd, message in refusals:
        proc = run_cli(cmd, cwd=REPO, check=False)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr


def assert_best_checkpoint_scored_by_nll_loss(log):
    """--best-checkpoint-metric nll_loss with an extra-term criterion: checkpoint_best.pt is
    scored by the cross-entropy alone (fairseq's "Saved checkpoint ... score X" line), not by the
    logged loss, which includes -beta g or lambda DAL."""
    valid = next(line for line in log.splitlines() if "| valid |" in line)
    saved = next(line for line in log.splitlines() if "Saved checkpoint" in line)
    nll = float(valid.split("| nll_loss ")[1].split()[0])
    loss = float(valid.split("| loss ")[1].split()[0])
    score = float(saved.split("score ")[1].split(")")[0])
    assert score == pytest.approx(nll, abs=1e-3) and loss != nll, (valid, saved)


def _valid_g_mean(log):
    assert_best_checkpoint_scored_by_nll_loss(log)
    line = next(line for line in log.splitlines() if "| valid |" in line)
    return float(line.split("| g_mean ")[1].split()[0])


def test_flexible_finetune_and_threshold_decode(trained, toy_data_bin, tmp_path):
    """Train (fixture), fine-tune one epoch with beta = 0.1, decode with tau = 0.1 (Shu sec. 3).
    The fine-tuning raises the mean strength g(t) on the validation data above that of the same
    epoch fine-tuned with beta = 0 (Eq. 9's purpose)."""
    base = trained["lstm_flexible"] / "checkpoint_best.pt"
    g_mean = {}
    for beta, save_dir in (("0.1", tmp_path / "ft"), ("0", tmp_path / "ft0")):
        proc = run_cli(
            train_args(
                toy_data_bin,
                save_dir,
                "lstm_flexible",
                "--finetune-from-model",
                str(base),
                "--criterion",
                "flexible_attention_cross_entropy",
                "--gt-regularizer-weight",
                beta,
                "--label-smoothing",
                "0.1",
                "--best-checkpoint-metric",
                "nll_loss",
            ),
            cwd=REPO,
        )
        g_mean[beta] = _valid_g_mean(proc.stdout + proc.stderr)
    # same seed, batches and updates: only beta differs (6 updates here, so the gap is small)
    assert g_mean["0.1"] > g_mean["0"], g_mean
    rows = {}
    for tau in ("inf", "0.1"):
        stats = tmp_path / f"stats.{tau}.jsonl"
        out = run_cli(
            generate_args(
                toy_data_bin,
                tmp_path / "ft" / "checkpoint_best.pt",
                "--vision-span-threshold",
                tau,
                "--stats-output",
                str(stats),
            ),
            cwd=REPO,
        )
        assert "beam-avg window_size" in out.stdout
        rows[tau] = [json.loads(line) for line in stats.read_text().splitlines()]
    assert all(r["window_sizes"] == [r["src_len"]] * r["hypo_len"] for r in rows["inf"])
    narrowed = [w < r["src_len"] for r in rows["0.1"] for w in r["window_sizes"]]
    assert all(1 <= w <= r["src_len"] for r in rows["0.1"] for w in r["window_sizes"])
    assert any(narrowed), "tau = 0.1 never narrowed the window"
    # analysis window-bound, from the rows' g and focus, gives the mean window the decoder scored
    from fairseq_vision_attn.analysis import window_bound

    full, [(_, own, strongest)] = window_bound(dict(enumerate(rows["0.1"])), 1.5, [0.1])
    recorded = [w for r in rows["0.1"] for w in r["window_sizes"]]
    assert abs(own - sum(recorded) / len(recorded)) < 1e-9 and strongest <= own <= full


BAD_DECODE = [
    ("lstm_flexible", ["--vision-span-threshold", "0"], "--vision-span-threshold"),
    ("lstm_flexible", ["--vision-span-threshold", "-1"], "--vision-span-threshold"),
    ("lstm_flexible", ["--vision-span-threshold", "nan"], "--vision-span-threshold"),
    ("lstm_flexible", ["--vision-span-threshold", "wide"], "--vision-span-threshold"),
    ("lstm_global", ["--vision-span-threshold", "1.0"], "needs a model with flexible attention"),
]


@pytest.mark.parametrize("arch,flags,named", BAD_DECODE, ids=[f"{a}:{f[-1]}" for a, f, _ in BAD_DECODE])
def test_bad_threshold_fails_clearly(arch, flags, named, trained, toy_data_bin, tmp_path):
    """A refused decoding flag fails in one line, and leaves a --stats-output file as it was."""
    stats = tmp_path / "stats.jsonl"
    stats.write_text('{"id": 0}\n')
    ckpt = trained[arch] / "checkpoint_best.pt"
    args = generate_args(toy_data_bin, ckpt, *flags, "--stats-output", str(stats))
    proc = run_cli(args, cwd=REPO, check=False)
    assert proc.returncode != 0
    assert named in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert stats.read_text() == '{"id": 0}\n'


def test_sact_on_flexible_trains_and_decodes_with_a_threshold(toy_data_bin, tmp_path):
    """The temperature composes with flexible attention end to end: train, then threshold-decode."""
    run_cli(train_args(toy_data_bin, tmp_path, "lstm_flexible", "--attention-temperature", "sact"), cwd=REPO)
    stats = tmp_path / "stats.jsonl"
    proc = run_cli(
        generate_args(
            toy_data_bin,
            tmp_path / "checkpoint_best.pt",
            "--vision-span-threshold",
            "0.5",
            "--stats-output",
            str(stats),
        ),
        cwd=REPO,
    )
    assert "beam-avg window_size" in proc.stdout and "temperature" in proc.stdout
    rows = [json.loads(line) for line in stats.read_text().splitlines()]
    assert all(len(r["temperatures"]) == len(r["window_sizes"]) == r["hypo_len"] for r in rows)


def test_bilinear_score_through_train_and_threshold_decode(toy_data_bin, tmp_path):
    """--attention-score bilinear end to end: fairseq-train stores it, fairseq-generate rebuilds
    the bilinear scorer from the checkpoint and decodes with a threshold."""
    run_cli(train_args(toy_data_bin, tmp_path, "lstm_flexible", "--attention-score", "bilinear"), cwd=REPO)
    state = torch.load(tmp_path / "checkpoint_best.pt", map_location="cpu", weights_only=False)
    assert "decoder.attention.scorer.key_proj.weight" in state["model"]
    assert "decoder.attention.scorer.v.weight" not in state["model"]
    stats = tmp_path / "stats.jsonl"
    flags = ["--vision-span-threshold", "0.5", "--stats-output", str(stats)]
    proc = run_cli(generate_args(toy_data_bin, tmp_path / "checkpoint_best.pt", *flags), cwd=REPO)
    assert "beam-avg window_size" in proc.stdout
    assert all(json.loads(line)["hypo_len"] > 0 for line in stats.read_text().splitlines())


def test_memory_prints_its_effective_alignment(trained, toy_data_bin):
    """fairseq-generate --print-alignment draws alpha . beta (Britz et al. sec. 5) as A- lines."""
    proc = run_cli(
        generate_args(toy_data_bin, trained["lstm_memory"] / "checkpoint_best.pt", "--print-alignment"),
        cwd=REPO,
    )
    alignments = [line for line in proc.stdout.splitlines() if line.startswith("A-")]
    assert len(alignments) == 12
    assert all("-" in pair for line in alignments for pair in line.split("\t")[1].split())


def alignment_lines(stdout):
    return {line.split("\t")[0]: line.split("\t")[1] for line in stdout.splitlines() if line.startswith("A-")}


@pytest.mark.parametrize("arch", ["lstm_global", "lstm_memory"])
@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_print_alignment_is_the_single_sentence_alignment(arch, kind, trained, toy_data_bin):
    """--print-alignment in batches of 5 (left-padded sources of different lengths) prints what
    each sentence alone prints (no padding: the oracle). fairseq reads the weights at left-padded
    positions while these encoders attend over right-padded ones; the task lines the two up."""
    ckpt = trained[arch] / "checkpoint_best.pt"
    flags = ["--print-alignment", kind]
    batched = alignment_lines(run_cli(generate_args(toy_data_bin, ckpt, *flags), cwd=REPO).stdout)
    alone = alignment_lines(
        run_cli(generate_args(toy_data_bin, ckpt, *flags, "--batch-size", "1"), cwd=REPO).stdout
    )
    assert len(batched) == 12 and batched.keys() == alone.keys()
    for key in batched:
        if kind == "hard":
            assert batched[key] == alone[key]
            continue
        steps, single = batched[key].split(), alone[key].split()
        assert len(steps) == len(single)
        for step, oracle in zip(steps, single):
            weights, expected = step.split(","), oracle.split(",")
            assert len(weights) == len(expected)
            assert [float(w) for w in weights] == pytest.approx([float(w) for w in expected], abs=1e-4)
            assert sum(float(w) for w in weights) == pytest.approx(1.0, abs=1e-3)


def test_fairseq_lstm_encoders_count_as_right_padded():
    """fairseq's own LSTM encoder converts a left-padded batch to right padding too (left_pad,
    its default): its alignments need the same lining up; an encoder that says nothing does not."""
    from types import SimpleNamespace

    from fairseq.data import Dictionary
    from fairseq.models.lstm import LSTMEncoder

    from fairseq_vision_attn.tasks.translation_vision_attn import attends_right_padded

    dictionary = Dictionary()
    assert attends_right_padded(SimpleNamespace(encoder=LSTMEncoder(dictionary, embed_dim=8, hidden_size=8)))
    assert not attends_right_padded(
        SimpleNamespace(encoder=LSTMEncoder(dictionary, embed_dim=8, hidden_size=8, left_pad=False))
    )
    assert not attends_right_padded(SimpleNamespace(encoder=torch.nn.Identity()))


def test_sharpness_analyses_read_soft_alignments_and_memory_slots(trained, toy_data_bin, tmp_path):
    """analysis alignment-sharpness over fairseq-generate --print-alignment soft: one
    distribution per output step (memory's alpha . beta sums to 1), its mean peak recomputed
    here; hard alignments and a missing --print-alignment are refused in one line. analysis
    memory-slots: K slots per test sentence; a model without memory attention is refused."""
    ckpt = trained["lstm_memory"] / "checkpoint_best.pt"
    gen = tmp_path / "soft.txt"
    gen.write_text(run_cli(generate_args(toy_data_bin, ckpt, "--print-alignment", "soft"), cwd=REPO).stdout)
    steps = [
        [float(w) for w in step.split(",")]
        for line in gen.read_text().splitlines()
        if line.startswith("A-")
        for step in line.split("\t")[1].split()
    ]
    assert steps and all(sum(step) == pytest.approx(1.0, abs=1e-3) for step in steps)
    analysis = ["python", "-m", "fairseq_vision_attn.analysis"]
    out = run_cli(analysis + ["alignment-sharpness", "--generate", str(gen)], cwd=REPO).stdout.splitlines()
    row = out[1].split("\t")
    assert int(row[1]) == len(steps)
    assert float(row[2]) == pytest.approx(sum(max(s) / sum(s) for s in steps) / len(steps), abs=1e-3)
    hard = tmp_path / "hard.txt"
    hard.write_text(run_cli(generate_args(toy_data_bin, ckpt, "--print-alignment"), cwd=REPO).stdout)
    plain = tmp_path / "plain.txt"
    plain.write_text("S-0\ta b\nH-0\t-0.1\tb a\n")
    for path, message in [(hard, "hard alignments"), (plain, "no A- lines")]:
        proc = run_cli(analysis + ["alignment-sharpness", "--generate", str(path)], cwd=REPO, check=False)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    data = str(toy_data_bin / "data-bin")
    slots = run_cli(analysis + ["memory-slots", "--path", str(ckpt), "--data", data], cwd=REPO).stdout
    header, _, row, coverage = slots.splitlines()  # softmax encoder scores (the default): no gate line
    assert "encoder score softmax" in header
    share = float(re.search(r"peak: ([0-9.]+) of a sentence's positions", coverage)[1])
    assert 0 < share <= 1
    # The same weights read as sigmoid gates (the parameters do not depend on the score function).
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    state["cfg"]["model"].memory_encoder_score = "sigmoid"
    torch.save(state, tmp_path / "sigmoid.pt")
    sigmoid = ["memory-slots", "--path", str(tmp_path / "sigmoid.pt"), "--data", data]
    gates = run_cli(analysis + sigmoid, cwd=REPO).stdout.splitlines()
    assert "encoder score sigmoid" in gates[0] and len(gates) == 5
    assert gates[4].startswith("# sigmoid gates before normalisation: mean 0.")
    memory_size = int(re.search(r"K = (\d+)", header)[1])
    sentences = int(re.search(r"(\d+) test sentences", header)[1])
    assert row.split("\t")[:2] == ["slots", str(memory_size * sentences)]
    assert 0 < float(row.split("\t")[2]) <= 1
    glob = str(trained["lstm_global"] / "checkpoint_best.pt")
    proc = run_cli(analysis + ["memory-slots", "--path", glob, "--data", data], cwd=REPO, check=False)
    assert proc.returncode == 2 and "no memory attention" in proc.stderr and "Traceback" not in proc.stderr


def test_attention_agreement_compares_two_models_teacher_forced(trained, toy_data_bin):
    """analysis attention-agreement: a model against itself agrees at every step (same peak 1,
    overlap 1, no peak before or after); against another arch each share is in [0, 1]; every
    target token of valid (EOS included, counted here from the raw text) is one distribution of
    each model; a decoder without attention is a one-line error."""
    data = str(toy_data_bin / "data-bin")
    analysis = ["python", "-m", "fairseq_vision_attn.analysis", "attention-agreement", "--data", data]
    glob, memory = (str(trained[arch] / "checkpoint_best.pt") for arch in ("lstm_global", "lstm_memory"))
    lines = (toy_data_bin / "raw" / "valid.tgt").read_text().splitlines()
    tokens = sum(len(line.split()) + 1 for line in lines)
    out = run_cli(analysis + ["--path", glob, "--reference", glob], cwd=REPO).stdout.splitlines()
    assert [row.split("\t")[:2] for row in out[2:4]] == [["model", str(tokens)], ["reference", str(tokens)]]
    assert f"({tokens - len(lines)} steps, t >= 2)" in out[4]
    assert out[5].split("\t") == ["step t", "1.000", "1.000", "0.000", "0.000"]
    out = run_cli(analysis + ["--path", glob, "--reference", memory], cwd=REPO).stdout.splitlines()
    same, previous = out[5].split("\t"), out[6].split("\t")
    assert all(0 <= float(v) <= 1 for v in same[1:] + previous[1:3])
    assert float(same[3]) + float(same[4]) + float(same[1]) == pytest.approx(1.0, abs=2e-3)
    noattn = str(trained["lstm_noattn"] / "checkpoint_best.pt")
    proc = run_cli(analysis + ["--path", noattn, "--reference", glob], cwd=REPO, check=False)
    assert proc.returncode == 2 and "returns no attention" in proc.stderr and "Traceback" not in proc.stderr


def test_sact_variants_train_and_decode(toy_data_bin, tmp_path):
    """--sact-form mlp --sact-embedding --sact-dropout through fairseq-train; the checkpoint
    rebuilds the same variant in fairseq-generate (its temperatures are in the statistics)."""
    flags = ["--sact-form", "mlp", "--sact-embedding", "--sact-dropout", "0.1"]
    run_cli(train_args(toy_data_bin, tmp_path, "lstm_sact", *flags), cwd=REPO)
    state = torch.load(tmp_path / "checkpoint_best.pt", map_location="cpu", weights_only=False)
    assert "decoder.attention.temperature.hidden.weight" in state["model"]
    stats = tmp_path / "stats.jsonl"
    run_cli(
        generate_args(toy_data_bin, tmp_path / "checkpoint_best.pt", "--stats-output", str(stats)), cwd=REPO
    )
    rows = [json.loads(line) for line in stats.read_text().splitlines()]
    assert all(len(row["temperatures"]) == row["hypo_len"] for row in rows)
    proc = run_cli(
        train_args(toy_data_bin, tmp_path / "g", "lstm_global", "--sact-form", "mlp"), cwd=REPO, check=False
    )
    assert proc.returncode == 2 and "--sact-form" in proc.stderr.splitlines()[-1]


def test_simuleval_agent_errors_are_one_line(trained, toy_data_bin, tmp_path):
    pytest.importorskip("simuleval", reason="SimulEval is not installed (pip install .[simuleval])")
    raw = toy_data_bin / "raw"
    base = ["simuleval", "--agent-class", "fairseq_vision_attn.agent.StreamingAgent", "--source"]
    base += [str(raw / "test.src"), "--target", str(raw / "test.tgt"), "--no-progress-bar"]
    milk, plain = (str(trained[arch] / "checkpoint_best.pt") for arch in ("lstm_milk", "lstm_global"))
    cases = [
        (["--checkpoint", milk, "--data-bin", str(tmp_path / "x")], f"{tmp_path / 'x'}: no such directory"),
        (["--checkpoint", plain], "is not a streaming checkpoint"),
        (["--checkpoint", milk, "--monotonic-stop-threshold", "0"], "strictly between 0 and 1, got 0.0"),
        (["--checkpoint", str(tmp_path / "none.pt")], "Model file not found"),
    ]
    for extra, message in cases:
        proc = run_cli([*base, *extra, "--output", str(tmp_path / "out")], cwd=REPO, check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-1500:]
        assert proc.stderr.strip().splitlines()[-1].startswith("fairseq-vision-attn: error: ")
        assert message in proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("arch,order", [("lstm_global", "luong"), ("lstm_milk", "conditional")])
def test_decoder_step_orders_train_and_decode(arch, order, toy_data_bin, tmp_path):
    """--decoder-step through fairseq-train: the checkpoint stores the order and fairseq-generate
    rebuilds it (beam search reorders luong's fed readout; MILk decodes simultaneously)."""
    run_cli(train_args(toy_data_bin, tmp_path, arch, "--decoder-step", order), cwd=REPO)
    state = torch.load(tmp_path / "checkpoint_best.pt", map_location="cpu", weights_only=False)
    assert state["cfg"]["model"].decoder_step == order
    # the first LSTM reads [e; f_{t-1}] (luong: 16 + 16) or c_t alone (conditional: 16, unidirectional)
    assert state["model"]["decoder.layers.0.weight_ih"].shape[1] == {"luong": 32, "conditional": 16}[order]
    assert ("decoder.conditional.weight_ih" in state["model"]) == (order == "conditional")
    beam = ["--beam", "1"] if arch == "lstm_milk" else []
    proc = run_cli(generate_args(toy_data_bin, tmp_path / "checkpoint_best.pt", *beam), cwd=REPO)
    sources = [line for line in proc.stdout.splitlines() if line.startswith("S-")]
    hypotheses = [line for line in proc.stdout.splitlines() if line.startswith("H-")]
    assert sources and len(hypotheses) == len(sources)
