"""Toy data generator, statistics and the report table."""

import json
import math
import os
import random
import statistics
import sys

import pytest

from fairseq_vision_attn import report, toydata
from fairseq_vision_attn.stats import CorpusStats, SearchStats

from .conftest import REPO, imported_modules, run_cli


def test_transforms():
    tokens = ["a", "b", "c", "d", "e"]
    assert toydata.transform(tokens, "copy") == tokens
    assert toydata.transform(tokens, "reverse") == ["e", "d", "c", "b", "a"]
    assert toydata.transform(tokens, "reorder", block_size=2) == ["b", "a", "d", "c", "e"]
    with pytest.raises(ValueError, match="valid choices: copy, reverse, reorder"):
        toydata.transform(tokens, "shuffle")


def test_toydata_writes_parallel_splits(tmp_path):
    toydata.main(
        [
            "--task",
            "reverse",
            "--out-dir",
            str(tmp_path),
            "--train-size",
            "50",
            "--valid-size",
            "5",
            "--test-size",
            "7",
            "--vocab-size",
            "4",
            "--min-len",
            "2",
            "--max-len",
            "6",
        ]
    )
    src = (tmp_path / "train.src").read_text().splitlines()
    tgt = (tmp_path / "train.tgt").read_text().splitlines()
    assert len(src) == len(tgt) == 50
    assert len((tmp_path / "test.src").read_text().splitlines()) == 7
    for s, t in zip(src, tgt):
        assert t.split() == s.split()[::-1]
        assert 2 <= len(s.split()) <= 6
        assert set(s.split()) <= {"t0", "t1", "t2", "t3"}


def test_toydata_rejects_inverted_lengths(tmp_path, capsys):
    with pytest.raises(SystemExit):
        toydata.main(["--out-dir", str(tmp_path), "--min-len", "5", "--max-len", "2"])
    assert "--min-len (5) must not exceed --max-len (2)" in capsys.readouterr().err


def test_corpus_and_search_stats():
    corpus = CorpusStats()
    corpus.add({"id": 0, "src_len": 4, "hypo_len": 2, "window_sizes": [4.0, 2.0]})
    corpus.add({"id": 1, "src_len": 6, "hypo_len": 1, "window_sizes": [6.0]})
    summary = corpus.summary()
    assert summary["src_len"] == 5 and summary["hypo_len"] == 1.5
    assert summary["mean window_sizes"] == 4.0  # over tokens: (4 + 2 + 6) / 3

    import torch

    search = SearchStats()
    search.observe({"window_size": torch.tensor([3.0, 5.0]), "p": torch.ones(2, 4)})
    search.observe({"window_size": torch.tensor([1.0])})
    assert search.means() == {"window_size": 3.0}


def test_report_scores_generate_output(tmp_path):
    gen = tmp_path / "gen.txt"
    gen.write_text(
        "S-1\tb a\nT-1\ta b c\nH-1\t-0.1\ta b c\nD-1\t-0.1\ta b c\n"
        "S-0\tx\nT-0\tx y z w\nH-0\t-0.2\tx y z w\nD-0\t-0.2\tx y z w\n"
    )
    stats = tmp_path / "stats.jsonl"
    stats.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"id": 0, "src_len": 2, "window_sizes": [1, 2]},
                {"id": 1, "src_len": 4, "window_sizes": [3]},
            ]
        )
    )
    assert report.score(str(gen)) == pytest.approx(100.0)
    assert report.average_stats(str(stats)) == {"src_len": 3.0, "window_sizes": 2.0}
    table = report.format_table([("sys", 100.0, {"src_len": 3.0})], ["src_len", "AL"])
    assert table.splitlines()[1] == "sys\t100.00\t3.00\t-"


def test_report_common_sentences_and_paired_bootstrap(tmp_path, capsys):
    """--common scores every system on the ids all of them decoded: a decoding cut after 20 of
    30 sentences makes the others' BLEU and statistics those of sentences 0-19 (AL = id: mean
    9.5, not 14.5). --paired-bs: one word changed in one of 20 sentences is no significant
    difference; a system sharing no word with the references differs at the smallest p-value
    1,000 resamples allow, 1/1001."""
    words = "the a cat dog sat on mat red blue green house tree".split()
    refs = [" ".join(words[(i * 7 + j * 5) % len(words)] for j in range(6)) for i in range(30)]

    def write(name, count, hypothesis):
        path = tmp_path / f"{name}.txt"
        lines = (f"S-{i}\tq\nT-{i}\t{refs[i]}\nD-{i}\t-0.1\t{hypothesis(i)}\n" for i in range(count))
        path.write_text("".join(lines))
        return path

    full = write("full", 30, lambda i: refs[i])
    stats = tmp_path / "full.jsonl"
    stats.write_text("\n".join(json.dumps({"id": i, "AL": float(i)}) for i in range(30)))
    cut = write("cut", 20, lambda i: refs[i] if i != 3 else refs[i].replace(refs[i].split()[2], "zebra", 1))
    garbage = write("garbage", 30, lambda i: "xx yy zz")

    report.main([f"full={full}:{stats}", f"cut={cut}"])
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["system", "BLEU", "AL"] and rows[1][2] == "14.50"
    report.main(["--common", f"full={full}:{stats}", f"cut={cut}"])
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["system", "BLEU", "sentences", "AL"]
    assert rows[1] == ["full", "100.00", "20", "9.50"]
    assert rows[2][:3] == ["cut", f"{report.score(str(cut)):.2f}", "20"]

    report.main(["--paired-bs", f"full={full}", f"cut={cut}", f"garbage={garbage}"])
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["system", "BLEU", "sentences", "p"] and rows[1][3] == "-"
    assert float(rows[2][3]) > 0.05 and float(rows[2][1]) < 100
    assert rows[3][1:] == ["0.00", "20", f"{1 / 1001:.3f}"]

    no_overlap = write("none", 0, lambda i: "")
    with pytest.raises(SystemExit) as exit_:
        report.main(["--common", f"full={full}", f"none={no_overlap}"])
    assert exit_.value.code == 2 and "no sentence id is decoded by every system" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        report.main(["--paired-bs", f"full={full}"])
    assert exit_.value.code == 2 and "at least two" in capsys.readouterr().err


def test_plots_write_pngs(tmp_path):
    from fairseq_vision_attn import plots

    gen = tmp_path / "gen.txt"
    gen.write_text("S-0\ta b c\nT-0\tz y x\nH-0\t-0.1\tz y x\nD-0\t-0.1\tz y x\n")
    stats = tmp_path / "stats.jsonl"
    stats.write_text(
        json.dumps(
            {
                "id": 0,
                "src_len": 4,
                "hypo_len": 4,
                "window_sizes": [4, 2, 1, 3],
                "window_starts": [1, 2, 2, 1],
                "focus": [3.0, 2.2, 1.4, 1.1],
            }
        )
    )
    assert plots.read_sentences(str(gen)) == {0: (["a", "b", "c"], ["z", "y", "x"])}
    plots.main(
        [
            "span",
            "--generate",
            str(gen),
            "--stats",
            str(stats),
            "--ids",
            "0",
            "--out-dir",
            str(tmp_path / "spans"),
        ]
    )
    points = tmp_path / "points.tsv"
    points.write_text("0.5\t3.1\t20.0\n1.0\t4.2\t21.5\ninf\t9.9\t21.7\n")
    plots.main(["tradeoff", "--points", str(points), "--out", str(tmp_path / "fig3.png")])
    for path in (tmp_path / "spans" / "span_0.png", tmp_path / "fig3.png"):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit):
        plots.main(
            ["span", "--generate", str(gen), "--stats", str(stats), "--ids", "7", "--out-dir", str(tmp_path)]
        )


