"""The package's own commands (plots, analysis, report, toydata) fail on bad input with one line
`fairseq-vision-attn: error: ...` and exit status 2 (issue 21), and their figures are readable:
axis titles, colorbars, legends without empty entries, integer epochs, bounded sizes for long
sentences (looked at by hand too; see docs/reliability.md)."""

import json
import subprocess
import sys

import matplotlib.image
import pytest

from fairseq_vision_attn import analysis, plots, report, toydata

from .conftest import REPO


def one_error_line(capsys, call):
    with pytest.raises(SystemExit) as exit_:
        call()
    assert exit_.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("fairseq-vision-attn: error: "), err
    return err[0]


def test_missing_and_unwritable_files(tmp_path, capsys):
    missing = tmp_path / "nope.tsv"
    line = one_error_line(
        capsys, lambda: plots.main(["tradeoff", "--points", str(missing), "--out", "x.png"])
    )
    assert str(missing) in line and "No such file" in line
    line = one_error_line(capsys, lambda: plots.main(["curves", "--logs", f"a={missing}", "--out", "x.png"]))
    assert str(missing) in line
    points = tmp_path / "points.tsv"
    points.write_text("inf\t9.1\t30.2\n1.0\t4.5\t29.9\n")
    out = tmp_path / "no_such_dir" / "fig.png"
    line = one_error_line(
        capsys, lambda: plots.main(["tradeoff", "--points", str(points), "--out", str(out)])
    )
    assert "no_such_dir" in line
    gen = tmp_path / "gen.txt"
    line = one_error_line(capsys, lambda: report.main([f"global={gen}"]))
    assert str(gen) in line
    empty = tmp_path / "empty.txt"  # a decoding that wrote nothing (killed before its first batch)
    empty.write_text("")
    line = one_error_line(capsys, lambda: report.main([f"global={empty}"]))
    assert f"{empty} holds no hypothesis (D- lines of fairseq-generate)" in line
    line = one_error_line(
        capsys,
        lambda: analysis.main(["temperature-by-word", "--generate", str(gen), "--stats", "s", "--dict", "d"]),
    )
    assert str(gen) in line
    ckpt = tmp_path / "checkpoint_best.pt"
    for command, extra in [
        ("monotonic-mismatch", []),
        ("memory-slots", []),
        ("attention-agreement", ["--reference", "r"]),
    ]:
        argv = [command, "--path", str(ckpt), "--data", "d", *extra]
        line = one_error_line(capsys, lambda argv=argv: analysis.main(argv))
        assert f"--path {ckpt}: no such checkpoint" in line
    blocker = tmp_path / "file"
    blocker.write_text("")
    line = one_error_line(
        capsys, lambda: toydata.main(["--out-dir", str(blocker / "toy"), "--train-size", "3"])
    )
    assert str(blocker) in line


def test_tsv_header_rows_and_bad_values(tmp_path, capsys):
    points = tmp_path / "points.tsv"
    points.write_text("label\twindow\tBLEU\ninf\t9.1\t30.2\n1.0\t4.5\t29.9\n")
    plots.main(["tradeoff", "--points", str(points), "--out", str(tmp_path / "fig3.png")])  # header skipped
    assert (tmp_path / "fig3.png").stat().st_size > 5_000
    points.write_text("label\twindow\tBLEU\ninf\t9.1\t30.2\n1.0\tfour\t29.9\n")
    line = one_error_line(capsys, lambda: plots.main(["tradeoff", "--points", str(points), "--out", "x.png"]))
    assert f"{points} line 3: expected a number, got 'four'" in line
    table = tmp_path / "latency.tsv"
    table.write_text("system\tBLEU\tDAL\nwaitk_3\t25.1\t3.4\nwaitk_5\t27.0\n")
    line = one_error_line(capsys, lambda: plots.main(["latency", "--points", str(table), "--out", "x.png"]))
    assert f"{table} line 3: 2 columns where the header has 3" in line
    stats = tmp_path / "stats.jsonl"
    stats.write_text(json.dumps({"id": 0, "window_sizes": [1]}) + "\nnot json\n")
    gen = tmp_path / "gen.txt"
    gen.write_text("S-0\ta b\nD-0\t-0.1\tx y\n")
    args = ["span", "--generate", str(gen), "--stats", str(stats), "--ids", "0", "--out-dir", str(tmp_path)]
    line = one_error_line(capsys, lambda: plots.main(args))
    assert f"{stats} line 2: not a --stats-output row" in line
    # text with BPE removed has fewer tokens than the statistics' decoding steps
    stats.write_text(json.dumps({"id": 0, "src_len": 3, "window_sizes": [2, 2, 2, 2]}) + "\n")
    line = one_error_line(capsys, lambda: plots.main(args))
    assert "sentence 0: 4 decoding steps in the statistics, 2 output tokens + EOS in " in line
    assert "plot a decoding without --remove-bpe / --post-process / --tokenizer" in line
    stats.write_text(json.dumps({"id": 0, "src_len": 5, "window_sizes": [2, 2, 2]}) + "\n")
    line = one_error_line(capsys, lambda: plots.main(args))
    assert "sentence 0: a source of 5 positions in the statistics, 2 tokens + EOS" in line
    temperature = ["temperature", *args[1:]]
    stats.write_text(json.dumps({"id": 0, "temperatures": [1.0, 1.0]}) + "\n")
    line = one_error_line(capsys, lambda: plots.main(temperature))
    assert "sentence 0: 2 decoding steps in the statistics, 2 output tokens + EOS" in line


