"""Checkpoint averaging (python -m fairseq_vision_attn.average) and the recipe that decodes each
kept epoch and averages of them (recipes/claims/checkpoint_choice.sh): the average is the mean of
the inputs' weights, computed here independently from the files; --upto best finds the epoch of
checkpoint_best.pt; the averaged file decodes with fairseq-generate; bad input is one line."""

import os
import subprocess
import sys

import pytest
import torch

from fairseq_vision_attn import average
from fairseq_vision_attn.errors import VisionAttnError

from .conftest import imported_modules, made_once
from .test_recipes import ROOT, run_recipe, train_recipe


def test_average_states_is_the_mean_and_keeps_integer_entries_of_the_last():
    first = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.5]), "steps": torch.tensor([3])}
    second = {"w": torch.tensor([3.0, 6.0]), "b": torch.tensor([1.5]), "steps": torch.tensor([7])}
    third = {"w": torch.tensor([2.0, 1.0]), "b": torch.tensor([-2.0]), "steps": torch.tensor([9])}
    mean = average.average_states([first, second, third])
    assert torch.equal(mean["w"], torch.tensor([2.0, 3.0]))
    assert torch.equal(mean["b"], torch.tensor([0.0]))
    assert torch.equal(mean["steps"], torch.tensor([9]))  # a counter, not averaged
    half = {"w": torch.tensor([1.0], dtype=torch.float16)}
    assert average.average_states([half, {"w": torch.tensor([2.0], dtype=torch.float16)}])["w"].dtype == (
        torch.float16
    )


def test_average_states_refuses_other_architectures():
    with pytest.raises(VisionAttnError, match="other parameters than input 1"):
        average.average_states([{"w": torch.zeros(2)}, {"v": torch.zeros(2)}])
    with pytest.raises(VisionAttnError, match=r"parameter w has different shapes \[\(2,\), \(3,\)\]"):
        average.average_states([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}])


def test_select_epochs_names_the_epochs_it_lacks():
    found = {3: "c3", 4: "c4", 5: "c5"}
    assert average.select_epochs(found, 2) == ["c4", "c5"]
    assert average.select_epochs(found, 2, upto=4) == ["c3", "c4"]
    with pytest.raises(VisionAttnError, match=r"epochs \[2\] are not in the directory .*epochs 3-5"):
        average.select_epochs(found, 4)
    with pytest.raises(VisionAttnError, match="would start before epoch 1"):
        average.select_epochs(found, 6)