def test_temperature_plots_and_function_word_analysis(tmp_path, capsys):
    from fairseq_vision_attn import analysis, plots

    gen = tmp_path / "gen.txt"
    gen.write_text("S-0\ta b c\nT-0\tz y x\nD-0\t-0.1\tthe cat .\nS-1\ta\nT-1\tz\nD-1\t-0.2\ta dog\n")
    stats = tmp_path / "stats.jsonl"
    rows = [{"id": 0, "temperatures": [2.0, 0.5, 3.0, 1.0]}, {"id": 1, "temperatures": [2.5, 0.4, 1.2]}]
    stats.write_text("\n".join(json.dumps(r) for r in rows))
    plots.main(
        ["temperature", "--generate", str(gen), "--stats", str(stats), "--ids", "0", "1"]
        + ["--out-dir", str(tmp_path / "temps")]
    )
    table = tmp_path / "table.tsv"
    table.write_text("system\tBLEU\nlstm_global\t4.7\nlstm_sact\t5.1\nlstm_global_T0.8\t4.2\n")
    plots.main(["fixed-temperature", "--table", str(table), "--out", str(tmp_path / "fig1.png")])
    for path in (
        tmp_path / "temps" / "temperature_0.png",
        tmp_path / "temps" / "temperature_1.png",
        tmp_path / "fig1.png",
    ):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    vocab = tmp_path / "dict.txt"
    vocab.write_text("the 100\n. 90\na 80\ncat 5\ndog 4\n")
    analysis.main(
        ["temperature-by-word", "--generate", str(gen), "--stats", str(stats), "--dict", str(vocab)]
        + ["--function-words", "3", "--min-count", "1"]
    )
    out = capsys.readouterr().out.splitlines()
    function = next(line for line in out if line.startswith("function\t")).split("\t")
    content = next(line for line in out if line.startswith("content\t")).split("\t")
    assert function[1] == "3" and abs(float(function[2]) - 2.5) < 1e-9
    assert content[1] == "2" and abs(float(content[2]) - 0.45) < 1e-9

    no_temps = tmp_path / "plain.jsonl"
    no_temps.write_text(json.dumps({"id": 0, "window_sizes": [1, 1, 1, 1]}))
    with pytest.raises(SystemExit):
        plots.main(
            [
                "temperature",
                "--generate",
                str(gen),
                "--stats",
                str(no_temps),
                "--ids",
                "0",
                "--out-dir",
                str(tmp_path),
            ]
        )


def test_window_bound_hand_values(tmp_path, capsys):
    """analysis window-bound recomputes flexible attention's windows from g(t) and the focus
    path (sec. 3.1: s in (p - sigma sqrt(2 tau / g), p + sigma sqrt(2 tau / g))), worked by hand."""
    from fairseq_vision_attn import analysis

    # sigma 1.5, tau 1. Step 1: no previous focus, all 10. Step 2: g 1, p 3.0, half 2.121:
    # (0.88, 5.12) -> 1..5 = 5. Step 3: g 0.5, p 5.5, half 3: (2.5, 8.5) -> 3..8 = 6; at g = 1
    # (3.38, 7.62) -> 4..7 = 4. Step 4: g 1, p 9.8, half 2.121: (7.68, 11.9) -> 8..10 = 3.
    row = {"id": 0, "src_len": 10, "g": [0.0, 1.0, 0.5, 1.0], "focus": [3.0, 5.5, 9.8, 9.0]}
    import torch

    from fairseq_vision_attn.attention.flexible import threshold_window

    def width(g, p, tau=1.0):
        return int(threshold_window(torch.tensor(g), torch.tensor(p), torch.tensor(10), 1.5, tau)[1])

    assert [width(g, p) for g, p in [(1.0, 3.0), (0.5, 5.5), (1.0, 9.8)]] == [5, 6, 3]
    assert width(1.0, 5.5, tau=0.001) == 1  # no integer inside: the nearest alone
    assert width(0.0, 5.5) == 10  # no penalty: everything
    full, rows = analysis.window_bound({0: row}, 1.5, [1.0])
    assert full == 10 and rows == [(1.0, (10 + 5 + 6 + 3) / 4, (10 + 5 + 4 + 3) / 4)]

    stats = tmp_path / "stats.jsonl"
    stats.write_text(json.dumps(row) + "\n")
    analysis.main(["window-bound", "--stats", str(stats), "--taus", "1"])
    line = capsys.readouterr().out.splitlines()[-1].split("\t")
    assert line == ["1", "6.000", "40.0%", "5.500", "45.0%"]
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"id": 0, "src_len": 3, "window_sizes": [3, 3]}) + "\n")
    with pytest.raises(SystemExit):
        analysis.main(["window-bound", "--stats", str(plain)])


def _generate_file(path, rows):
    """fairseq-generate's S-/T-/H-/D- lines for (id, source, reference, hypothesis) rows."""
    lines = []
    for i, src, ref, hyp in rows:
        lines += [f"S-{i}\t{src}", f"T-{i}\t{ref}", f"H-{i}\t-0.5\t{hyp}", f"D-{i}\t-0.5\t{hyp}"]
    path.write_text("\n".join(lines) + "\n")


#: the two longest sentences (source length 7) of the bleu-by-length tests: (id, source, reference, output)
LONG_ROWS = [
    (3, "a b c d e f g", "a b c d e f g", "a b c d x f g"),
    (4, "g f e d c b a", "g f e d c b a", "g f e"),
]