def test_the_module_command_itself(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fairseq_vision_attn.plots", "latency", "--points", str(tmp_path / "t.tsv")]
        + ["--out", "x.png"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("fairseq-vision-attn: error: ")


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions close, kept for inspection."""
    kept = []
    monkeypatch.setattr(plots.plt, "close", lambda fig=None: kept.append(fig))
    return kept


def test_span_plot_of_a_long_sentence_is_cropped_and_labelled(tmp_path, figures):
    n, steps = 500, 12
    focus = [200.0 + 3 * t for t in range(steps)]
    row = {
        "id": 4,
        "src_len": n,
        "window_sizes": [9.0] * steps,
        "window_starts": [f - 4 for f in focus],
        "focus": focus,
    }
    path = tmp_path / "span.png"
    plots.plot_vision_span(row, [f"w{i}" for i in range(n - 1)], [f"y{t}" for t in range(steps - 1)], path)
    height, width = matplotlib.image.imread(path).shape[:2]
    assert width <= 2400 and height <= 2400
    ax = figures[-1].axes[0]
    assert ax.get_xlabel().startswith("source token") and "shown" in ax.get_xlabel()
    assert ax.get_ylabel().startswith("output token")
    low, high = ax.get_xlim()
    assert low <= min(focus) - 5 and high >= max(focus) + 4 - 1 and high - low <= plots.MAX_COLUMNS
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == [
        "focus p_t",
        "positions scored (window)",
    ]


def test_alignment_plot_of_a_long_sentence_has_a_colorbar_and_bounded_size(tmp_path, figures):
    import numpy as np

    weights = np.random.default_rng(0).random((30, 500))
    path = tmp_path / "align.png"
    source, target = [f"x{i}" for i in range(500)], [f"y{i}" for i in range(30)]
    plots.plot_alignment(weights, source, target, path, "t" * 300, delays=list(range(1, 31)))
    height, width = matplotlib.image.imread(path).shape[:2]
    assert width <= 2400 and height <= 2400
    fig = figures[-1]
    ax, colorbar = fig.axes
    assert colorbar.get_ylabel() == "attention weight"
    assert ax.get_xlabel() == "source token (numbered)" and ax.get_ylabel() == "output token"
    assert len(ax.get_xticks()) <= plots.MAX_COLUMNS
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["hard head (last source token read)"]
    assert "\n" in ax.get_title()  # a long title is wrapped to the figure


def test_curves_have_integer_epochs_and_no_empty_entries(tmp_path, figures, capsys):
    with_bleu = tmp_path / "a.log"
    with_bleu.write_text(
        "".join(
            f"x | INFO | valid | epoch {e:03d} | valid on 'valid' subset | loss 2 | bleu {10 * e}\n"
            for e in (1, 2, 3)
        )
    )
    without = tmp_path / "b.log"
    without.write_text("x | INFO | valid | epoch 001 | valid on 'valid' subset | loss 2\n")
    out = tmp_path / "curves.png"
    plots.main(["curves", "--logs", f"memory={with_bleu}", f"noattn={without}", "--out", str(out)])
    assert "no validation BLEU in the log of noattn; left out" in capsys.readouterr().err
    ax = figures[-1].axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["memory"]
    assert all(float(tick).is_integer() for tick in ax.get_xticks())
