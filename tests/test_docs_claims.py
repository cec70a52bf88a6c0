"""The claims table (issue 22): docs/results/claims.tsv, one row per paper claim, and the
README's short table, which repeats it with a shorter "ours" cell, say the same thing, and every
row points to a section of the docs that exists."""

import csv
import glob
import os
import re

from .conftest import REPO

COLUMNS = ["paper", "claim", "paper_value", "ours", "met", "where"]
TSV = os.path.join(REPO, "docs", "results", "claims.tsv")


def _claims():
    with open(TSV, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return rows[0], rows[1:]


def _slug(heading):
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path):
    """The anchors of a markdown file's headings."""
    headings = re.findall(r"^#+ (.+)$", open(path, encoding="utf-8").read(), flags=re.M)
    return {_slug(h) for h in headings}


def _readme_claims():
    """The rows of the README's table whose header starts with '| paper | claim |'."""
    lines = open(os.path.join(REPO, "README.md"), encoding="utf-8").read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| paper | claim |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


def test_claims_tsv_has_the_issue_columns_and_a_verdict_per_row():
    header, rows = _claims()
    assert header == COLUMNS
    assert rows, "claims.tsv lists no claim"
    for row in rows:
        assert len(row) == len(COLUMNS), row
        assert all(cell.strip() for cell in row), row
        assert row[COLUMNS.index("met")] in ("yes", "no"), row


def test_every_claim_points_to_an_existing_section():
    _, rows = _claims()
    for row in rows:
        path, _, anchor = row[COLUMNS.index("where")].partition("#")
        full = os.path.join(REPO, path)
        assert os.path.isfile(full), f"{path} does not exist"
        if anchor:
            assert anchor in _anchors(full), f"{path} has no section #{anchor}"


# a figure: a number, its sign when it stands alone ("-0.49", not the "-3" of "seeds 1-3"), its "%"
FIGURE = re.compile(r"(?<![\w.])(?:(?:^|(?<=[\s(]))[+-])?\d+(?:\.\d+)?%?")
SHORT_CELL = 300  # characters of the README's "ours" cell


def test_figure_pattern():
    figures = FIGURE.findall("-0.49 test, seeds 1-3 (+0.25 valid), 20.5% at DAL 2-5")
    assert figures == ["-0.49", "1", "3", "+0.25", "20.5%", "2", "5"]


def test_readme_table_shortens_the_tsv():
    """The README's table repeats the TSV's paper, claim, paper's value, verdict and section, and
    shortens its "ours": every figure the short cell quotes is one of the TSV row's figures."""
    _, rows = _claims()
    readme = _readme_claims()
    assert len(readme) == len(rows)
    for theirs, row in zip(readme, rows):
        for column, short, full in zip(COLUMNS, theirs, row):
            if column == "ours":
                assert len(short) <= SHORT_CELL, f"README's cell for {row[1]!r} is not short"
                missing = set(FIGURE.findall(short)) - set(FIGURE.findall(full))
                assert not missing, f"README's cell for {row[1]!r} quotes {sorted(missing)}: not in the TSV"
            elif column == "where":
                assert short == f"[results]({full})"
            else:
                assert short == full, (column, row[1])


# a markdown link to a section: (#anchor) in the same file, or (PATH.md#anchor) relative to it
SECTION_LINK = re.compile(r"\]\(([\w./-]*\.md)?#([^)\s]+)\)")


def test_every_link_to_a_section_of_the_docs_exists():
    """Every link into a section, in the README and docs/*.md, names a heading of its file: a
    renamed section heading (a figure in it changed) must take its links along."""
    markdown = [os.path.join(REPO, "README.md"), *sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))]
    anchors, broken = {}, []  # anchors: each linked file's, read once
    for source in markdown:
        text = open(source, encoding="utf-8").read()
        for target, anchor in SECTION_LINK.findall(text):
            full = os.path.normpath(os.path.join(os.path.dirname(source), target)) if target else source
            if full not in anchors:
                anchors[full] = _anchors(full)
            if anchor not in anchors[full]:
                broken.append(f"{os.path.relpath(source, REPO)} -> {target}#{anchor}")
    assert not broken, broken


def test_slug_follows_github():
    assert _slug("MILk: why it trained half the epochs on the GPU") == (
        "milk-why-it-trained-half-the-epochs-on-the-gpu"
    )
    assert _slug("Quick start (toy reversal)") == "quick-start-toy-reversal"


