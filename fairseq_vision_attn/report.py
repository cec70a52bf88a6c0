"""Score fairseq-generate outputs with sacrebleu and print one table, one row per system.

    python -m fairseq_vision_attn.report NAME=GEN_OUTPUT[:STATS_JSONL] ... [--tokenize none]
        [--common] [--paired-bs] [--curve NAME,NAME,... [--curve-latency DAL AL ...] [--curve-interval]]

GEN_OUTPUT is fairseq-generate's stdout (``H-``/``D-`` and ``T-`` lines). The optional
STATS_JSONL is its ``--stats-output``; each per-sentence number (``src_len``, ``AL`` ...) is
averaged over sentences and each per-token list (``window_sizes`` ...) over tokens.

``--common`` scores every system on the sentence ids all of them decoded (a decoding cut short
by a time limit holds the shortest sentences only) and adds a ``sentences`` column;
``--paired-bs`` also adds sacrebleu's paired bootstrap p-value (1,000 resamples, seed
SACREBLEU_SEED, default 12345) of each system's BLEU against the first system's.

``--curve wait-1,wait-3,wait-5`` names the systems of a baseline curve (MILk's claim is "at or
above the wait-k curve"): for every latency in ``--curve-latency`` (default DAL) a column
``to_curve_DAL`` gives each other system's BLEU minus the BLEU of the piecewise-linear curve
through the baselines' (latency, BLEU) points at that system's latency; ``-`` for the baselines
themselves and for a latency outside the curve's range (no extrapolation). ``--curve-interval``
adds that distance's 95% paired bootstrap interval (``to_curve_DAL_ci95_low`` and ``_high``; 1,000
resamples of the sentences every system decoded, seed SACREBLEU_SEED): each resample redraws every
system's BLEU and mean latency, so the line moves with the system; ``-`` where more than 2.5% of
the resamples put the system outside the line's range.
"""

import argparse
import json
import logging
import os
import sys
from collections import defaultdict

import sacrebleu

from .errors import VisionAttnError, one_line_errors
from .stats import NOT_AVERAGED


def parse_generate_output(path):
    """fairseq-generate's tagged lines: {tag: {sentence id: [fields after the tag]}}.

    ``S-3<TAB>src`` -> ``{"S": {3: ["src"]}}``; ``D-3<TAB>score<TAB>hyp`` -> ``{"D": {3: [score, hyp]}}``.
    """
    lines = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            fields = line.rstrip("\n").split("\t")
            tag, _, index = fields[0].partition("-")
            if index.isdigit():
                lines.setdefault(tag, {})[int(index)] = fields[1:]
    return lines


def read_generate_output(path, hypothesis_prefix="D", ids=None):
    """Return (hypotheses, references) ordered by sentence id (only ``ids`` when given)."""
    lines = parse_generate_output(path)
    hyps = {i: (f[1] if len(f) > 1 else "") for i, f in lines.get(hypothesis_prefix, {}).items()}
    refs = {i: (f[0] if f else "") for i, f in lines.get("T", {}).items()}
    ids = sorted(hyps) if ids is None else sorted(ids)
    if not ids:
        raise VisionAttnError(f"{path} holds no hypothesis ({hypothesis_prefix}- lines of fairseq-generate)")
    missing = [i for i in ids if i not in refs]
    if missing:
        raise SystemExit(f"{path}: no reference (T- line) for sentence ids {missing[:5]}")
    missing = [i for i in ids if i not in hyps]
    if missing:
        raise VisionAttnError(
            f"{path}: no hypothesis ({hypothesis_prefix}- line) for sentence ids {missing[:5]}"
        )
    return [hyps[i] for i in ids], [refs[i] for i in ids]


def decoded_ids(path, hypothesis_prefix="D"):
    """The sentence ids a fairseq-generate output holds a hypothesis for."""
    return set(parse_generate_output(path).get(hypothesis_prefix, {}))


