"""Where does SACT raise the temperature? (Lin et al. 2018, sec. 4.2 / Fig. 2)

    python -m fairseq_vision_attn.analysis temperature-by-word --generate GEN --stats STATS \\
        --dict DATA_BIN/dict.TGT.txt [--function-words 50] [--min-count 20]

The paper reads its heatmaps as: the temperature rises on function words (prepositions,
pronouns, punctuation: no single source word to copy) and falls on content words. This
command measures that over a whole test set. Function words are approximated, language-
independently, by the ``--function-words`` most frequent types of the target dictionary
(closed-class words dominate any frequency list; for Japanese they are the particles, the
copula and inflection endings, and punctuation); every other type counts as a content word.
EOS (``</s>``) is reported apart.
"""

import argparse
import math
import sys
from collections import defaultdict

from .errors import one_line_errors
from .plots import read_sentences, read_stats


def read_frequent_types(dict_path, n):
    """The first ``n`` entries of a fairseq dictionary file (sorted by count, most frequent first)."""
    types = []
    with open(dict_path, encoding="utf-8") as handle:
        for line in handle:
            token = line.split(" ")[0]
            if token.startswith("madeupword"):
                continue
            types.append(token)
            if len(types) == n:
                break
    return set(types)


def _mean_and_se(values):
    n = len(values)
    if n == 0:
        return float("nan"), float("nan")
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var / n)


def temperature_by_word(sentences, stats, function_types):
    """Group every output token's temperature by word class.

    Args:
        sentences: id -> (source tokens, hypothesis tokens), from :func:`read_sentences`.
        stats: id -> --stats-output row with ``temperatures`` (one per hypothesis token + EOS).
        function_types: the set of target types counted as function words.

    Returns:
        (groups, per_type): ``{"function"|"content"|"</s>": [temperatures]}`` and
        ``{type: [temperatures]}``.
    """
    groups, per_type = defaultdict(list), defaultdict(list)
    for i, (_, hypothesis) in sentences.items():
        row = stats.get(i)
        if row is None or "temperatures" not in row:
            continue
        temps = row["temperatures"]
        tokens = hypothesis + ["</s>"]
        if len(temps) != len(tokens):
            raise SystemExit(f"sentence {i}: {len(temps)} temperatures for {len(tokens)} output tokens")
        for token, tau in zip(tokens, temps):
            group = "</s>" if token == "</s>" else ("function" if token in function_types else "content")
            groups[group].append(tau)
            per_type[token].append(tau)
    return groups, per_type


def format_report(groups, per_type, min_count=20, top=10):
    lines = ["class\ttokens\tmean temperature\tstd. error"]
    for group in ("function", "content", "</s>"):
        mean, se = _mean_and_se(groups.get(group, []))
        lines.append(f"{group}\t{len(groups.get(group, []))}\t{mean:.4f}\t{se:.4f}")
    ranked = sorted(
        ((sum(v) / len(v), t, len(v)) for t, v in per_type.items() if len(v) >= min_count), reverse=True
    )
    lines.append(f"highest mean temperature (types with >= {min_count} tokens):")
    lines += [f"  {t}\t{n}\t{m:.4f}" for m, t, n in ranked[:top]]
    lines.append("lowest mean temperature:")
    lines += [f"  {t}\t{n}\t{m:.4f}" for m, t, n in ranked[-top:][::-1]]
    return "\n".join(lines)


def get_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    words = sub.add_parser("temperature-by-word", help="mean SACT temperature on function vs content words")
    words.add_argument("--generate", required=True, help="fairseq-generate output")
    words.add_argument("--stats", required=True, help="its --stats-output (a model with a temperature)")
    words.add_argument("--dict", required=True, help="the target dictionary (dict.TGT.txt)")
    words.add_argument("--function-words", type=int, default=50, metavar="N")
    words.add_argument("--min-count", type=int, default=20, metavar="N")
    return parser


@one_line_errors
def main(argv=None):
    parser = get_parser()
    args = parser.parse_args(argv)
    groups, per_type = temperature_by_word(
        read_sentences(args.generate),
        read_stats(args.stats),
        read_frequent_types(args.dict, args.function_words),
    )
    if not groups:
        parser.error(f"{args.stats} has no 'temperatures': decode a model with --attention-temperature")
    print(format_report(groups, per_type, args.min_count))
    return 0


if __name__ == "__main__":
    sys.exit(main())