def test_bleu_by_length_scores_each_bucket_apart(tmp_path, capsys):
    """analysis bleu-by-length: each bucket's BLEU is sacrebleu's corpus BLEU of exactly the
    sentences whose source length falls in it (chosen here by hand), an empty bucket is '-', and
    outputs of different subsets or non-increasing edges are refused with one line."""
    import sacrebleu

    from fairseq_vision_attn import analysis

    rows = [
        (0, "a b", "a b", "a b"),  # length 2
        (1, "c d e", "c d e", "c e d"),  # 3
        (2, "a b c d e", "a b c d e", "a b c d e"),  # 5
        *LONG_ROWS,
    ]
    gen = tmp_path / "gen.txt"
    _generate_file(gen, rows)

    def oracle(ids):
        return sacrebleu.corpus_bleu([rows[i][3] for i in ids], [[rows[i][2] for i in ids]]).score

    buckets = analysis.bleu_by_length(str(gen), [3, 4, 5])
    assert [n for n, _ in buckets] == [2, 0, 1, 2]
    assert buckets[1][1] is None
    for (_, bleu), ids in zip([buckets[0], buckets[2], buckets[3]], [[0, 1], [2], [3, 4]]):
        assert bleu == pytest.approx(oracle(ids))
    assert buckets[2][1] == pytest.approx(100.0)

    perfect = tmp_path / "perfect.txt"
    _generate_file(perfect, [(i, src, ref, ref) for i, src, ref, _ in rows])
    analysis.main(["bleu-by-length", "--generate", f"mem={gen}", f"copy={perfect}", "--edges", "3", "4", "5"])
    out = capsys.readouterr().out.splitlines()
    assert out[1].split("\t") == ["source length", "sentences", "mem", "copy"]
    assert out[3].split("\t") == ["4-4", "0", "-", "-"]
    assert out[5].split("\t") == ["6+", "2", f"{oracle([3, 4]):.2f}", "100.00"]

    other = tmp_path / "other.txt"
    _generate_file(other, rows[:3])
    for argv, message in [
        (["--generate", str(gen), str(other)], "decode the same subset"),
        (["--generate", str(gen), "--edges", "40", "20"], "--edges 40 20: give increasing positive lengths"),
        (["--generate", str(tmp_path / "none.txt")], "none.txt"),
    ]:
        with pytest.raises(SystemExit):
            analysis.main(["bleu-by-length", *argv])
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_bleu_by_length_adds_each_buckets_mean_latency(tmp_path, capsys):
    """An output given with its --stats-output (NAME=GEN:STATS) adds its mean DAL per bucket (or
    the --latency asked for): the mean over exactly the bucket's sentences, by hand here; stats
    that miss a decoded sentence, and --latency without stats, are refused with one line."""
    from fairseq_vision_attn import analysis

    rows = [(0, "a b", "a b", "a b"), (1, "c d e f", "c d e f", "c d e f"), (2, "a b c d e", "a", "a")]
    gen = tmp_path / "gen.txt"
    _generate_file(gen, rows)
    stats = tmp_path / "stats.jsonl"
    dal, laal = [1.0, 3.0, 8.0], [0.5, 2.0, 6.0]
    stats.write_text(
        "".join(json.dumps({"id": i, "DAL": d, "LAAL": a}) + "\n" for i, d, a in zip(range(3), dal, laal))
    )
    edges = ["--edges", "4", "9"]  # buckets 1-4 (sentences 0, 1), 5-9 (2), 10+ (none)
    analysis.main(["bleu-by-length", "--generate", f"m={gen}:{stats}", f"plain={gen}", *edges])
    out = [line.split("\t") for line in capsys.readouterr().out.splitlines()[1:]]
    assert out[0] == ["source length", "sentences", "m", "plain", "m DAL"]
    assert [row[-1] for row in out[1:]] == ["2.00", "8.00", "-"]  # (1 + 3) / 2, 8
    analysis.main(["bleu-by-length", "--generate", f"{gen}:{stats}", "--latency", "LAAL", *edges])
    out = [line.split("\t") for line in capsys.readouterr().out.splitlines()[1:]]
    assert out[0][-1] == f"{gen} LAAL" and [row[-1] for row in out[1:]] == ["1.25", "6.00", "-"]

    stats.write_text(json.dumps({"id": 0, "DAL": 1.0}) + "\n")
    for argv, message in [
        ([f"m={gen}:{stats}"], "no row for sentence ids [1, 2]"),
        ([f"m={gen}", "--latency", "LAAL"], "--latency LAAL averages a --stats-output"),
    ]:
        with pytest.raises(SystemExit):
            analysis.main(["bleu-by-length", "--generate", *argv, *edges])
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_bleu_by_length_draws_the_curve_in_each_bucket_apart(tmp_path, capsys):
    """--curve: in each bucket, a system's BLEU minus the line through the baselines' (mean DAL,
    BLEU) of that bucket at its own mean DAL there (interpolated by hand here), '-' outside the
    baselines' range; a baseline without stats, an unknown name or a single name is refused."""
    import sacrebleu

    from fairseq_vision_attn import analysis

    rows = [
        (0, "a b", "a b c d", "a b c x"),  # length 2
        (1, "c d e", "c d e f g", "c d e f g"),  # 3
        (2, "a b c d e", "a b c d e", "a b c d x"),  # 5
        *LONG_ROWS,
    ]
    low, high = tmp_path / "low.txt", tmp_path / "high.txt"
    _generate_file(low, rows)  # the model under test decodes the same words as the low baseline
    _generate_file(high, [(i, src, ref, ref) for i, src, ref, _ in rows])

    def stats(name, dal):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"id": i, "DAL": d}) + "\n" for i, d in enumerate(dal)))
        return path

    def oracle(ids, column=3):  # column 2: the reference, the high baseline's output
        return sacrebleu.corpus_bleu([rows[i][column] for i in ids], [[rows[i][2] for i in ids]]).score

    generate = [
        f"lo={low}:{stats('lo', [1, 1, 2, 1, 1])}",
        f"hi={high}:{stats('hi', [3, 3, 6, 5, 5])}",
        f"m={low}:{stats('m', [2, 2, 5, 9, 9])}",
    ]
    edges = ["--edges", "3", "5"]  # buckets 1-3 (sentences 0, 1), 4-5 (2), 6+ (3, 4)
    analysis.main(["bleu-by-length", "--generate", *generate, *edges, "--curve", "lo,hi"])
    out = [line.split("\t") for line in capsys.readouterr().out.splitlines()[1:]]
    assert out[0][-1] == "m to_curve_DAL" and len(out[0]) == 9
    (short, short_high), (middle, middle_high) = [(oracle(ids), oracle(ids, 2)) for ids in ([0, 1], [2])]
    assert float(out[1][-1]) == pytest.approx(short - (short + short_high) / 2, abs=0.006)  # DAL 2 of 1..3
    assert float(out[2][-1]) == pytest.approx(-0.75 * (middle_high - middle), abs=0.006)  # 5 of 2..6
    assert out[3][-1] == "-"  # DAL 9, past the high baseline's 5

    for argv, message in [
        ([*generate[:2], f"m={low}", "--curve", "lo,m"], "--curve: m has no latency"),
        ([*generate, "--curve", "lo,wait"], "--curve: no system named wait"),
        ([*generate, "--curve", "lo"], "a curve needs at least two baseline systems"),
    ]:
        with pytest.raises(SystemExit):
            analysis.main(["bleu-by-length", "--generate", *argv, *edges])
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_latency_plot_reads_the_report_table(tmp_path):
    """plots latency takes report.py's table: family from the name prefix, offline as a line."""
    from fairseq_vision_attn import plots

    table = tmp_path / "latency_table.tsv"
    table.write_text(
        "system\tBLEU\tsrc_len\tAL\tAP\tDAL\tLAAL\n"
        "offline_global\t30.1\t12.0\t-\t-\t-\t-\n"
        "waitk_1\t20.0\t12.0\t1.2\t0.55\t1.9\t1.3\n"
        "waitk_3\t25.0\t12.0\t3.1\t0.62\t3.5\t3.2\n"
        "milk_0.1\t28.0\t12.0\t4.0\t0.70\t4.6\t4.1\n"
    )
    points = plots.read_latency_points(table)
    assert [(name, family) for name, family, _, _ in points] == [
        ("offline_global", "offline"),
        ("waitk_1", "waitk"),
        ("waitk_3", "waitk"),
        ("milk_0.1", "milk"),
    ]
    assert points[2][3] == {"DAL": 3.5, "LAAL": 3.2, "AL": 3.1, "AP": 0.62}
    assert list(plots.read_latency_points(table, ["LAAL"])[2][3]) == ["LAAL"]
    out = tmp_path / "latency.png"
    plots.main(["latency", "--points", str(table), "--out", str(out)])
    assert out.stat().st_size > 10_000
    one = tmp_path / "laal.png"
    plots.main(["latency", "--points", str(table), "--out", str(one), "--metrics", "LAAL"])
    assert 0 < one.stat().st_size < out.stat().st_size  # one panel where the default drew four
    with pytest.raises(SystemExit, match="no column ATD"):
        plots.read_latency_points(table, ["DAL", "ATD"])
    bad = tmp_path / "bad.tsv"
    bad.write_text("system\tBLEU\twindow_sizes\nglobal\t30\t9\n")
    with pytest.raises(SystemExit, match="no column DAL"):
        plots.read_latency_points(bad)