def read_stats(stats_path):
    """id -> row of a --stats-output file."""
    rows = {}
    with open(stats_path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            try:
                row = json.loads(line)
                rows[row["id"]] = row
            except (ValueError, KeyError, TypeError):
                raise VisionAttnError(
                    f"{stats_path} line {line_number}: not a --stats-output row (a JSON object with an 'id')"
                ) from None
    return rows


def average_stats(path, ids=None):
    """Average each statistic of a --stats-output file (see module docstring), over the rows
    of ``ids`` only when given."""
    sums, counts = defaultdict(float), defaultdict(int)
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if ids is not None and row.get("id") not in ids:
                continue
            for key, value in row.items():
                if key == "id" or key in NOT_AVERAGED:
                    continue
                if isinstance(value, list):
                    sums[key] += sum(value)
                    counts[key] += len(value)
                elif isinstance(value, (int, float)):
                    sums[key] += value
                    counts[key] += 1
    return {key: sums[key] / counts[key] for key in sums if counts[key]}


def score(gen_path, tokenize="none", ids=None):
    hyps, refs = read_generate_output(gen_path, ids=ids)
    return sacrebleu.corpus_bleu(hyps, [refs], tokenize=tokenize).score


def paired_bootstrap(gen_paths, tokenize="none", ids=None, samples=1000):
    """sacrebleu's paired bootstrap of each output's BLEU against the first one's, on ``ids``
    (default: the ids all outputs decoded; the references are the first output's): a list of
    p-values, None for the first."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    logging.getLogger("sacrebleu").setLevel(logging.WARNING)  # not one INFO line per system
    if ids is None:
        ids = set.intersection(*(decoded_ids(path) for path in gen_paths))
    outputs = [read_generate_output(path, ids=ids) for path in gen_paths]
    named = [(str(i), hyps) for i, (hyps, _) in enumerate(outputs)]
    metrics = {"BLEU": BLEU(tokenize=tokenize)}
    test = PairedTest(named, metrics, [outputs[0][1]], test_type="bs", n_samples=samples)
    _, results = test()
    return [None] + [result.p_value for result in results["BLEU"][1:]]


def ribes(gen_path, ids=None):
    """Corpus RIBES (Isozaki et al. 2010; Shu & Nakayama report it beside BLEU on En-Ja) with
    nltk's implementation (alpha 0.25, beta 0.10), on whitespace tokens of the same hypotheses
    and references BLEU scores: the mean of the sentences' RIBES, 0 for a sentence that shares
    no word with its reference."""
    try:
        from nltk.translate.ribes_score import sentence_ribes
    except ImportError:
        raise VisionAttnError("--ribes needs nltk: pip install nltk (or pip install -e .[test])") from None
    hyps, refs = read_generate_output(gen_path, ids=ids)
    total = 0.0
    for hyp, ref in zip(hyps, refs):
        try:
            total += sentence_ribes([ref.split()], hyp.split())
        except ZeroDivisionError:  # no word in common (or an empty hypothesis)
            pass
    return 100.0 * total / max(len(hyps), 1)


def curve_weights(points, latency):
    """The weights, one per point of ``points`` ((latency, BLEU) pairs) and summing to 1, with which
    the piecewise-linear curve through them interpolates at ``latency``: the curve's BLEU there is
    the sum of weight x BLEU. None outside the points' latency range; at two points of one latency
    all the weight goes to the one sorted first (the lower BLEU)."""
    order = sorted(range(len(points)), key=lambda index: points[index])
    if not points[order[0]][0] <= latency <= points[order[-1]][0]:
        return None
    for first, second in zip(order, order[1:]):
        (x0, _), (x1, _) = points[first], points[second]
        if x0 <= latency <= x1:
            share = 0.0 if x1 == x0 else (latency - x0) / (x1 - x0)
            weights = [0.0] * len(points)
            weights[first], weights[second] = 1.0 - share, share
            return weights
    raise AssertionError("unreachable: the latency lies between two neighbouring points")


def weighted_bleu(weights, points):
    """The sum of weight x BLEU over ``points`` ((latency, BLEU) pairs): with ``curve_weights``'
    weights, the curve's BLEU at their latency."""
    return sum(w * bleu for w, (_, bleu) in zip(weights, points))


def curve_bleu(points, latency):
    """BLEU of the piecewise-linear curve through ``points`` ((latency, BLEU) pairs) at
    ``latency``; None outside the points' latency range (see ``curve_weights``)."""
    weights = curve_weights(points, latency)
    return None if weights is None else weighted_bleu(weights, points)


def sentence_bleu_statistics(gen_path, tokenize="none", ids=None):
    """BLEU's sufficient statistics of each sentence of ``ids`` (in id order): an n x 10 array of
    the matches of n-gram orders 1-4, their totals, the hypothesis and the reference length.
    Corpus BLEU is ``bleu_of_statistics`` of the column sums."""
    import numpy as np
    from sacrebleu.metrics import BLEU

    metric = BLEU(tokenize=tokenize, effective_order=True)  # the order changes sentence scores only
    rows = []
    for hyp, ref in zip(*read_generate_output(gen_path, ids=ids)):
        sentence = metric.sentence_score(hyp, [ref])
        rows.append([*sentence.counts, *sentence.totals, sentence.sys_len, sentence.ref_len])
    return np.array(rows, dtype=np.int64)


def bleu_of_statistics(sums):
    """Corpus BLEU (sacrebleu's defaults: exponential smoothing) from summed sentence statistics."""
    from sacrebleu.metrics import BLEU

    sums = [int(value) for value in sums]
    return BLEU.compute_bleu(sums[:4], sums[4:8], sums[8], sums[9], smooth_method="exp").score


def bootstrap_draws(sentences, samples=1000):
    """A samples x sentences matrix: how often each resample draws each sentence (sentences drawn
    with replacement, as many as there are), seeded by SACREBLEU_SEED (default 12345) as sacrebleu's
    paired bootstrap is."""
    import numpy as np

    seed = os.environ.get("SACREBLEU_SEED", "12345")
    rng = np.random.default_rng(None if seed.lower() == "none" else int(seed))
    return rng.multinomial(sentences, [1.0 / sentences] * sentences, size=samples)


def sentence_latency(stats_path, metric, ids):
    """``metric`` of each sentence of ``ids`` (in id order) from a --stats-output file."""
    rows = read_stats(stats_path)
    missing = [i for i in sorted(ids) if i not in rows]
    if missing:
        raise VisionAttnError(
            f"{stats_path}: no row for sentence ids {missing[:5]}; give that decoding's --stats-output"
        )
    if any(metric not in rows[i] for i in ids):
        raise VisionAttnError(f"{stats_path} has no {metric} for every sentence")
    return [rows[i][metric] for i in sorted(ids)]


def resampled_bleu(systems, ids, draws, tokenize="none"):
    """{name: BLEU of each resample} for every system of ``systems`` ([(name, gen_path, ...)]):
    ``draws``, the resamples of ``ids`` as a matrix of draw counts (``bootstrap_draws``)."""
    return {
        name: [bleu_of_statistics(row) for row in draws @ sentence_bleu_statistics(gen_path, tokenize, ids)]
        for name, gen_path, *_ in systems
    }


def check_interval_stats(systems):
    """Every system of ``systems`` ([(name, gen_path, stats_path)]) has its --stats-output."""
    missing = [name for name, _, stats_path in systems if not stats_path]
    if missing:
        raise VisionAttnError(f"--curve-interval: {missing[0]} has no STATS_JSONL: give it as NAME=GEN:STATS")


def resampled_curve_distances(systems, baselines, metric, ids, tokenize="none", draws=None, bleu=None):
    """{name: array of BLEU minus the baselines' line at the system's mean ``metric``, one per
    resample (NaN outside the line's range)} for every system of ``systems`` ([(name, gen_path,
    stats_path)]) outside ``baselines``. ``draws``: the resamples of ``ids`` as a matrix of draw
    counts (``bootstrap_draws``), the same for every system (paired); in each resample every
    system's BLEU and mean latency, the baselines' included, are those of the drawn sentences.
    ``bleu``: ``resampled_bleu`` of these draws, when already computed (for another metric)."""
    import numpy as np

    names = [name for name, _, _ in systems]
    check_curve_names(baselines, names)
    check_interval_stats(systems)
    draws = bootstrap_draws(len(ids)) if draws is None else np.asarray(draws)
    bleu = resampled_bleu(systems, ids, draws, tokenize) if bleu is None else bleu
    latency = {}
    for name, _, stats_path in systems:
        lags = np.array(sentence_latency(stats_path, metric, ids), dtype=float)
        latency[name] = draws @ lags / draws.sum(1)
    distances = {}
    for name in names:
        if name in baselines:
            continue
        column = []
        for b in range(len(draws)):
            on_curve = curve_bleu([(latency[base][b], bleu[base][b]) for base in baselines], latency[name][b])
            column.append(float("nan") if on_curve is None else bleu[name][b] - on_curve)
        distances[name] = np.array(column)
    return distances


def percentile_interval(values, outside=0.025):
    """The 2.5th and 97.5th percentiles of ``values``, NaNs left out; None when more than
    ``outside`` of them are NaN (the line does not reach the system often enough to say)."""
    import numpy as np

    values = np.asarray(values, dtype=float)
    if np.isnan(values).mean() > outside:
        return None
    low, high = np.percentile(values[~np.isnan(values)], [2.5, 97.5])
    return float(low), float(high)


def _cell(value, column):
    if value is None:
        return "-"
    if column == "sentences":
        return str(value)
    return f"{value:.3f}" if column == "p" else f"{value:.2f}"


def format_table(rows, columns):
    header = ["system", "BLEU"] + columns
    lines = ["\t".join(header)]
    for name, bleu, stats in rows:
        cells = [name, f"{bleu:.2f}"] + [_cell(stats.get(c), c) for c in columns]
        lines.append("\t".join(cells))
    return "\n".join(lines)


def get_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "systems",
        nargs="+",
        metavar="NAME=GEN[:STATS]",
        help="NAME may contain '=' (split at the last one); the paths may not",
    )
    parser.add_argument("--tokenize", default="none", help="sacrebleu tokenizer (default: none)")
    parser.add_argument(
        "--ribes",
        action="store_true",
        help="add a RIBES column (x 100; nltk's implementation; needs nltk)",
    )
    parser.add_argument(
        "--common",
        action="store_true",
        help="score every system on the sentence ids all of them decoded; add a sentences column",
    )
    parser.add_argument(
        "--paired-bs",
        action="store_true",
        help="add the paired bootstrap p-value of each system's BLEU against the first "
        "system's (sacrebleu, 1,000 resamples; implies --common)",
    )
    parser.add_argument(
        "--curve",
        metavar="NAME,NAME[,...]",
        help="the baseline systems of a latency/quality curve (at least two, each with its "
        "STATS_JSONL): add each other system's BLEU distance to it (see --curve-latency)",
    )
    parser.add_argument(
        "--curve-latency",
        nargs="+",
        default=["DAL"],
        metavar="METRIC",
        help="latency statistics the curve is drawn in, one to_curve_METRIC column each "
        "(default: DAL; e.g. DAL AL LAAL)",
    )
    parser.add_argument(
        "--curve-interval",
        action="store_true",
        help="add the 95%% paired bootstrap interval of each distance to the curve "
        "(to_curve_METRIC_ci95_low, _high; 1,000 resamples; implies --common)",
    )
    parser.add_argument(
        "--points",
        action="store_true",
        help="print 'NAME<TAB>window<TAB>BLEU' lines (for plots tradeoff) instead of a table",
    )
    return parser