# rows of the table in "The wait-k line with seeds at wait-3 and wait-5" -> the runs they name
LINE_ROWS = {
    "1 held, 1": ["milk_1_s1"],
    "1 held, noise 16, 1": ["milk_1_noise16_s1"],
    "1 held, g = 1 after a warm-up, 1": ["milk_1_g1warm_s1"],
    "0.3 plain, 1 (H100, cut at 41 epochs)": ["milk_0.3_s1"],
    "0.3 plain, 2": ["milk_0.3_s2"],
    "0.3 held, 1": ["milk_0.3_lrhold_s1"],
    "0.3 held, g = 1 after a warm-up, 1": ["milk_0.3_g1warm_s1"],
    "0.3 held, noise 16, 1 / 2 / 3": ["milk_0.3_noise16_s1", "milk_0.3_noise16_s2", "milk_0.3_noise16_s3"],
    "0.1 plain, 1": ["milk_0.1_s1"],
    "0.1 held, g = 1 after a warm-up, 1": ["milk_0.1_g1warm_s1"],
    "0.1 held, noise 16, 1 (past DAL 6)": ["milk_0.1_noise16_s1"],
    "0.1 held, 2 / 3": ["milk_0.1_hold_s2", "milk_0.1_hold_s3"],
}


def test_milk_distances_to_the_wait_k_line_are_recomputed_from_the_committed_points(capsys):
    """docs/results.md's table of MILk's distances to the wait-k line (wait-3 and wait-5 as the means of
    their seeds) is what `seeds --curve ... --per-seed` gives on docs/results/deen_line.*.tsv."""
    from fairseq_vision_attn import seeds

    computed = {}
    for subset in ("valid", "test", "test1"):
        table = os.path.join(REPO, "docs", "results", f"deen_line.{subset}.tsv")
        seeds.main([table, "--columns", "BLEU", "--curve", "waitk1,waitk3,waitk5,waitk7", "--per-seed"])
        for line in capsys.readouterr().out.splitlines()[1:]:
            name, _, distance = line.split("\t")
            computed[name, subset] = distance
    text = open(os.path.join(REPO, "docs", "results.md"), encoding="utf-8").read()
    section = text[text.index("### The wait-k line with seeds at wait-3 and wait-5") :]
    published = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if line.startswith("|") and cells[0] in LINE_ROWS:
            published[cells[0]] = cells[1:]
    assert set(published) == set(LINE_ROWS), "the table's rows changed: update LINE_ROWS"
    for row, runs in LINE_ROWS.items():
        for subset, cell in zip(("valid", "test", "test1"), published[row]):
            expected = [f"{float(computed[run, subset]):+.2f}" for run in runs]
            assert cell.split(" / ") == expected, (row, subset)


SEED_TABLES = {  # the block's opening words -> (table stem, subsets, the column compared, extra flags)
    "De-En": ("deen_seeds", ("valid", "test", "test1"), "BLEU", []),
    "En-Ja": ("enja_seeds", ("test",), "BLEU", []),
    "Simultaneous De-En": (
        "deen_line",
        ("valid", "test", "test1"),
        "to_curve_DAL",
        ["--curve", "waitk1,waitk3,waitk5,waitk7"],
    ),
}


def test_welch_cells_are_recomputed_from_the_committed_seed_tables(capsys):
    """Every cell of docs/results.md's "Three seeds each" tables (a difference of seed means, its
    Welch p and 95% interval) is what `seeds --against BASE` prints on the committed
    docs/results/{deen_seeds,enja_seeds,deen_line}.*.tsv (for the simultaneous block, of each
    run's BLEU distance to the wait-k line at its DAL)."""
    from fairseq_vision_attn import seeds

    text = open(os.path.join(REPO, "docs", "results.md"), encoding="utf-8").read()
    start = text.index("## Three seeds each: differences of means and Welch's t")
    section = text[start : text.index("\n## ", start + 1)]
    checked = 0
    for pair, (stem, subsets, column, flags) in SEED_TABLES.items():
        block = section[section.index(f"\n{pair} (") :]
        block = block[block.index("\n|") : block.index("\n\n", block.index("\n|"))]
        rows = [line.strip().strip("|").split(" | ") for line in block.strip().splitlines()[2:]]
        assert rows, pair
        for cells in rows:
            system, baseline = re.fullmatch(r"`([^`]+)` - `([^`]+)`", cells[0].strip()).groups()
            for subset, cell in zip(subsets, cells[2:], strict=True):
                table = os.path.join(REPO, "docs", "results", f"{stem}.{subset}.tsv")
                seeds.main([table, "--columns", "BLEU", *flags, "--against", baseline])
                lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
                at = lines[0].index(f"{column}_diff")
                diff, p, low, high = {r[0]: r for r in lines[1:]}[system][at : at + 4]
                assert cell.replace("**", "").strip() == f"{diff} (p {p}; {low} to {high})", (
                    pair,
                    cells[0],
                    subset,
                )
                checked += 1
    assert checked == 5 * 3 + 9 + 1 * 3


