"""Mean and standard deviation over seeds of the rows of report tables.

    python -m fairseq_vision_attn.seeds TABLE.tsv [TABLE.tsv ...] [--columns BLEU RIBES]
        [--curve BASE,BASE,... [--curve-latency DAL ...]] [--per-seed]

Each TABLE is ``fairseq_vision_attn.report``'s output (a queue's ``table.{valid,test}.tsv``).
A row named ``BASE_sN`` is seed N of system BASE (``BASE_sN@RULE``, a queue's decoding with
another stopping rule, seed N of ``BASE@RULE``); rows are grouped by BASE across all the
tables, and each group prints the seeds it holds, then for each column its mean and its sample
standard deviation (n - 1 in the denominator; ``-`` for a single seed). A row whose name does
not end in ``_sN`` is a group of its own. The same seed of one system in two tables is an error
(two runs of one seed are not two seeds).

``--curve waitk1,waitk3,waitk5`` draws a baseline curve through the seed means: each named group's
point is (mean latency, mean BLEU) over its seeds, and every run of every other group gets its
BLEU minus the piecewise-linear curve through those points at the run's own latency
(``report.curve_bleu``: ``-`` outside the curve's range), a ``to_curve_METRIC`` column per
``--curve-latency`` metric (default DAL; the tables need that column, i.e. the report was given
each system's STATS_JSONL), averaged over seeds like the others. ``--per-seed`` prints one row
per run instead of the groups' means (the distance of each seed).
"""

import argparse
import re
import statistics
import sys

from .errors import VisionAttnError, one_line_errors
from .report import check_curve_names, curve_bleu

SEED_NAME = re.compile(r"^(?P<base>.+)_s(?P<seed>\d+)(?P<rule>@[^@\s]+)?$")


def split_seed(name):
    """``BASE_sN`` -> (BASE, N), ``BASE_sN@RULE`` -> (BASE@RULE, N), any other name -> (name, None)."""
    match = SEED_NAME.match(name)
    if not match:
        return name, None
    return match["base"] + (match["rule"] or ""), int(match["seed"])


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
            if cell != "-" and column != "family":  # plots latency's optional label column
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
            base, seed = split_seed(name)
            if seed in groups.setdefault(base, {}):
                raise VisionAttnError(
                    f"{name} appears twice ({where[base, seed]} and {path}): one run per seed"
                )
            groups[base][seed] = values
            where[base, seed] = path
    return groups


def add_curve_distances(groups, baselines, metrics):
    """Add ``to_curve_METRIC`` to the values of every run outside ``baselines`` (see the module
    docstring); return the new column names."""
    check_curve_names(baselines, list(groups))
    columns = []
    for metric in metrics:
        points = []
        for base in baselines:
            runs = groups[base].values()
            if not all("BLEU" in values and metric in values for values in runs):
                raise VisionAttnError(
                    f"--curve: {base} has a seed without BLEU or {metric} (report.py writes {metric} "
                    "when given the system's STATS_JSONL)"
                )
            points.append(
                (statistics.fmean(v[metric] for v in runs), statistics.fmean(v["BLEU"] for v in runs))
            )
        column = f"to_curve_{metric}"
        for base, runs in groups.items():
            if base in baselines:
                continue
            for values in runs.values():
                on_curve = curve_bleu(points, values[metric]) if metric in values else None
                if on_curve is not None and "BLEU" in values:
                    values[column] = values["BLEU"] - on_curve
        columns.append(column)
    return columns


def per_seed(tables, columns):
    """One row per run, as the tables name and order them: (name, [value or None per column]);
    the values are the ones grouped (``add_curve_distances`` adds to them in place)."""
    return [(name, [values.get(column) for column in columns]) for _, rows in tables for name, values in rows]


def format_per_seed(rows, columns):
    lines = ["\t".join(["system"] + columns)]
    for name, cells in rows:
        lines.append("\t".join([name] + ["-" if v is None else f"{v:.2f}" for v in cells]))
    return "\n".join(lines)


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
    parser.add_argument(
        "--curve",
        metavar="BASE,BASE[,...]",
        help="systems (names without _sN) whose seed means draw a latency/quality curve: add "
        "every other run's BLEU distance to it (see --curve-latency)",
    )
    parser.add_argument(
        "--curve-latency",
        nargs="+",
        default=["DAL"],
        metavar="METRIC",
        help="latency columns the curve is drawn in, one to_curve_METRIC column each (default: DAL)",
    )
    parser.add_argument(
        "--per-seed",
        action="store_true",
        help="print one row per run (each seed's values) instead of each system's mean and sd",
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
    groups = group_by_seed(tables)
    if args.curve:
        columns += add_curve_distances(groups, args.curve.split(","), args.curve_latency)
    if args.per_seed:
        print(format_per_seed(per_seed(tables, columns), columns))
    else:
        print(format_summary(summarize(groups, columns), columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