def check_curve_names(baselines, systems):
    """--curve's names: each one of ``systems``, at least two different ones."""
    unknown = [name for name in baselines if name not in systems]
    if unknown:
        raise VisionAttnError(f"--curve: no system named {', '.join(unknown)}; systems: {', '.join(systems)}")
    if len(set(baselines)) < 2:
        raise VisionAttnError("--curve: a curve needs at least two baseline systems")


def add_curve_distances(rows, baselines, metrics):
    """Add ``to_curve_METRIC`` to each row's statistics (see the module docstring); return the
    new column names."""
    by_name = {name: (bleu, stats) for name, bleu, stats in rows}
    check_curve_names(baselines, list(by_name))
    columns = []
    for metric in metrics:
        missing = [name for name in baselines if metric not in by_name[name][1]]
        if missing:
            raise VisionAttnError(
                f"--curve: {', '.join(missing)} has no {metric} (give its STATS_JSONL; "
                f"statistics: {', '.join(sorted(by_name[missing[0]][1])) or 'none'})"
            )
        points = [(by_name[name][1][metric], by_name[name][0]) for name in baselines]
        column = f"to_curve_{metric}"
        for name, bleu, stats in rows:
            on_curve = None if name in baselines or metric not in stats else curve_bleu(points, stats[metric])
            stats[column] = None if on_curve is None else bleu - on_curve
        columns.append(column)
    return columns