def run_average(*args, python_flags=()):
    return subprocess.run(
        [sys.executable, *python_flags, "-m", "fairseq_vision_attn.average", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


@pytest.fixture(scope="module")
def kept_epochs(tmp_path_factory, toy_data_bin):
    """A toy lstm_global trained 3 epochs by recipes/train.sh with KEEP_EPOCHS (once per test
    run; only the checkpoint-choice test writes into it, its own choice/ folder)."""

    def train(folder):
        env = {"EPOCHS": "3", "DEVICE": "cpu", "KEEP_EPOCHS": "10"}
        args = ["lstm_global", str(toy_data_bin / "data-bin"), str(folder / "sys"), "--max-tokens", "500"]
        result = run_recipe("train.sh", args, env)
        assert result.returncode == 0, result.stderr[-3000:]

    return made_once(tmp_path_factory, "kept", train) / "sys"


def test_train_keeps_the_epoch_checkpoints_only_when_asked(kept_epochs, toy_data_bin, tmp_path):
    kept = sorted(p.name for p in (kept_epochs / "checkpoints").glob("checkpoint[0-9]*.pt"))
    assert kept == ["checkpoint1.pt", "checkpoint2.pt", "checkpoint3.pt"]
    plain = tmp_path / "plain"
    assert train_recipe(toy_data_bin, plain, 1, "--max-tokens", "500").returncode == 0
    assert not list((plain / "checkpoints").glob("checkpoint[0-9]*.pt"))
    wrong = run_recipe("train.sh", ["lstm_global", str(toy_data_bin / "data-bin"), str(tmp_path / "w")],
                       {"KEEP_EPOCHS": "all"})  # fmt: skip
    assert wrong.returncode == 2 and "KEEP_EPOCHS: 'all' is not a number of epochs" in wrong.stderr


def weights(path):
    return torch.load(path, map_location="cpu", weights_only=False)["model"]


def test_average_of_the_last_epochs_is_their_mean_and_decodes(kept_epochs, toy_data_bin, tmp_path):
    ckpts = kept_epochs / "checkpoints"
    output = tmp_path / "avg.pt"
    result = run_average("--dir", str(ckpts), "--last", "2", "--output", str(output))
    assert result.returncode == 0, result.stderr[-3000:]
    two, three, mean = weights(ckpts / "checkpoint2.pt"), weights(ckpts / "checkpoint3.pt"), weights(output)
    assert mean.keys() == two.keys()
    for key, tensor in mean.items():
        if tensor.is_floating_point():
            assert torch.allclose(tensor, (two[key] + three[key]) / 2, atol=1e-7), key
    assert any(not torch.equal(two[key], three[key]) for key in two)  # the epochs differ
    saved = torch.load(output, map_location="cpu", weights_only=False)
    assert saved["last_optimizer_state"] is None and len(saved["averaged_from"]) == 2
    generate = subprocess.run(
        ["fairseq-generate", str(toy_data_bin / "data-bin"), "--user-dir", "fairseq_vision_attn",
         "--task", "translation_vision_attn", "--path", str(output), "--gen-subset", "test",
         "--beam", "2", "--cpu"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env=dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]),
    )  # fmt: skip
    assert generate.returncode == 0, generate.stderr[-3000:]
    assert generate.stdout.count("\nH-") + generate.stdout.startswith("H-") == 12


def test_upto_best_is_the_epoch_of_checkpoint_best(kept_epochs, tmp_path):
    ckpts = kept_epochs / "checkpoints"
    best = weights(ckpts / "checkpoint_best.pt")
    epoch = next(
        e
        for e in (3, 2, 1)
        if all(torch.equal(best[k], v) for k, v in weights(ckpts / f"checkpoint{e}.pt").items())
    )
    found = average.epoch_checkpoints(str(ckpts))
    assert average.best_epoch(str(ckpts), found) == epoch
    if epoch >= 2:
        output = tmp_path / "best2.pt"
        assert (
            run_average(
                "--dir", str(ckpts), "--last", "2", "--upto", "best", "--output", str(output)
            ).returncode
            == 0
        )
        assert torch.load(output, weights_only=False)["averaged_from"][-1].endswith(f"checkpoint{epoch}.pt")


def test_average_starts_without_fairseq(kept_epochs, tmp_path):
    """`python -m fairseq_vision_attn.average` imports torch but not fairseq (Python's own import
    log, -X importtime) and still reads fairseq's checkpoints under torch's weights-only check;
    its output loads under that check too (test_average_of_the_last_epochs_is_their_mean_and_decodes
    decodes one with fairseq-generate)."""
    output = tmp_path / "avg.pt"
    args = ["--dir", str(kept_epochs / "checkpoints"), "--last", "2", "--output", str(output)]
    result = run_average(*args, python_flags=("-X", "importtime"))
    assert result.returncode == 0, result.stderr[-2000:]
    imported = {name.split(".")[0] for name in imported_modules(result.stderr)}
    assert "torch" in imported and "fairseq" not in imported
    assert torch.load(output, weights_only=True)["averaged_from"][-1].endswith("checkpoint3.pt")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--output", "x.pt"], "give either --inputs CKPT ... or --dir SAVE_DIR --last N"),
        (["--dir", "{ckpts}", "--output", "x.pt"], "--dir needs --last N"),
        (
            ["--dir", "{ckpts}", "--last", "5", "--output", "x.pt"],
            "--last 5 epochs up to epoch 3 would start before epoch 1",
        ),
        (["--dir", "{empty}", "--last", "1", "--output", "x.pt"], "holds no epoch checkpoint"),
        (
            ["--inputs", "{ckpts}/checkpoint1.pt", "--last", "1", "--output", "x.pt"],
            "--last and --upto go with --dir",
        ),
        (
            ["--inputs", "{ckpts}/checkpoint1.pt", "--output", "{ckpts}/checkpoint1.pt"],
            "is one of the inputs",
        ),
        (["--inputs", "{empty}/none.pt", "--output", "x.pt"], "none.pt: no such checkpoint"),
        (["--inputs", "{empty}/cut.pt", "--output", "x.pt"], "is damaged or truncated"),
        (
            ["--dir", "{ckpts}", "--last", "1", "--upto", "first", "--output", "x.pt"],
            "expected a positive integer",
        ),
    ],
)
def test_average_bad_input_is_one_line(kept_epochs, tmp_path, args, message):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "cut.pt").write_bytes(b"PK\x03\x04 not a whole zip")
    names = {"ckpts": kept_epochs / "checkpoints", "empty": empty}
    result = run_average(*[arg.format(**names) for arg in args])
    assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def test_checkpoint_choice_decodes_every_candidate_once(kept_epochs, toy_data_bin):
    out, name = kept_epochs.parent, kept_epochs.name
    env = {"AVERAGES": "2", "SUBSETS": "valid", "BEAM": "2", "DEVICE": "cpu"}
    args = [str(out), name, str(toy_data_bin / "data-bin")]
    result = run_recipe("claims/checkpoint_choice.sh", args, env)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [
        line.split("\t")[0]
        for line in (kept_epochs / "choice" / "table.valid.tsv").read_text().splitlines()[1:]
    ]
    assert rows == ["epoch1", "epoch2", "epoch3", "best", "last", "avg_last2", "avg_best2"] or (
        rows == ["epoch1", "epoch2", "epoch3", "best", "last", "avg_last2"]  # best at epoch 1: no 2 end there
    )
    again = run_recipe("claims/checkpoint_choice.sh", args, env)
    assert again.returncode == 0 and "decoding" not in again.stderr, again.stderr[-2000:]
    wrong = run_recipe("claims/checkpoint_choice.sh", args, {**env, "AVERAGES": "0"})
    assert wrong.returncode == 2 and "AVERAGES: '0' is not a positive number of epochs" in wrong.stderr
