"""Mean and standard deviation over seeds of the rows of report tables.

    python -m fairseq_vision_attn.seeds TABLE.tsv [TABLE.tsv ...] [--columns BLEU RIBES]
        [--curve BASE,BASE,... [--curve-latency DAL ...] [--curve-exact BASE,...]] [--per-seed]
        [--against BASE] [--interval]

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

``--against global`` adds, after each column's mean and sd, the group's mean minus the mean of the
group ``global`` (``COLUMN_diff``), the two-sided p-value of Welch's t-test between the two
groups' seeds (``COLUMN_p``: unequal variances, Welch-Satterthwaite degrees of freedom) and the
95% confidence interval of the difference (``COLUMN_diff_ci95_low``, ``COLUMN_diff_ci95_high``); a
goal such as "at least global - 0.3" is shown met when the interval lies above -0.3, missed when
it lies below, and undecided by these seeds when it holds -0.3. ``-`` where either group has fewer
than two seeds or both have no spread. Seeds are not paired: seed 2 of one system shares nothing
with seed 2 of another. ``--interval`` adds the 95% confidence interval of each group's mean
(``COLUMN_ci95_low``, ``COLUMN_ci95_high``; Student's t with n - 1 degrees of freedom), to read a
mean against a fixed goal ("38.5 BLEU").

A ``to_curve`` column's intervals and tests also carry the curve's own uncertainty, since its
points are seed means too: at a run's latency the curve is a weighted sum of two baselines' mean
BLEU (``report.curve_weights``), so a group's mean distance is its own seeds' mean minus the
baselines' means each times the group's mean weight on it. Its variance adds the group's
(variance of its seeds / n) and each baseline's times that weight squared, with Welch-Satterthwaite
degrees of freedom (a baseline of one seed that carries weight leaves the interval unknown, unless
``--curve-exact`` names it: the baselines it names count as exact, with no variance, which a
figure quoted from it should say; naming every baseline gives Student's t on the group's own
distances). With
``--against`` the weights are the two groups' differences: at one latency the curve cancels and the
test is Welch's on BLEU. The baselines' mean latencies are taken as exact (wait-k's DAL moves by
hundredths between seeds).
"""

import argparse
import math
import re
import statistics
import sys

from .errors import VisionAttnError, one_line_errors
from .report import check_curve_names, curve_weights, weighted_bleu

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


class Curve:
    """What a ``to_curve`` column's distances hang on: ``terms``, for each baseline of the curve,
    (variance of its seed mean BLEU, degrees of freedom), None for a single seed; ``weights``, for
    each run (base, seed) that has a distance, the interpolation weight of each baseline's point
    at the run's latency (``report.curve_weights``)."""

    def __init__(self, column, terms):
        self.column, self.terms, self.weights = column, terms, {}

    def mean_weights(self, base, runs):
        """The weights averaged over a group's seeds (the curve's share in its mean distance)."""
        return [statistics.fmean(w) for w in zip(*(self.weights[base, seed] for seed in runs))]


def add_curve_distances(groups, baselines, metrics, exact=()):
    """Add ``to_curve_METRIC`` to the values of every run outside ``baselines`` (see the module
    docstring); return {new column: its Curve}. ``exact``: baselines whose seed means the Curve's
    intervals take as exact (no variance)."""
    check_curve_names(baselines, list(groups))
    unknown = [base for base in exact if base not in baselines]
    if unknown:
        raise VisionAttnError(
            f"--curve-exact: {', '.join(unknown)} is not a baseline of --curve (its baselines: "
            f"{', '.join(baselines)})"
        )
    curves = {}
    for metric in metrics:
        points, terms = [], []
        for base in baselines:
            runs = groups[base].values()
            if not all("BLEU" in values and metric in values for values in runs):
                raise VisionAttnError(
                    f"--curve: {base} has a seed without BLEU or {metric} (report.py writes {metric} "
                    "when given the system's STATS_JSONL)"
                )
            bleu = [values["BLEU"] for values in runs]
            points.append((statistics.fmean(values[metric] for values in runs), statistics.fmean(bleu)))
            # an exact mean adds no variance (satterthwaite skips its degrees of freedom)
            terms.append((0.0, 1) if base in exact else mean_term(bleu))
        column = f"to_curve_{metric}"
        curve = Curve(column, terms)
        for base, runs in groups.items():
            if base in baselines:
                continue
            for seed, values in runs.items():
                weights = curve_weights(points, values[metric]) if metric in values else None
                if weights is not None and "BLEU" in values:
                    values[column] = values["BLEU"] - weighted_bleu(weights, points)
                    curve.weights[base, seed] = weights
        curves[column] = curve
    return curves