def add_curve_intervals(rows, systems, baselines, metrics, ids, tokenize):
    """Add ``to_curve_METRIC_ci95_low`` and ``_high`` (see the module docstring) to each row's
    statistics, on the sentence ``ids``; return the new column names."""
    check_curve_names(baselines, [name for name, _, _ in systems])
    check_interval_stats(systems)
    draws = bootstrap_draws(len(ids))
    bleu = resampled_bleu(systems, ids, draws, tokenize)  # the same for every metric
    columns = []
    for metric in metrics:
        distances = resampled_curve_distances(systems, baselines, metric, ids, tokenize, draws, bleu)
        low, high = f"to_curve_{metric}_ci95_low", f"to_curve_{metric}_ci95_high"
        for name, _, stats in rows:
            interval = percentile_interval(distances[name]) if name in distances else None
            stats[low], stats[high] = interval or (None, None)
        columns += [low, high]
    return columns


@one_line_errors
def main(argv=None):
    parser = get_parser()
    args = parser.parse_args(argv)
    systems = []
    for spec in args.systems:
        name, sep, paths = spec.rpartition("=")  # NAME may hold '=', the paths may not
        if not sep:
            parser.error(f"expected NAME=GEN_OUTPUT[:STATS_JSONL], got {spec!r}")
        gen_path, _, stats_path = paths.partition(":")
        systems.append((name, gen_path, stats_path))
    if args.curve_interval and not args.curve:
        raise VisionAttnError("--curve-interval needs --curve NAME,NAME,...: the baselines of the line")
    ids, columns = None, []
    if args.common or args.paired_bs or args.curve_interval:
        ids = set.intersection(*(decoded_ids(gen_path) for _, gen_path, _ in systems))
        if not ids:
            raise VisionAttnError("--common: no sentence id is decoded by every system")
        columns.append("sentences")
    p_values = [None] * len(systems)
    if args.paired_bs:
        if len(systems) < 2:
            parser.error("--paired-bs compares systems with the first one: give at least two")
        p_values = paired_bootstrap([gen_path for _, gen_path, _ in systems], args.tokenize, ids)
        columns.append("p")
    rows = []
    for (name, gen_path, stats_path), p_value in zip(systems, p_values):
        stats = average_stats(stats_path, ids) if stats_path else {}
        if args.ribes:
            stats = {"RIBES": ribes(gen_path, ids), **stats}
        if args.paired_bs:
            stats = {"p": p_value, **stats}
        if ids is not None:
            stats = {"sentences": len(ids), **stats}
        columns += [c for c in stats if c not in columns]
        rows.append((name, score(gen_path, args.tokenize, ids), stats))
    if args.curve:
        columns += add_curve_distances(rows, args.curve.split(","), args.curve_latency)
    if args.curve_interval:
        baselines = args.curve.split(",")
        columns += add_curve_intervals(rows, systems, baselines, args.curve_latency, ids, args.tokenize)
    if args.points:
        for name, bleu, stats in rows:
            print(f"{name}\t{stats.get('window_sizes', float('nan')):.3f}\t{bleu:.2f}")
    else:
        print(format_table(rows, columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