def test_latency_plot_labels_overlap_no_other_label_and_no_point():
    """The De-En line's crowded points (wait-3 beside MILk at DAL 2-4, wait-5 beside lambda 0.1
    at DAL 5-6), drawn as plot_latency draws them (each family's curve, an offline reference):
    each label's text overlaps no other label, no point's marker and no line, where labels all
    at the same corner of their points overlap."""
    import matplotlib.pyplot as plt
    from matplotlib.path import Path
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    from fairseq_vision_attn import plots

    points = [
        (2.21, 34.37, "milk_1_g1warm"),
        (3.04, 34.91, "milk_1_noise16"),
        (3.21, 34.52, "waitk3 (2 seeds)"),
        (4.12, 34.48, "milk_0.3 (2 seeds)"),
        (4.12, 35.41, "milk_0.3_g1warm"),
        (5.18, 34.98, "waitk5 (3 seeds)"),
        (5.84, 35.10, "milk_0.1"),
        (5.87, 35.02, "milk_0.1_g1warm"),
    ]
    fig, ax = plt.subplots(figsize=(5.0, 4.2))
    for family in ("waitk", "milk"):
        members = sorted(p for p in points if p[2].startswith(family))
        ax.plot([p[0] for p in members], [p[1] for p in members], "o-", ms=4)
    ax.axhline(36.2, color="grey", ls="--", lw=1)  # an offline reference
    ax.set_xlim(0.5, 8)
    ax.set_ylim(28, 38)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    lines = [Path(line.get_transform().transform(line.get_xydata())) for line in ax.get_lines()]

    def text_boxes(labels):
        fig.canvas.draw()
        return [Text.get_window_extent(label, renderer) for label in labels]

    def overlapping(boxes):
        return [(i, j) for i in range(len(boxes)) for j in range(i) if boxes[i].overlaps(boxes[j])]

    corner = [
        ax.annotate(n, (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points") for x, y, n in points
    ]
    assert overlapping(text_boxes(corner))  # the case is real
    assert any(line.intersects_bbox(box, filled=False) for line in lines for box in text_boxes(corner))
    for label in corner:
        label.remove()
    placed = plots.place_labels(ax, points)
    boxes = text_boxes(placed)
    assert [label.get_text() for label in placed] == [n for _, _, n in points]
    assert overlapping(boxes) == []
    for x, y, _ in points:
        px, py = ax.transData.transform((x, y))
        marker = Bbox.from_extents(px - 3, py - 3, px + 3, py + 3)
        assert not any(box.overlaps(marker) for box in boxes), (x, y)
    crossed = [
        label.get_text()
        for label, box in zip(placed, boxes)
        if any(line.intersects_bbox(box, filled=False) for line in lines)
    ]
    assert crossed == []
    plt.close(fig)


def test_latency_plot_seed_means_and_queue_names(tmp_path, capsys):
    """Queue rows NAME_sN: the family drops the number the name's first part ends in (waitk1_s1,
    waitk3_s2: waitk), and --seed-means draws a system's seeds as one point at their means
    (BLEU 30 and 34 at DAL 5.0 and 5.4: 32 at 5.2); a row without a seed passes unchanged."""
    from fairseq_vision_attn import plots

    assert [
        plots.default_family(n)
        for n in ("waitk3_s1", "waitk_3", "milk_0.3_s2", "k9", "42_s1", "wait-3", "milk0.1")
    ] == [
        "waitk",
        "waitk",
        "milk",
        "k",
        "42",
        "wait",
        "milk",
    ]
    table = tmp_path / "seeds.tsv"
    table.write_text(
        "system\tBLEU\tDAL\tfamily\n"
        "waitk1_s1\t20.0\t1.0\twait-k\nwaitk5_s1\t30.0\t5.0\twait-k\nwaitk5_s2\t34.0\t5.4\twait-k\n"
        "milk_0.3_s1\t33.0\t4.0\tMILk\n"
    )
    means = plots.seed_means(plots.read_latency_points(table))
    assert means == [
        ("waitk1", "wait-k", 20.0, {"DAL": 1.0}),
        ("waitk5 (2 seeds)", "wait-k", 32.0, {"DAL": pytest.approx(5.2)}),
        ("milk_0.3", "MILk", 33.0, {"DAL": 4.0}),
    ]
    out = tmp_path / "means.png"
    plots.main(["latency", "--points", str(table), "--seed-means", "--out", str(out)])
    assert out.stat().st_size > 10_000
    from fairseq_vision_attn import seeds  # the family column is a label, not a number to average

    assert seeds.read_table(table)[0] == ("waitk1_s1", {"BLEU": 20.0, "DAL": 1.0})
    mixed = tmp_path / "mixed.tsv"
    mixed.write_text("system\tBLEU\tDAL\tfamily\nm_s1\t1\t1\ta\nm_s2\t2\t2\tb\n")
    with pytest.raises(SystemExit) as exit_:
        plots.main(["latency", "--points", str(mixed), "--seed-means", "--out", str(out)])
    assert exit_.value.code == 2 and "the seeds of m are in families a, b" in capsys.readouterr().err


def test_latency_plot_families_never_share_a_colour_and_marker(tmp_path, monkeypatch):
    """matplotlib's colour cycle has ten colours: the eleventh family (docs/results/deen_line has
    thirteen) gets the first colour again, with the next marker, so no two curves look alike; the
    plot of twelve families draws twelve lines in twelve styles."""
    from fairseq_vision_attn import plots

    names = [f"family {i:02d}" for i in range(25)]
    styles = plots.family_styles(names)
    assert len(set(styles.values())) == 25
    (first_colour, first_marker), (colour, marker) = styles["family 00"], styles["family 10"]
    assert colour == first_colour and marker != first_marker
    rows = "".join(f"s{i}\t{i}\t{i}\t{names[i]}\n" for i in range(12))
    table = tmp_path / "points.tsv"
    table.write_text("system\tBLEU\tDAL\tfamily\n" + rows)
    drawn = []
    original = plots.plt.Axes.plot

    def recording_plot(ax, *args, **kwargs):
        drawn.append((kwargs["label"], kwargs["color"], kwargs["marker"]))
        return original(ax, *args, **kwargs)

    monkeypatch.setattr(plots.plt.Axes, "plot", recording_plot)
    plots.main(["latency", "--points", str(table), "--out", str(tmp_path / "line.png")])
    assert sorted(label for label, _, _ in drawn) == names[:12]
    assert len({(colour, marker) for _, colour, marker in drawn}) == 12


@pytest.mark.parametrize("subset", ["valid", "test", "test1"])
def test_latency_plot_of_the_committed_line_puts_no_label_on_another(subset, tmp_path, monkeypatch):
    """The De-En latency plot the results page draws (docs/results/deen_line.SUBSET.tsv,
    --seed-means: 28 points of 13 families on 2026-12-07, crowded between DAL 3 and 7): no
    label's text overlaps another's in its panel (the nearer offsets and unweighted clashes left
    2-5 such pairs on each). A row added that crowds it past what place_labels can clear fails
    here."""
    from matplotlib.text import Text

    from fairseq_vision_attn import plots

    overlaps, counts = [], []
    place = plots.place_labels

    def checked(ax, labelled, fontsize=6):
        placed = place(ax, labelled, fontsize)
        ax.figure.canvas.draw()  # where the labels stand once drawn
        renderer = ax.figure.canvas.get_renderer()
        boxes = [Text.get_window_extent(label, renderer) for label in placed]
        overlaps.extend(
            (placed[i].get_text(), placed[j].get_text())
            for i in range(len(boxes))
            for j in range(i)
            if boxes[i].overlaps(boxes[j])
        )
        counts.append(len(placed))  # per panel: the check ran on every label
        return placed

    monkeypatch.setattr(plots, "place_labels", checked)
    points = plots.read_latency_points(os.path.join(REPO, "docs", "results", f"deen_line.{subset}.tsv"))
    means = plots.seed_means(points)
    plots.plot_latency(means, str(tmp_path / "line.png"))
    assert counts == [len(means)] and len(means) >= 20
    assert overlaps == []


def test_latency_plot_legend_covers_no_axes(tmp_path, monkeypatch):
    """The legend (one entry per family, thirteen in docs/results/deen_line) stands right of the last
    panel: its box overlaps no panel's axes, where place_labels keeps each label clear of points
    and lines and a legend inside a panel would cover them."""
    from fairseq_vision_attn import plots

    rows = "".join(f"s{i}\t{30 + i}\t{1 + i / 2}\t{2 + i / 2}\tfamily {i:02d}\n" for i in range(11))
    table = tmp_path / "points.tsv"
    table.write_text("system\tBLEU\tDAL\tLAAL\tfamily\n" + rows)
    closed = []
    monkeypatch.setattr(plots.plt, "close", closed.append)  # keep the figure to measure it
    out = str(tmp_path / "line.png")
    plots.main(["latency", "--points", str(table), "--metrics", "DAL", "LAAL", "--out", out])
    (fig,) = closed
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 1 and len(legends[0].get_texts()) == 11
    box = legends[0].get_window_extent(renderer)
    assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in fig.axes)
    assert box.x0 > max(ax.get_window_extent(renderer).x1 for ax in fig.axes)  # right of them
    assert box.x1 <= fig.bbox.x1  # and inside the saved image


def test_report_ribes_by_hand(tmp_path, capsys, monkeypatch):
    """RIBES = NKT * P^0.25 * BP^0.10 (Isozaki et al. 2010): an identical sentence scores 1; one
    swapped pair of 4 words has Kendall's tau (5 - 1) / 6, NKT = (tau + 1) / 2 = 5/6, P = BP = 1;
    a reversed sentence scores 0. Table value: the mean, x 100."""
    pytest.importorskip("nltk", reason="nltk is not installed (pip install -e .[test])")
    gen = tmp_path / "gen.txt"
    gen.write_text(
        "S-0\tq\nT-0\ta b c d\nD-0\t-0.1\ta b c d\n"
        "S-1\tq\nT-1\ta b c d\nD-1\t-0.1\ta b d c\n"
        "S-2\tq\nT-2\ta b c d\nD-2\t-0.1\td c b a\n"
    )
    assert report.ribes(str(gen)) == pytest.approx(100 * (1 + 5 / 6 + 0) / 3)
    report.main(["--ribes", f"sys={gen}"])
    header, row = capsys.readouterr().out.splitlines()
    assert header.split("\t") == ["system", "BLEU", "RIBES"] and row.split("\t")[2] == "61.11"
    monkeypatch.setitem(sys.modules, "nltk.translate.ribes_score", None)  # as if nltk were missing
    with pytest.raises(SystemExit) as exit_:
        report.main(["--ribes", f"sys={gen}"])
    assert exit_.value.code == 2 and "--ribes needs nltk" in capsys.readouterr().err


def test_seeds_mean_and_sample_sd_by_hand(tmp_path, capsys):
    """Rows BASE_sN from several tables are one system's seeds: 30, 32, 34 have mean 32 and sample
    standard deviation sqrt(((-2)^2 + 0 + 2^2) / (3 - 1)) = 2; one seed has no deviation; a name
    without _sN stands alone; a column one seed lacks is not averaged."""
    from fairseq_vision_attn import seeds

    first = tmp_path / "a.tsv"
    first.write_text(
        "system\tBLEU\tRIBES\nglobal_s1\t30.00\t80.00\nsact_s1\t31.00\t-\nfairseq_lstm\t29.5\t79\n"
    )
    second = tmp_path / "b.tsv"
    second.write_text(
        "system\tBLEU\tRIBES\nglobal_s2\t32.00\t81.00\nglobal_s13\t34.00\t85.00\nsact_s2\t33\t82\n"
    )
    seeds.main([str(first), str(second)])
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["system", "seeds", "BLEU", "BLEU_sd", "RIBES", "RIBES_sd"]
    assert rows[1] == ["global", "1,2,13", "32.00", "2.00", "82.00", "2.65"]  # RIBES: 80, 81, 85
    assert rows[2] == ["sact", "1,2", "32.00", "1.41", "-", "-"]
    assert rows[3] == ["fairseq_lstm", "-", "29.50", "-", "79.00", "-"]
    with pytest.raises(SystemExit) as exit_:
        seeds.main([str(first), str(first)])
    assert exit_.value.code == 2 and "global_s1 appears twice" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        seeds.main([str(first), "--columns", "DAL"])
    assert exit_.value.code == 2 and "none of the columns DAL" in capsys.readouterr().err


def test_student_t_p_against_printed_tables_and_closed_forms():
    """Two-sided p of Student's t against Fisher and Yates' printed critical values (p = 0.05 at
    t = 12.706 / 4.303 / 2.571 / 2.228 / 2.042 for 1 / 2 / 5 / 10 / 30 degrees of freedom, p = 0.01
    at 63.657 / 9.925 / 4.032 / 3.169 for 1 / 2 / 5 / 10), and against the closed forms of one
    degree of freedom (Cauchy: 1 - 2 atan|t| / pi) and two (1 - |t| / sqrt(2 + t^2)), whose
    inverses are the quantiles (tan(pi (1 - p) / 2); sqrt(2 q^2 / (1 - q^2)) with q = 1 - p)."""
    from fairseq_vision_attn.seeds import student_t_quantile, student_t_two_sided

    printed = [(12.706, 1, 0.05), (4.303, 2, 0.05), (2.571, 5, 0.05), (2.228, 10, 0.05), (2.042, 30, 0.05)]
    printed += [(63.657, 1, 0.01), (9.925, 2, 0.01), (4.032, 5, 0.01), (3.169, 10, 0.01)]
    for t, df, p in printed:
        assert student_t_two_sided(t, df) == pytest.approx(p, abs=5e-5)  # t printed to 3 decimals
        assert student_t_two_sided(-t, df) == student_t_two_sided(t, df)
    for t in (0.0, 0.1, 0.7, 1.0, 3.3, 25.0):
        assert student_t_two_sided(t, 1) == pytest.approx(1 - 2 * math.atan(t) / math.pi, abs=1e-12)
        assert student_t_two_sided(t, 2) == pytest.approx(1 - t / math.sqrt(2 + t * t), abs=1e-12)
    for p in (0.5, 0.05, 0.01):  # the quantiles invert the closed forms
        assert student_t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (1 - p) / 2), rel=1e-9)
        assert student_t_quantile(p, 2) == pytest.approx(
            math.sqrt(2 * (1 - p) ** 2 / (1 - (1 - p) ** 2)), rel=1e-9
        )


