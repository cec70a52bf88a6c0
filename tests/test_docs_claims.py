"""The claims table (issue 22): docs/results/claims.tsv, one row per paper claim, and the
README's short table, which repeats it, say the same thing, and every row points to a section
of the docs that exists."""

import csv
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
            headings = re.findall(r"^#+ (.+)$", open(full, encoding="utf-8").read(), flags=re.M)
            assert anchor in {_slug(h) for h in headings}, f"{path} has no section #{anchor}"


def test_readme_table_repeats_the_tsv():
    _, rows = _claims()
    readme = _readme_claims()
    assert len(readme) == len(rows)
    for theirs, ours in zip(readme, rows):
        assert theirs[:5] == ours[:5]
        assert theirs[5] == f"[results]({ours[5]})"


def test_slug_follows_github():
    assert _slug("MILk: why it trained half the epochs on the GPU") == (
        "milk-why-it-trained-half-the-epochs-on-the-gpu"
    )
    assert _slug("Quick start (toy reversal)") == "quick-start-toy-reversal"
