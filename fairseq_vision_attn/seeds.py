"""Mean and standard deviation over seeds of the rows of report tables.

    python -m fairseq_vision_attn.seeds TABLE.tsv [TABLE.tsv ...] [--columns BLEU RIBES]

Each TABLE is ``fairseq_vision_attn.report``'s output (a queue's ``table.{valid,test}.tsv``).
A row named ``BASE_sN`` is seed N of system BASE; rows are grouped by BASE across all the
tables, and each group prints the seeds it holds, then for each column its mean and its sample
standard deviation (n - 1 in the denominator; ``-`` for a single seed). A row whose name does
not end in ``_sN`` is a group of its own. The same seed of one system in two tables is an error
(two runs of one seed are not two seeds).
"""

import argparse
import re
import statistics
import sys

from .errors import VisionAttnError, one_line_errors

SEED_NAME = re.compile(r"^(?P<base>.+)_s(?P<seed>\d+)$")


def read_table(path):
    """report.py's TSV as a list of (system, {column: float}); '-' cells are left out."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = [line.rstrip("\n").split("\t") for line in handle if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise VisionAttnError(f"cannot read table {path}: {exc}") from None
    header, lines = (lines[0], lines[1:]) if lines else ([], [])
    if header[:2] != ["system", "BLEU"]:
        raise VisionAttnError(f"{path}: not a report table (its header must start 'system<TAB>BLEU')")
    rows = []
    for cells in lines:
        values = {}
        for column, cell in zip(header[1:], cells[1:]):
            if cell != "-":
                try:
                    values[column] = float(cell)
                except ValueError:
                    raise VisionAttnError(f"{path}: {cells[0]}: {column} is not a number: {cell!r}") from None
        rows.append((cells[0], values))
    return rows


def group_by_seed(tables):
    """{base: {seed: values}} in order of first appearance; ``tables``: [(path, rows)]."""
    groups, where = {}, {}
    for path, rows in tables:
        for name, values in rows:
            match = SEED_NAME.match(name)
            base, seed = (match["base"], int(match["seed"])) if match else (name, None)
            if seed in groups.setdefault(base, {}):
                raise VisionAttnError(
                    f"{name} appears twice ({where[base, seed]} and {path}): one run per seed"
                )
            groups[base][seed] = values
            where[base, seed] = path
    return groups


def summarize(groups, columns):
    """One row per group: (base, seeds, [(mean, sd or None) or None per column])."""
    summary = []
    for base, runs in groups.items():
        cells = []
        for column in columns:
            values = [runs[seed][column] for seed in sorted(runs, key=str) if column in runs[seed]]
            if len(values) < len(runs):
                cells.append(None)  # a column some seed lacks is not averaged
            else:
                sd = statistics.stdev(values) if len(values) > 1 else None
                cells.append((statistics.fmean(values), sd))
        seeds = [seed for seed in runs if seed is not None]
        summary.append((base, sorted(seeds), cells))
    return summary


def format_summary(summary, columns):
    header = ["system", "seeds"] + [f"{c}{suffix}" for c in columns for suffix in ("", "_sd")]
    lines = ["\t".join(header)]
    for base, seeds, cells in summary:
        row = [base, ",".join(map(str, seeds)) or "-"]
        for cell in cells:
            if cell is None:
                row += ["-", "-"]
            else:
                mean, sd = cell
                row += [f"{mean:.2f}", "-" if sd is None else f"{sd:.2f}"]
        lines.append("\t".join(row))
    return "\n".join(lines)


def get_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tables", nargs="+", metavar="TABLE.tsv", help="report.py tables")
    parser.add_argument(
        "--columns",
        nargs="+",
        default=["BLEU", "RIBES"],
        help="columns to average (default: BLEU RIBES; those no table has are left out)",
    )
    return parser


@one_line_errors
def main(argv=None):
    args = get_parser().parse_args(argv)
    tables = [(path, read_table(path)) for path in args.tables]
    present = {column for _, rows in tables for _, values in rows for column in values}
    columns = [c for c in args.columns if c in present]
    if not columns:
        raise VisionAttnError(
            f"none of the columns {' '.join(args.columns)} is in the tables; they have: "
            f"{' '.join(sorted(present))}"
        )
    print(format_summary(summarize(group_by_seed(tables), columns), columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
