"""Score fairseq-generate outputs with sacrebleu and print one table, one row per system.

    python -m fairseq_vision_attn.report NAME=GEN_OUTPUT[:STATS_JSONL] ... [--tokenize none]

GEN_OUTPUT is fairseq-generate's stdout (``H-``/``D-`` and ``T-`` lines). The optional
STATS_JSONL is its ``--stats-output``; each per-sentence number (``src_len``, ``AL`` ...) is
averaged over sentences and each per-token list (``window_sizes`` ...) over tokens.
"""

import argparse
import json
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


def read_generate_output(path, hypothesis_prefix="D"):
    """Return (hypotheses, references) ordered by sentence id."""
    lines = parse_generate_output(path)
    hyps = {i: (f[1] if len(f) > 1 else "") for i, f in lines.get(hypothesis_prefix, {}).items()}
    refs = {i: (f[0] if f else "") for i, f in lines.get("T", {}).items()}
    ids = sorted(hyps)
    missing = [i for i in ids if i not in refs]
    if missing:
        raise SystemExit(f"{path}: no reference (T- line) for sentence ids {missing[:5]}")
    return [hyps[i] for i in ids], [refs[i] for i in ids]


def average_stats(path):
    """Average each statistic of a --stats-output file (see module docstring)."""
    sums, counts = defaultdict(float), defaultdict(int)
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
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


def score(gen_path, tokenize="none"):
    hyps, refs = read_generate_output(gen_path)
    return sacrebleu.corpus_bleu(hyps, [refs], tokenize=tokenize).score


def ribes(gen_path):
    """Corpus RIBES (Isozaki et al. 2010; Shu & Nakayama report it beside BLEU on En-Ja) with
    nltk's implementation (alpha 0.25, beta 0.10), on whitespace tokens of the same hypotheses
    and references BLEU scores: the mean of the sentences' RIBES, 0 for a sentence that shares
    no word with its reference."""
    try:
        from nltk.translate.ribes_score import sentence_ribes
    except ImportError:
        raise VisionAttnError("--ribes needs nltk: pip install nltk (or pip install -e .[test])") from None
    hyps, refs = read_generate_output(gen_path)
    total = 0.0
    for hyp, ref in zip(hyps, refs):
        try:
            total += sentence_ribes([ref.split()], hyp.split())
        except ZeroDivisionError:  # no word in common (or an empty hypothesis)
            pass
    return 100.0 * total / max(len(hyps), 1)


def format_table(rows, columns):
    header = ["system", "BLEU"] + columns
    lines = ["\t".join(header)]
    for name, bleu, stats in rows:
        cells = [name, f"{bleu:.2f}"] + [f"{stats[c]:.2f}" if c in stats else "-" for c in columns]
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
        "--points",
        action="store_true",
        help="print 'NAME<TAB>window<TAB>BLEU' lines (for plots tradeoff) instead of a table",
    )
    return parser


@one_line_errors
def main(argv=None):
    parser = get_parser()
    args = parser.parse_args(argv)
    rows, columns = [], []
    for spec in args.systems:
        name, sep, paths = spec.rpartition("=")  # NAME may hold '=', the paths may not
        if not sep:
            parser.error(f"expected NAME=GEN_OUTPUT[:STATS_JSONL], got {spec!r}")
        gen_path, _, stats_path = paths.partition(":")
        stats = average_stats(stats_path) if stats_path else {}
        if args.ribes:
            stats = {"RIBES": ribes(gen_path), **stats}
        columns += [c for c in stats if c not in columns]
        rows.append((name, score(gen_path, args.tokenize), stats))
    if args.points:
        for name, bleu, stats in rows:
            print(f"{name}\t{stats.get('window_sizes', float('nan')):.3f}\t{bleu:.2f}")
    else:
        print(format_table(rows, columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