def _beta_fraction(a, b, x):
    """The continued fraction of the regularized incomplete beta function I_x(a, b), by the
    modified Lentz method; converges fast for x < (a + 1) / (a + b + 2)."""
    tiny = 1e-300

    def floor(value):
        return value if abs(value) > tiny else tiny

    c, d = 1.0, 1.0 / floor(1.0 - (a + b) * x / (a + 1.0))
    result = d
    for m in range(1, 1000):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        for term in (even, odd):
            d = 1.0 / floor(1.0 + term * d)
            c = floor(1.0 + term / c)
            result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return result


def incomplete_beta(a, b, x):
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def student_t_two_sided(t, df):
    """P(|T| >= |t|) for Student's t with ``df`` (real, > 0) degrees of freedom:
    I_{df / (df + t^2)}(df / 2, 1 / 2)."""
    return incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def student_t_quantile(p, df):
    """The t > 0 with P(|T| >= t) = p (0 < p < 1): the half-width, in standard errors, of a
    two-sided 1 - p confidence interval. By bisection on ``student_t_two_sided``."""
    low, high = 0.0, 1.0
    while student_t_two_sided(high, df) > p:
        low, high = high, 2.0 * high
    for _ in range(80):  # halves the bracket below double precision
        middle = (low + high) / 2.0
        low, high = (middle, high) if student_t_two_sided(middle, df) > p else (low, middle)
    return (low + high) / 2.0


def satterthwaite(estimate, terms, level=0.95):
    """The t-test and ``level`` confidence interval of ``estimate``, a sum of independent seed
    means each times a constant: ``terms`` gives each part's (variance, degrees of freedom), the
    variance that of the mean times the constant squared. (t, degrees of freedom by
    Welch-Satterthwaite, two-sided p, (low, high)); None where the parts have no variance."""
    total = sum(variance for variance, _ in terms)
    if total == 0.0:
        return None
    se = math.sqrt(total)
    df = total**2 / sum(variance**2 / dof for variance, dof in terms if variance)
    half = student_t_quantile(1.0 - level, df) * se
    return estimate / se, df, student_t_two_sided(estimate / se, df), (estimate - half, estimate + half)


def mean_term(values):
    """A sample's (variance of its mean, degrees of freedom), None for fewer than two values."""
    return (statistics.variance(values) / len(values), len(values) - 1) if len(values) > 1 else None


def welch(first, second, level=0.95):
    """Welch's t-test of two samples: (t, degrees of freedom, two-sided p, (low, high)), the last
    the ``level`` confidence interval of mean(first) - mean(second); None where either sample has
    fewer than two values or neither has any spread."""
    if len(first) < 2 or len(second) < 2:
        return None
    difference = statistics.fmean(first) - statistics.fmean(second)
    return satterthwaite(difference, [mean_term(first), mean_term(second)], level)


def curve_test(curve, groups, base, against=None, level=0.95):
    """``satterthwaite`` for a group's mean distance to ``curve`` (or, with ``against``, its
    difference from that group's): the groups' own seeds as in Welch's test, plus each baseline's
    seed mean times the group's mean weight on it (the difference of the two groups' weights),
    so that the curve's own uncertainty is carried. None where a part with a weight has one seed."""
    weights = curve.mean_weights(base, groups[base])
    own = [column_values(groups[base], curve.column)]
    if against is not None:
        others = curve.mean_weights(against, groups[against])
        weights = [w - other for w, other in zip(weights, others)]
        own.append(column_values(groups[against], curve.column))
    terms = [mean_term(values) for values in own]
    for weight, term in zip(weights, curve.terms):
        if weight:
            terms.append(None if term is None else (weight * weight * term[0], term[1]))
    if any(term is None for term in terms):
        return None
    estimate = statistics.fmean(own[0]) - (statistics.fmean(own[1]) if against is not None else 0.0)
    return satterthwaite(estimate, terms, level)


def per_seed(tables, columns):
    """One row per run, as the tables name and order them: (name, [value or None per column]);
    the values are the ones grouped (``add_curve_distances`` adds to them in place)."""
    return [(name, [values.get(column) for column in columns]) for _, rows in tables for name, values in rows]


def format_per_seed(rows, columns):
    lines = ["\t".join(["system"] + columns)]
    for name, cells in rows:
        lines.append("\t".join([name] + ["-" if v is None else f"{v:.2f}" for v in cells]))
    return "\n".join(lines)


def column_values(runs, column):
    """The column's value at every seed of a group, or None where some seed lacks it."""
    values = [runs[seed][column] for seed in sorted(runs, key=str) if column in runs[seed]]
    return values if len(values) == len(runs) else None  # a column some seed lacks is not averaged


def mean_interval(values, level=0.95):
    """The ``level`` confidence interval of the mean of ``values`` (Student's t with n - 1 degrees
    of freedom), or None for fewer than two values."""
    if len(values) < 2:
        return None
    mean, se = statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))
    half = student_t_quantile(1.0 - level, len(values) - 1) * se if se else 0.0
    return mean - half, mean + half


MEAN_SUFFIXES = ("", "_sd")
INTERVAL_SUFFIXES = ("_ci95_low", "_ci95_high")
AGAINST_SUFFIXES = ("_diff", "_p", "_diff_ci95_low", "_diff_ci95_high")