def test_the_distances_to_the_wait_k_line_are_the_tools(capsys):
    """The "Distance to the wait-k line" table: each cell (mean distance to the line through the
    wait-k seed means and its 95% interval, the line's seeds carried) and each mean DAL is what
    `seeds --curve ... --interval` prints on the committed docs/results/deen_line.*.tsv."""
    from fairseq_vision_attn import seeds

    text = open(os.path.join(REPO, "docs", "results.md"), encoding="utf-8").read()
    start = text.index("\nDistance to the wait-k line (")
    block = text[text.index("\n|", start) : text.index("\n\n", text.index("\n|", start))]
    rows = [line.strip().strip("|").split(" | ") for line in block.strip().splitlines()[2:]]
    printed, curve = {}, ["--curve", "waitk1,waitk3,waitk5,waitk7", "--interval"]
    for subset in ("valid", "test", "test1"):
        table = os.path.join(REPO, "docs", "results", f"deen_line.{subset}.tsv")
        seeds.main([table, "--columns", "BLEU", "DAL", *curve])
        lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
        printed[subset] = {r[0]: dict(zip(lines[0], r)) for r in lines[1:]}
    assert len(rows) == 3
    for cells in rows:
        system = cells[0].strip().strip("`")
        dals = " / ".join(printed[s][system]["DAL"] for s in ("valid", "test", "test1"))
        assert cells[1].endswith(f"DAL {dals}"), system
        for subset, cell in zip(("valid", "test", "test1"), cells[2:], strict=True):
            row = printed[subset][system]
            mean, low, high = (float(row[f"to_curve_DAL{s}"]) for s in ("", "_ci95_low", "_ci95_high"))
            assert cell.strip() == f"{mean:+.2f} ({low:+.2f} to {high:+.2f})", (system, subset)


def test_the_en_ja_baseline_goal_intervals_are_the_tools(capsys):
    """The "Three seeds each" section reads `lstm_global` >= 38.5 En-Ja, and MILk >= 95% of the
    offline model on De-En, by the mean's 95% interval (`seeds --interval`): the figures it quotes
    for the CPU and the H200, and for MILk on each set, are the tool's."""
    from fairseq_vision_attn import seeds

    seeds.main(
        [os.path.join(REPO, "docs", "results", "enja_seeds.test.tsv"), "--columns", "BLEU", "--interval"]
    )
    printed = {r[0]: r for r in (line.split("\t") for line in capsys.readouterr().out.splitlines())}
    text = open(os.path.join(REPO, "docs", "results.md"), encoding="utf-8").read()
    start = text.index("## Three seeds each: differences of means and Welch's t")
    section = " ".join(text[start : text.index("\n## ", start + 1)].split())
    for system, words in [("global", "on the CPU (the mean's interval "), ("global_h200", "on the H200 (")]:
        low, high = printed[system][4:6]
        assert f"{words}{low} to {high}" in section, system
    for subset, words in [
        ("test", "its mean's interval "),
        ("valid", "On valid ("),
        ("test1", "test_2017 ("),
    ]:
        seeds.main(
            [
                os.path.join(REPO, "docs", "results", f"deen_line.{subset}.tsv"),
                "--columns",
                "BLEU",
                "--interval",
            ]
        )
        low, high = {r[0]: r for r in (line.split("\t") for line in capsys.readouterr().out.splitlines())}[
            "milk_0.3_noise16"
        ][4:6]
        assert f"{words}{low} to {high}" in section, subset