def test_welch_matches_scipy_on_unequal_sizes_and_spreads():
    """Welch's t, its Welch-Satterthwaite degrees of freedom (real, not whole), p and the 95%
    interval of the difference, against scipy.stats.ttest_ind(equal_var=False) on random samples
    of 2-8 values; the 95% interval of one sample's mean against scipy.stats.t.interval."""
    stats = pytest.importorskip("scipy.stats")
    from fairseq_vision_attn.seeds import mean_interval, welch

    rng = random.Random(0)
    for _ in range(300):
        first = [rng.gauss(0, rng.uniform(0.1, 3)) for _ in range(rng.randint(2, 8))]
        second = [rng.gauss(rng.uniform(-3, 3), rng.uniform(0.1, 3)) for _ in range(rng.randint(2, 8))]
        expected = stats.ttest_ind(first, second, equal_var=False)
        t, df, p, (low, high) = welch(first, second)
        assert (t, p) == pytest.approx((expected.statistic, expected.pvalue), abs=1e-10)
        if hasattr(expected, "df"):
            assert df == pytest.approx(expected.df, rel=1e-10)
        mean_low, mean_high = mean_interval(first)
        expected_mean = stats.t.interval(
            0.95, len(first) - 1, loc=statistics.fmean(first), scale=stats.sem(first)
        )
        assert (mean_low, mean_high) == pytest.approx(expected_mean, abs=1e-8)
        if hasattr(expected, "confidence_interval"):
            interval = expected.confidence_interval(0.95)
            assert (low, high) == pytest.approx((interval.low, interval.high), abs=1e-8)