def suffixes(interval=False, against=None):
    """The columns printed per averaged column, in order."""
    return MEAN_SUFFIXES + (INTERVAL_SUFFIXES if interval else ()) + (AGAINST_SUFFIXES if against else ())


def summarize(groups, columns, against=None, interval=False, curves=None):
    """One row per group: (base, seeds, [cell or None per column]); a cell maps each of
    ``suffixes(interval, against)`` to its value or None: the mean and sd over the seeds, with
    ``interval`` the mean's 95% interval, with ``against`` (a group's name) the difference of means
    from that group's, Welch's p and the difference's 95% interval (None for ``against`` itself
    and where they cannot be computed). ``curves`` ({column: Curve}, from ``add_curve_distances``)
    makes the intervals and tests of those columns carry the curve's uncertainty (``curve_test``)."""
    if against is not None and against not in groups:
        raise VisionAttnError(f"--against: no system named {against}; systems: {', '.join(groups)}")
    curves = curves or {}
    summary = []
    for base, runs in groups.items():
        cells = []
        for column in columns:
            values = column_values(runs, column)
            if values is None:
                cells.append(None)
                continue
            curve = curves.get(column)
            cell = dict.fromkeys(suffixes(interval, against))
            cell[""] = statistics.fmean(values)
            cell["_sd"] = statistics.stdev(values) if len(values) > 1 else None
            if interval:
                if curve:
                    test = curve_test(curve, groups, base)
                    bounds = test and test[3]
                else:
                    bounds = mean_interval(values)
                cell["_ci95_low"], cell["_ci95_high"] = bounds or (None, None)
            baseline = column_values(groups[against], column) if against is not None else None
            if base != against and baseline is not None:
                cell["_diff"] = cell[""] - statistics.fmean(baseline)
                test = curve_test(curve, groups, base, against) if curve else welch(values, baseline)
                if test is not None:
                    cell["_p"], (cell["_diff_ci95_low"], cell["_diff_ci95_high"]) = test[2], test[3]
            cells.append(cell)
        seeds = [seed for seed in runs if seed is not None]
        summary.append((base, sorted(seeds), cells))
    return summary


def _format_cell(suffix, value):
    """A summary cell: means, sds and intervals of means to two decimals, a difference and its
    interval signed, a p under 0.01 as 4.3e-03."""
    if value is None:
        return "-"
    if suffix.startswith("_diff"):
        return f"{value:+.2f}"
    if suffix == "_p" and value < 0.01:
        return f"{value:.1e}"
    return f"{value:.2f}"


def format_summary(summary, columns, against=None, interval=False):
    printed = suffixes(interval, against)
    header = ["system", "seeds"] + [f"{c}{suffix}" for c in columns for suffix in printed]
    lines = ["\t".join(header)]
    for base, seeds, cells in summary:
        row = [base, ",".join(map(str, seeds)) or "-"]
        for cell in cells:
            row += [_format_cell(suffix, (cell or {}).get(suffix)) for suffix in printed]
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
        "--curve-exact",
        metavar="BASE[,BASE...]",
        help="baselines of --curve whose seed means the intervals and tests take as exact (no "
        "variance), e.g. a one-seed point, which otherwise leaves them unknown where it carries weight",
    )
    parser.add_argument(
        "--per-seed",
        action="store_true",
        help="print one row per run (each seed's values) instead of each system's mean and sd",
    )
    parser.add_argument(
        "--against",
        metavar="BASE",
        help="a system (name without _sN) to compare every other one with: add each column's "
        "difference of seed means (COLUMN_diff), the two-sided p of Welch's t-test (COLUMN_p) and "
        "the difference's 95%% confidence interval (COLUMN_diff_ci95_low, COLUMN_diff_ci95_high)",
    )
    parser.add_argument(
        "--interval",
        action="store_true",
        help="add each column's 95%% confidence interval of the seed mean (Student's t, n - 1 degrees "
        "of freedom: COLUMN_ci95_low, COLUMN_ci95_high), e.g. to read a mean against a fixed goal",
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
    if (args.against or args.interval) and args.per_seed:
        flag = "--against" if args.against else "--interval"
        raise VisionAttnError(f"{flag} is about the seed means of systems: it does not go with --per-seed")
    if args.curve_exact and not args.curve:
        raise VisionAttnError("--curve-exact names baselines of a curve: give --curve BASE,BASE,...")
    exact = args.curve_exact.split(",") if args.curve_exact else ()
    curves = (
        add_curve_distances(groups, args.curve.split(","), args.curve_latency, exact) if args.curve else {}
    )
    columns += list(curves)
    if args.per_seed:
        print(format_per_seed(per_seed(tables, columns), columns))
    else:
        summary = summarize(groups, columns, args.against, args.interval, curves)
        print(format_summary(summary, columns, args.against, args.interval))
    return 0


if __name__ == "__main__":
    sys.exit(main())