def test_seeds_against_a_baseline_by_hand(tmp_path, capsys):
    """--against g: g's seeds 30, 32 and f's 32, 34 both have variance 2, so Welch's standard
    error is sqrt(2 / 2 + 2 / 2) = sqrt(2), t = 2 / sqrt(2) = sqrt(2) and the degrees of freedom
    (1 + 1)^2 / (1^2 / 1 + 1^2 / 1) = 2, where p = 1 - |t| / sqrt(2 + t^2) = 1 - sqrt(2) / 2 =
    0.29; the 95% interval is 2 +- q sqrt(2), where q solves 1 - q / sqrt(2 + q^2) = 0.05:
    q^2 = 2 x 0.95^2 / (1 - 0.95^2), q = 4.3027, so -4.08 to +8.08; k's 50, 52 are 20 above,
    t = 20 / sqrt(2), p = 1 - t / sqrt(2 + t^2) = 0.0050 (printed 5.0e-03); h's one seed has a
    difference but no test; identical seeds (no spread on either side) have no test either.
    --interval: f's mean 33 +- q sqrt(2) / sqrt(2) with q = tan(0.475 pi) = 12.706 (one degree of
    freedom, the Cauchy quantile): 20.29 to 45.71."""
    from fairseq_vision_attn import seeds

    table = tmp_path / "t.tsv"
    table.write_text(
        "system\tBLEU\tRIBES\ng_s1\t30.00\t70\ng_s2\t32.00\t70\nf_s1\t32.00\t70\nf_s2\t34.00\t70\n"
        "h_s1\t29.50\t71\nk_s1\t50.00\t70\nk_s2\t52.00\t70\n"
    )
    seeds.main([str(table), "--against", "g"])
    rows = {r[0]: r for r in (line.split("\t") for line in capsys.readouterr().out.splitlines())}
    added = ["diff", "p", "diff_ci95_low", "diff_ci95_high"]
    assert rows["system"][2:] == [
        f"{c}{s}" for c in ("BLEU", "RIBES") for s in ["", "_sd"] + [f"_{a}" for a in added]
    ]
    assert rows["g"][2:8] == ["31.00", "1.41", "-", "-", "-", "-"]
    assert rows["f"][2:8] == ["33.00", "1.41", "+2.00", "0.29", "-4.08", "+8.08"]
    assert rows["f"][8:] == ["70.00", "0.00", "+0.00", "-", "-", "-"]
    assert rows["h"][2:8] == ["29.50", "-", "-1.50", "-", "-", "-"] and rows["h"][10] == "+1.00"
    assert rows["k"][2:6] == ["51.00", "1.41", "+20.00", "5.0e-03"]
    seeds.main([str(table), "--interval", "--columns", "BLEU"])  # f: 33 +- tan(0.475 pi) x 1
    rows = {r[0]: r for r in (line.split("\t") for line in capsys.readouterr().out.splitlines())}
    assert rows["system"][2:] == ["BLEU", "BLEU_sd", "BLEU_ci95_low", "BLEU_ci95_high"]
    assert rows["f"][4:] == ["20.29", "45.71"] and rows["h"][4:] == ["-", "-"]
    for argv, message in [
        (["--against", "x"], "--against: no system named x; systems: g, f, h, k"),
        (["--against", "g", "--per-seed"], "--against is about the seed means of systems"),
        (["--interval", "--per-seed"], "--interval is about the seed means of systems"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            seeds.main([str(table), *argv])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_seeds_distance_to_a_curve_through_seed_means(tmp_path, capsys):
    """--curve draws the line through each baseline's seed means: wk1 (DAL 2, BLEU 10) and
    (4, 20) give the point (3, 15), wk2 (7, 40) and (5, 30) give (6, 35): slope 20 / 3, so
    BLEU 25 at DAL 4.5. m_s1 (4.5, 30) is +5, m_s2 (3, 10) is -5: mean 0, sample sd
    sqrt(2 x 25) = 7.07; n's two seeds are +1 each; a run past DAL 6 gets no distance, and
    neither do the baselines. (A line through seed 1 alone, (2, 10) to (7, 40), would put m_s1
    at +5 too but m_s2 at -6: the means matter.)"""
    from fairseq_vision_attn import seeds

    first = tmp_path / "a.tsv"
    first.write_text(
        "system\tBLEU\tDAL\nwk1_s1\t10.00\t2.00\nwk2_s1\t40.00\t7.00\nm_s1\t30.00\t4.50\n"
        "n_s1\t36.00\t6.00\nfar_s1\t50.00\t8.00\nm_s1@energy\t31.00\t4.50\n"
    )
    second = tmp_path / "b.tsv"
    second.write_text(
        "system\tBLEU\tDAL\nwk1_s2\t20.00\t4.00\nwk2_s2\t30.00\t5.00\nm_s2\t10.00\t3.00\nn_s2\t16\t3\n"
    )
    seeds.main([str(first), str(second), "--columns", "BLEU", "DAL", "--curve", "wk1,wk2"])
    rows = {r[0]: r for r in (line.split("\t") for line in capsys.readouterr().out.splitlines())}
    assert rows["system"][-2:] == ["to_curve_DAL", "to_curve_DAL_sd"]
    assert rows["wk1"][2:] == ["15.00", "7.07", "3.00", "1.41", "-", "-"]
    assert rows["m"][-2:] == ["0.00", "7.07"] and rows["n"][-2:] == ["1.00", "0.00"]
    assert rows["far"][-2:] == ["-", "-"] and rows["m@energy"][1:3] == ["1", "31.00"]
    seeds.main([str(first), str(second), "--columns", "BLEU", "--curve", "wk1,wk2", "--per-seed"])
    rows = {r[0]: r for r in (line.split("\t") for line in capsys.readouterr().out.splitlines())}
    assert rows["system"] == ["system", "BLEU", "to_curve_DAL"]
    assert rows["m_s1"] == ["m_s1", "30.00", "5.00"] and rows["m_s2"] == ["m_s2", "10.00", "-5.00"]
    assert rows["wk1_s2"] == ["wk1_s2", "20.00", "-"] and rows["far_s1"] == ["far_s1", "50.00", "-"]
    assert rows["m_s1@energy"] == ["m_s1@energy", "31.00", "6.00"]  # another stopping rule: its own group

    bare = tmp_path / "c.tsv"
    bare.write_text("system\tBLEU\nwk3_s1\t12.00\n")
    for curve, tables, message in [
        ("wk1,nothing", [first], "--curve: no system named nothing; systems: wk1, wk2, m, n, far, m@energy"),
        ("wk1,wk1", [first], "--curve: a curve needs at least two baseline systems"),
        ("wk1,wk3", [first, bare], "--curve: wk3 has a seed without BLEU or DAL"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            seeds.main([str(t) for t in tables] + ["--curve", curve])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_seeds_curve_intervals_carry_the_curves_own_seeds_by_hand(tmp_path, capsys):
    """The curve at a run's latency is a weighted sum of baseline seed means, so a mean distance
    to it has two kinds of variance. a (DAL 2: BLEU 10, 12) and b (DAL 4: 20, 22) each have a
    mean's variance 2 / 2 = 1 on one degree of freedom; m's seeds sit at DAL 4 (the weight all on
    b) with BLEU 23, 25: distances 2, 4, mean 3, its own variance 1. The interval's variance is
    1 + 1 = 2 on (1 + 1)^2 / (1 + 1) = 2 degrees of freedom: 3 +- 4.3027 sqrt(2) = -3.08 to +9.08
    (a curve taken as exact would give 3 +- 12.706 x 1). m2 at DAL 4 too, BLEU 25, 27: against m
    the curve cancels, and the test is Welch's on their BLEU (p = 1 - sqrt(2) / 2 = 0.29 as in
    the by-hand Welch test above). n at DAL 3 (weights 1/2, 1/2; BLEU 17, 19, distances 1, 3):
    m - n = 1 with variance 1 + 1 + (1/2)^2 + (1/2)^2 = 2.5 (the weights differ by 1/2 on each
    baseline) on 2.5^2 / (1 + 1 + 1/16 + 1/16) degrees of freedom. A single-seed baseline that
    carries weight leaves the interval unknown, unless --curve-exact takes its mean as exact."""
    from fairseq_vision_attn import seeds

    table = tmp_path / "t.tsv"
    table.write_text(
        "system\tBLEU\tDAL\na_s1\t10\t2\na_s2\t12\t2\nb_s1\t20\t4\nb_s2\t22\t4\nm_s1\t23\t4\n"
        "m_s2\t25\t4\nm2_s1\t25\t4\nm2_s2\t27\t4\nn_s1\t17\t3\nn_s2\t19\t3\nc_s1\t30\t6\n"
    )
    seeds.main([str(table), "--columns", "BLEU", "--curve", "a,b", "--interval", "--against", "m"])
    rows = {r[0]: r for r in (line.split("\t") for line in capsys.readouterr().out.splitlines())}
    header = rows["system"]
    cell = {name: dict(zip(header, row)) for name, row in rows.items()}
    assert cell["m"]["to_curve_DAL"] == "3.00"
    assert (cell["m"]["to_curve_DAL_ci95_low"], cell["m"]["to_curve_DAL_ci95_high"]) == ("-3.08", "9.08")
    assert cell["m2"]["to_curve_DAL_diff"] == "+2.00" and cell["m2"]["to_curve_DAL_p"] == cell["m2"]["BLEU_p"]
    assert cell["m2"]["to_curve_DAL_p"] == "0.29"
    assert cell["m2"]["to_curve_DAL_diff_ci95_low"] == cell["m2"]["BLEU_diff_ci95_low"] == "-4.08"
    df = 2.5**2 / (1 + 1 + 1 / 16 + 1 / 16)
    half = seeds.student_t_quantile(0.05, df) * math.sqrt(2.5)
    assert cell["n"]["to_curve_DAL_diff"] == "-1.00"
    assert cell["n"]["to_curve_DAL_p"] == f"{seeds.student_t_two_sided(1 / math.sqrt(2.5), df):.2f}"
    assert cell["n"]["to_curve_DAL_diff_ci95_low"] == f"{-1 - half:+.2f}"
    assert cell["n"]["to_curve_DAL_diff_ci95_high"] == f"{-1 + half:+.2f}"
    seeds.main([str(table), "--columns", "BLEU", "--curve", "a,c", "--interval"])
    rows = {r[0]: r for r in (line.split("\t") for line in capsys.readouterr().out.splitlines())}
    assert rows["m"][-4:] == ["3.50", "1.41", "-", "-"]  # c (one seed) carries half of m's curve
    # --curve-exact c: m's distances 2.5, 4.5 (the curve at DAL 4 is (11 + 30) / 2) have their own
    # variance 1, a's half weight adds (1/2)^2 x 1, c adds none: 1.25 on 1.25^2 / (1 + 1/16) = 1.47
    # degrees of freedom, 3.5 +- t(0.975, 1.47) sqrt(1.25) = -3.42 to +10.42 (scipy.stats.t.ppf);
    # with a exact too, Student's t on m's two distances: 3.5 +- 12.706 x 1 = -9.21 to +16.21
    for exact, bounds in [("c", ["-3.42", "10.42"]), ("a,c", ["-9.21", "16.21"])]:
        seeds.main([str(table), "--columns", "BLEU", "--curve", "a,c", "--curve-exact", exact, "--interval"])
        rows = {r[0]: r for r in (line.split("\t") for line in capsys.readouterr().out.splitlines())}
        assert rows["m"][-4:] == ["3.50", "1.41", *bounds]
    for argv, message in [
        (
            ["--curve", "a,c", "--curve-exact", "b"],
            "--curve-exact: b is not a baseline of --curve (its baselines: a, c)",
        ),
        (["--curve-exact", "a"], "--curve-exact names baselines of a curve: give --curve BASE,BASE,..."),
    ]:
        with pytest.raises(SystemExit) as exit_:
            seeds.main([str(table), *argv])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_seeds_curve_interval_covers_the_true_distance_95_percent_of_the_time():
    """Coverage by simulation, an oracle independent of the formula: two baselines of three seeds
    with sd 3 (at DAL 2 and 6) draw the curve, a system of three seeds with sd 0.5 sits at DAL 3
    and 4 (true distance 1 above the true line); over 1,000 draws the 95% interval of the mean
    distance holds 1 at about 95% (Welch-Satterthwaite is approximate), where an interval that
    took the curve as exact (Student's t on the system's distances alone) holds it far less often."""
    from fairseq_vision_attn import seeds

    rng = random.Random(1)
    covered = exact_covered = 0
    draws = 1000
    for _ in range(draws):
        groups = {
            "a": {s: {"BLEU": rng.gauss(10, 3), "DAL": 2.0} for s in (1, 2, 3)},
            "b": {s: {"BLEU": rng.gauss(30, 3), "DAL": 6.0} for s in (1, 2, 3)},
            "m": {s: {"BLEU": rng.gauss(5 * d + 1, 0.5), "DAL": d} for s, d in ((1, 3), (2, 4), (3, 3))},
        }
        curves = seeds.add_curve_distances(groups, ["a", "b"], ["DAL"])
        low, high = seeds.curve_test(curves["to_curve_DAL"], groups, "m")[3]
        covered += low <= 1 <= high
        exact_low, exact_high = seeds.mean_interval(seeds.column_values(groups["m"], "to_curve_DAL"))
        exact_covered += exact_low <= 1 <= exact_high
    assert 0.93 <= covered / draws <= 0.975
    assert exact_covered / draws < 0.8


def test_uncertain_stop_mass_counts_stops_where_p_is_neither_0_nor_1():
    """analysis.uncertain_stop_mass: the alignment mass on positions with 0.1 < p < 0.9 (ends
    excluded), against sums done by hand; padding (alpha 0) adds nothing."""
    import torch

    from fairseq_vision_attn.analysis import uncertain_stop_mass

    alpha = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.6, 0.4, 0.0, 0.0]])
    p = torch.tensor([[0.05, 0.5, 0.95, 0.5], [0.1, 0.89, 0.5, 0.5]])
    # row 0: only position 1 (p 0.5) is uncertain -> 0.3; row 1: 0.1 is not (strict), 0.89 is -> 0.4
    assert uncertain_stop_mass(alpha, p) == pytest.approx((0.7, 2.0))
    assert uncertain_stop_mass(alpha, torch.full_like(p, 0.99)) == pytest.approx((0.0, 2.0))


def test_report_distance_to_a_baseline_curve(tmp_path, capsys):
    """--curve: BLEU 0 at DAL 2 and BLEU 100 at DAL 6 make a line that gives 25 at DAL 3 and
    50 at DAL 4, so a perfect system at DAL 3 is 75 above it and a garbage one at DAL 4 is 50
    below; a system past DAL 6, the baselines themselves and a system without statistics get
    no distance. AL draws another curve from the same files (AL = DAL / 2 here)."""
    refs = [f"w{i} x{i} y{i} z{i} v{i}" for i in range(10)]

    def system(name, perfect, dal):
        gen, stats = tmp_path / f"{name}.txt", tmp_path / f"{name}.jsonl"
        hyps = refs if perfect else ["q q q q q"] * len(refs)
        gen.write_text("".join(f"T-{i}\t{r}\nD-{i}\t-0.1\t{h}\n" for i, (r, h) in enumerate(zip(refs, hyps))))
        stats.write_text("\n".join(json.dumps({"id": i, "DAL": dal, "AL": dal / 2}) for i in range(10)))
        return f"{name}={gen}:{stats}"

    specs = [system("low", False, 2.0), system("high", True, 6.0), system("good", True, 3.0)]
    specs += [system("bad", False, 4.0), system("slow", True, 7.0), f"bare={tmp_path / 'good.txt'}"]
    report.main(specs + ["--curve", "low,high", "--curve-latency", "DAL", "AL"])
    rows = {r[0]: r for r in (line.split("\t") for line in capsys.readouterr().out.splitlines())}
    assert rows["system"][-2:] == ["to_curve_DAL", "to_curve_AL"]
    assert rows["good"][-2:] == ["75.00", "75.00"] and rows["bad"][-2:] == ["-50.00", "-50.00"]
    assert all(rows[name][-2:] == ["-", "-"] for name in ("slow", "low", "bare"))
    assert report.curve_bleu([(1.0, 10.0), (1.0, 30.0)], 1.0) == 10.0

    for curve, message in [
        ("low,nothing", "--curve: no system named nothing; systems: low, high, good, bad, slow, bare"),
        ("low,low", "--curve: a curve needs at least two baseline systems"),
        ("low,bare", "--curve: bare has no DAL (give its STATS_JSONL; statistics: none)"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            report.main(specs + ["--curve", curve])
        assert exit_.value.code == 2 and capsys.readouterr().err.strip().endswith(message)


def _curve_systems(tmp_path):
    """Three decodings of eight sentences with per-sentence DAL: two baselines of a line (``lo``
    drops words, ``hi`` decodes the references) and ``m``, with words and lags of its own."""
    refs = [f"w{i} x{i} y{i} z{i} v{i} u{i}" for i in range(8)]
    outputs = {
        "lo": ([" ".join(r.split()[: 2 + i % 3]) for i, r in enumerate(refs)], [2, 1, 3, 2, 2, 1, 3, 2]),
        "hi": (refs, [6, 5, 7, 6, 5, 6, 6, 7]),
        "m": (
            [r if i % 2 else r.replace(f"y{i}", "q") for i, r in enumerate(refs)],
            [4, 3, 5, 2, 6, 4, 3, 5],
        ),
    }
    systems = []
    for name, (hyps, dal) in outputs.items():
        gen, stats = tmp_path / f"{name}.txt", tmp_path / f"{name}.jsonl"
        gen.write_text("".join(f"T-{i}\t{r}\nD-{i}\t-0.1\t{h}\n" for i, (r, h) in enumerate(zip(refs, hyps))))
        stats.write_text("".join(json.dumps({"id": i, "DAL": d}) + "\n" for i, d in enumerate(dal)))
        systems.append((name, str(gen), str(stats)))
    return refs, outputs, systems


def test_curve_distance_bootstrap_redraws_every_system_by_hand(tmp_path):
    """Each resample of the distance to the line is, by hand, sacrebleu's corpus BLEU and the mean
    DAL of the drawn sentences (repeated as often as drawn) for every system, the baselines too,
    then m's BLEU minus the line through the baselines' resampled points; a draw of every sentence
    once gives the table's distance. A system identical to a baseline lies on the line in every
    resample (interval 0 to 0); a NaN share above 2.5% leaves no interval."""
    import numpy as np
    import sacrebleu

    refs, outputs, systems = _curve_systems(tmp_path)
    ids = set(range(len(refs)))
    draws = np.vstack([np.ones(8, dtype=int), report.bootstrap_draws(8, samples=30)])
    assert (draws.sum(1) == 8).all() and len({tuple(row) for row in draws}) > 20

    def by_hand(name, counts):
        drawn = [i for i in range(8) for _ in range(counts[i])]
        hyps, dal = outputs[name]
        bleu = sacrebleu.corpus_bleu([hyps[i] for i in drawn], [[refs[i] for i in drawn]]).score
        return sum(dal[i] for i in drawn) / len(drawn), bleu

    expected = []
    for counts in draws:
        (x0, y0), (x1, y1), (x, y) = (by_hand(name, counts) for name in ("lo", "hi", "m"))
        expected.append(y - (y0 + (y1 - y0) * (x - x0) / (x1 - x0)) if x0 <= x <= x1 else float("nan"))
    got = report.resampled_curve_distances(systems, ["lo", "hi"], "DAL", ids, draws=draws)
    assert list(got) == ["m"]
    assert got["m"] == pytest.approx(np.array(expected), nan_ok=True, abs=1e-9)
    rows = [("lo", report.score(systems[0][1]), {"DAL": 2.0}), ("hi", 100.0, {"DAL": 6.0})]
    rows.append(("m", report.score(systems[2][1]), {"DAL": 4.0}))
    report.add_curve_distances(rows, ["lo", "hi"], ["DAL"])
    assert got["m"][0] == pytest.approx(rows[2][2]["to_curve_DAL"], abs=1e-9)

    twin = [*systems, ("twin", systems[1][1], systems[1][2])]
    on_line = report.resampled_curve_distances(twin, ["lo", "hi"], "DAL", ids, draws=draws)["twin"]
    assert report.percentile_interval(on_line) == (0.0, 0.0)
    assert report.percentile_interval([1.0] * 39 + [float("nan")]) == (1.0, 1.0)
    assert report.percentile_interval([1.0] * 38 + [float("nan")] * 2) is None


def test_report_curve_interval_from_the_command_line(tmp_path, capsys):
    """--curve-interval adds the interval columns beside the distance, which lies inside it; the
    baselines get none; without --curve, or with a system lacking statistics, one line says why."""
    _, _, systems = _curve_systems(tmp_path)
    specs = [f"{name}={gen}:{stats}" for name, gen, stats in systems]
    report.main([*specs, "--curve", "lo,hi", "--curve-interval"])
    rows = {r[0]: r for r in (line.split("\t") for line in capsys.readouterr().out.splitlines())}
    assert rows["system"][-3:] == ["to_curve_DAL", "to_curve_DAL_ci95_low", "to_curve_DAL_ci95_high"]
    distance, low, high = (float(cell) for cell in rows["m"][-3:])
    assert low < distance < high and rows["lo"][-2:] == ["-", "-"] and rows["m"][2] == "8"
    for argv, message in [
        ([*specs, "--curve-interval"], "--curve-interval needs --curve NAME,NAME,..."),
        (
            [*specs, f"bare={systems[2][1]}", "--curve", "lo,hi", "--curve-interval"],
            "bare has no STATS_JSONL",
        ),
    ]:
        with pytest.raises(SystemExit):
            report.main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_bleu_by_length_curve_interval_is_reports_on_each_bucket_alone(tmp_path, capsys):
    """bleu-by-length --curve-interval resamples each bucket's sentences apart: its interval in a
    bucket is the one report --curve-interval gives on outputs holding that bucket's sentences
    only; a system without STATS gets no column, and without --curve one line says why."""
    from fairseq_vision_attn import analysis

    refs, outputs, _ = _curve_systems(tmp_path)
    sources = ["a b" if i % 2 else "a b c d e" for i in range(len(refs))]  # odd ids: the short bucket
    hyps, dal = outputs["hi"]
    outputs["hi"] = hyps, [d + 3 for d in dal]  # m's mean DAL within the line's in every resample

    def write(name, ids, suffix=""):
        hyps, dal = outputs[name]
        gen, stats = tmp_path / f"{name}{suffix}.txt", tmp_path / f"{name}{suffix}.jsonl"
        _generate_file(gen, [(i, sources[i], refs[i], hyps[i]) for i in ids])
        stats.write_text("".join(json.dumps({"id": i, "DAL": dal[i]}) + "\n" for i in ids))
        return f"{name}={gen}:{stats}"

    specs = [write(name, range(8)) for name in outputs]
    argv = ["bleu-by-length", "--generate", *specs, f"plain={tmp_path / 'm.txt'}", "--edges", "3"]
    analysis.main([*argv, "--curve", "lo,hi", "--curve-interval"])
    out = [line.split("\t") for line in capsys.readouterr().out.splitlines()[1:]]
    assert out[0][-2:] == ["m to_curve_DAL_ci95_low", "m to_curve_DAL_ci95_high"] and len(out[0]) == 12
    for row, ids, suffix in [(out[1], [1, 3, 5, 7], "_short"), (out[2], [0, 2, 4, 6], "_long")]:
        report.main([write(name, ids, suffix) for name in outputs] + ["--curve", "lo,hi", "--curve-interval"])
        alone = capsys.readouterr().out.splitlines()[-1].split("\t")
        assert alone[0] == "m" and [float(c) for c in row[-2:]] == pytest.approx(
            [float(c) for c in alone[-2:]]
        )
    with pytest.raises(SystemExit):
        analysis.main([*argv, "--curve-interval"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--curve-interval needs --curve" in err[0], err


def test_step_agreement_hand_values():
    """analysis' step_agreement on hand-built attention: sentence 1 (3 target steps; step 1 is
    never compared) puts step 2 on the reference's previous peak, 0.4 of its weight on the
    reference's own; sentence 2 (length 2 of 3: the padded step is ignored) looks right of the
    reference; a one-step sentence adds nothing."""
    import torch

    from fairseq_vision_attn.analysis import step_agreement

    reference = torch.tensor(
        [
            [[1.0, 0, 0], [0, 1, 0], [0, 0, 1]],
            [[0, 0, 1.0], [1, 0, 0], [1, 0, 0]],
            [[1.0, 0, 0], [0, 1, 0], [0, 0, 1]],
        ]
    )
    attn = torch.tensor(
        [
            [[0.2, 0.3, 0.5], [0.6, 0.4, 0], [0, 0, 1]],
            [[1.0, 0, 0], [0, 0, 1], [0, 1, 0]],
            [[0, 0, 1.0], [0, 0, 1], [0, 0, 1]],
        ]
    )
    steps, sums = step_agreement(attn, reference, torch.tensor([3, 2, 1]))
    assert steps == 3
    # same peak, previous peak, same overlap, previous overlap, peak before, peak after
    assert sums == pytest.approx([1, 2, 0.4 + 1 + 0, 0.6 + 0 + 1, 1, 1])


def test_text_tools_are_recognised_from_the_interpreters_arguments():
    """The package skips importing torch and fairseq only for `python [options] -m
    fairseq_vision_attn.NAME` with NAME a text tool: not for another module, a script, -c, or a
    tool of the package that needs the models."""
    from fairseq_vision_attn import CHECKPOINT_TOOLS, TEXT_TOOLS, started_as_text_tool

    assert set(TEXT_TOOLS) == {"report", "seeds", "toydata", "prepare_data", "plots", "analysis"}
    assert CHECKPOINT_TOOLS == ("average",)
    average = ["python", "-m", "fairseq_vision_attn.average"]
    assert started_as_text_tool(average, tools=TEXT_TOOLS + CHECKPOINT_TOOLS)
    assert not started_as_text_tool(["python", "-m", "fairseq_vision_attn.report"], tools=CHECKPOINT_TOOLS)
    for argv, expected in [
        (["python", "-m", "fairseq_vision_attn.report", "t.tsv"], True),
        (["python", "-X", "importtime", "-W", "ignore", "-m", "fairseq_vision_attn.seeds"], True),
        (["python", "-u", "-m", "fairseq_vision_attn.toydata", "-m", "x"], True),
        (["python", "-m", "fairseq_vision_attn.plots", "latency"], True),
        (["python", "-m", "fairseq_vision_attn.agent"], False),
        (["python", "-m", "fairseq_vision_attn.average"], False),
        (["python", "-m", "fairseq_vision_attn"], False),
        (["python", "-m", "pytest", "-m", "fairseq_vision_attn.report"], False),
        (["python", "/usr/bin/fairseq-train", "-m", "fairseq_vision_attn.report"], False),
        (["python", "script.py", "-m", "fairseq_vision_attn.report"], False),
        (["python", "-c", "import x", "-m", "fairseq_vision_attn.report"], False),
        (["python", "-m"], False),
        (["python"], False),
    ]:
        assert started_as_text_tool(argv) is expected, argv


def test_text_tools_start_without_torch_and_importing_the_package_registers(tmp_path):
    """Python's own import log (-X importtime) of `python -m fairseq_vision_attn.report`, of
    `seeds` and of `analysis bleu-by-length` names neither torch nor fairseq, and each still
    prints its table (the report: mean window (4 + 3 + 2 + 1 + 1) / 5 = 2.2; one sentence of 4
    source words scores 100 in the bucket 1-5); a plain `import fairseq_vision_attn` still
    registers the architectures (the sub-commands that load a checkpoint register when they run:
    tests/test_cli.py runs them as commands)."""
    gen, stats = tmp_path / "gen.txt", tmp_path / "gen.jsonl"
    gen.write_text("S-0\ta b c d\nT-0\td c b a\nH-0\t-0.1\td c b a\nD-0\t-0.1\td c b a\n")
    row = {"id": 0, "src_len": 4, "hypo_len": 5, "window_sizes": [4, 3, 2, 1, 1]}
    stats.write_text(json.dumps(row) + "\n")
    table = tmp_path / "t.tsv"
    table.write_text("system\tBLEU\nx_s1\t1.0\nx_s2\t3.0\n")
    expected = {
        "report": ["sys", "100.00", "4.00", "5.00", "2.20"],
        "seeds": ["x", "1,2", "2.00", "1.41"],
        "analysis": ["1-5", "1", "100.00"],
    }
    for module, args in [
        ("report", [f"sys={gen}:{stats}"]),
        ("seeds", [str(table)]),
        ("analysis", ["bleu-by-length", "--generate", f"sys={gen}", "--edges", "5"]),
    ]:
        result = run_cli(
            [sys.executable, "-X", "importtime", "-m", f"fairseq_vision_attn.{module}", *args], cwd=REPO
        )
        imported = imported_modules(result.stderr)
        assert "fairseq_vision_attn" in imported, module
        assert not {name.split(".")[0] for name in imported} & {"torch", "fairseq"}, module
        row = result.stdout.splitlines()[2 if module == "analysis" else 1].split("\t")
        assert row[: len(expected[module])] == expected[module], result.stdout
    plots = run_cli(
        [sys.executable, "-X", "importtime", "-m", "fairseq_vision_attn.plots", "--help"], cwd=REPO
    )
    assert "streaming-attention" in plots.stdout  # its checkpoint sub-commands import torch when run
    assert not {name.split(".")[0] for name in imported_modules(plots.stderr)} & {"torch", "fairseq"}
    registered = run_cli(
        [
            sys.executable,
            "-c",
            "import fairseq_vision_attn; from fairseq.models import ARCH_MODEL_REGISTRY as r; "
            "print(all(a in r for a in ('lstm_milk', 'lstm_sact', 'lstm_flexible')))",
        ],
        cwd=REPO,
    )
    assert registered.stdout.strip() == "True"
