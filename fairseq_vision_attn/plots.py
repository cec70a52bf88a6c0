"""Plots of the papers' figures from fairseq-generate outputs (matplotlib, written to files).

python -m fairseq_vision_attn.plots span --generate GEN --stats STATS --ids 3 7 --out-dir DIR
    vision span per decoding step (Shu & Nakayama Fig. 1b / Fig. 4)
python -m fairseq_vision_attn.plots tradeoff --points TSV --out FILE
    window size against BLEU (Shu & Nakayama Fig. 3); TSV columns: label, window, BLEU
python -m fairseq_vision_attn.plots temperature --generate GEN --stats STATS --ids 3 7 --out-dir DIR
    attention temperature per output token (Lin et al. Fig. 2 heatmap)
python -m fairseq_vision_attn.plots fixed-temperature --table TSV --out FILE
    BLEU of models trained with fixed temperatures, SACT as a line (Lin et al. Fig. 1); TSV: the
    report table, systems named NAME_T<temperature> (fixed), *sact* and one without either (T = 1)
python -m fairseq_vision_attn.plots curves --logs NAME=TRAIN_LOG ... --out FILE
    validation BLEU per epoch from fairseq-train logs run with --eval-bleu (Britz et al. Fig. 3a)
python -m fairseq_vision_attn.plots memory-alignment --path CKPT --data-bin DIR --ids 0 1 --out-dir DIR
    effective alignment alpha . beta of memory attention, teacher-forced on the references of
    the --subset split (Britz et al. Figs. 6-8); any attention's weights for other models
python -m fairseq_vision_attn.plots latency --points TSV --out FILE
    BLEU against DAL, AL and AP, one curve per family (MILk paper Figs. 2-3); TSV: the report
    table (system, BLEU, AL, AP, DAL ...), family = the system name up to its first '_', less a
    number it ends in (waitk_3, waitk3_s1, wait-3: waitk, waitk, wait), or a family column;
    family "offline" draws a horizontal line at its BLEU; --seed-means draws the rows NAME_s1,
    NAME_s2 ... as one point at their mean BLEU and latency
python -m fairseq_vision_attn.plots streaming-attention --path CKPT --data-bin DIR --ids 0 1 --out-dir DIR
    a streaming model's attention while it decodes simultaneously, the hard head outlined
    (MILk paper Figs. 4-5); --monotonic-stop {energy,cumulative} as fairseq-generate's
"""

import argparse
import csv
import logging
import math
import os
import re
import statistics
import sys
import textwrap

# fairseq configures the root logger at DEBUG level; matplotlib's font search is not news
logging.getLogger("matplotlib").setLevel(logging.WARNING)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import font_manager  # noqa: E402
from matplotlib.ft2font import FT2Font  # noqa: E402
from matplotlib.path import Path  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from .choices import STOP_RULES  # noqa: E402
from .errors import VisionAttnError, number, one_line_errors  # noqa: E402
from .report import parse_generate_output, read_stats  # noqa: E402
from .seeds import split_seed  # noqa: E402

CJK_FONTS = ("Noto Sans CJK JP", "Noto Sans JP", "IPAexGothic", "IPAGothic", "TakaoGothic")


def _font_codepoints():
    """The code points the plot fonts can draw; adds an installed CJK font to the fallback list."""
    installed = {f.name for f in font_manager.fontManager.ttflist}
    cjk = [name for name in CJK_FONTS if name in installed]
    if cjk:
        plt.rcParams["font.family"] = ["DejaVu Sans"] + cjk[:1]
    codepoints = set()
    for name in plt.rcParams["font.family"]:
        path = font_manager.findfont(font_manager.FontProperties(family=[name]), fallback_to_default=True)
        codepoints.update(FT2Font(path).get_charmap())
    return codepoints


def drawable_labels(tokens, prefix):
    """Tokens as tick labels; a token the installed fonts cannot draw becomes PREFIX<index>
    (e.g. Japanese without a CJK font) instead of a row of empty boxes."""
    codepoints = _font_codepoints()
    drawable = [all(ord(c) in codepoints for c in tok) for tok in tokens]
    return [tok if ok else f"{prefix}{i + 1}" for i, (tok, ok) in enumerate(zip(tokens, drawable))]


def read_sentences(gen_path):
    """id -> (source tokens, hypothesis tokens) from fairseq-generate's S- and D- lines."""
    lines = parse_generate_output(gen_path)
    src, hyp = lines.get("S", {}), lines.get("D", {})
    return {i: (src[i][0].split(), f[1].split() if len(f) > 1 else []) for i, f in hyp.items() if i in src}


def units_mismatch(row, source, hypothesis):
    """Why a --stats-output row and its sentence's tokens disagree (None when they agree): the
    statistics have one entry per decoding step (the hypothesis's tokens and EOS) and count the
    source's tokens and EOS, so text with BPE removed or detokenized has fewer tokens."""
    steps = row.get("window_sizes") or row.get("temperatures")
    if steps is not None and len(steps) != len(hypothesis) + 1:
        return f"{len(steps)} decoding steps in the statistics, {len(hypothesis)} output tokens + EOS"
    if "src_len" in row and row["src_len"] != len(source) + 1:
        return f"a source of {row['src_len']} positions in the statistics, {len(source)} tokens + EOS"
    return None


def read_tsv(path, numeric):
    """Rows of a TSV (``#`` comments skipped); ``numeric`` column indices must hold numbers. A
    first row whose numeric columns are not numbers is a header and skipped."""
    with open(path, encoding="utf-8") as handle:
        rows = [
            (n, r)
            for n, r in enumerate(csv.reader(handle, delimiter="\t"), 1)
            if r and not r[0].startswith("#")
        ]
    out = []
    for k, (line_number, row) in enumerate(rows):
        if len(row) <= max(numeric):
            raise VisionAttnError(
                f"{path} line {line_number}: {len(row)} columns, expected at least {max(numeric) + 1}"
            )
        try:
            values = [float(row[i]) for i in numeric]
        except ValueError:
            if k == 0:
                continue  # a header row
            values = [number(row[i], f"{path} line {line_number}") for i in numeric]
        out.append((row, values))
    if not out:
        raise VisionAttnError(f"{path}: no rows")
    return out


MAX_COLUMNS = 80  # source positions drawn in one figure; longer sources are cropped or thinned
MAX_INCHES = 20.0  # the largest side of a figure (2,400 pixels at 120 dpi)


def _crop(lo, hi, length, limit=MAX_COLUMNS):
    """[first, last) of at most ``limit`` columns holding [lo, hi] as well as it can."""
    lo, hi = max(0, int(math.floor(lo))), min(length, int(math.ceil(hi)) + 1)
    if length <= limit:
        return 0, length
    if hi - lo >= limit:
        return lo, lo + limit
    start = max(0, min(length - limit, (lo + hi) // 2 - limit // 2))
    return start, start + limit


def _title(ax, text, width_inches, loc="center"):
    """A title wrapped to ``width_inches`` (about 11 characters per inch at 9 pt)."""
    ax.set_title(textwrap.fill(text, max(30, int(width_inches * 11))), fontsize=9, loc=loc)


def plot_vision_span(row, source, hypothesis, path):
    """One row per target token: the scored source span (window) and the focus p_t. Sources
    longer than MAX_COLUMNS are cropped to the positions the windows and foci cover."""
    sizes, starts = row["window_sizes"], row.get("window_starts") or [1.0] * len(row["window_sizes"])
    targets = drawable_labels(hypothesis, "y") + ["</s>"]
    sources = drawable_labels(source, "x") + ["</s>"]
    covered = [s - 1 for s in starts] + [s - 2 + n for s, n in zip(starts, sizes)]
    covered += [p - 1 for p in row.get("focus", [])]
    first, last = _crop(min(covered, default=0), max(covered, default=0), len(sources))
    width = min(MAX_INCHES, 0.45 * (last - first) + 2.5)
    height = min(MAX_INCHES, 0.35 * len(targets) + 1.8)
    fig, ax = plt.subplots(figsize=(width, height))
    for t, (start, size) in enumerate(zip(starts, sizes)):
        ax.barh(
            t, size, left=start - 1.5, height=0.7, color="tab:blue", alpha=0.35,
            label="positions scored (window)" if t == 0 else None,
        )  # fmt: skip
    if "focus" in row:
        ax.plot(
            [p - 1 for p in row["focus"]],
            range(len(row["focus"])),
            "o",
            color="tab:red",
            ms=3,
            label="focus p_t",
        )
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, fontsize=7, frameon=False)
    ax.set_xticks(range(first, last))
    ax.set_xticklabels(sources[first:last], rotation=90, fontsize=8)
    ax.set_yticks(range(len(targets)))
    ax.set_yticklabels(targets, fontsize=8)
    ax.set_xlim(first - 0.5, last - 0.5)
    ax.invert_yaxis()
    shown = "" if (first, last) == (0, len(sources)) else f", positions {first + 1}-{last} shown"
    ax.set_xlabel(f"source token (position 1-{len(sources)}{shown})", fontsize=8)
    ax.set_ylabel("output token (decoding step)", fontsize=8)
    _title(
        ax,
        f"vision span, sentence {row['id']}: mean window {sum(sizes) / len(sizes):.1f} of {row['src_len']}",
        width * 0.6,  # the legend takes the right of the line above the axes
        loc="left",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_tradeoff(points, path, title="window size vs BLEU"):
    """points: [(label, window, bleu)] -> a line plot (Shu & Nakayama Fig. 3)."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([p[1] for p in points], [p[2] for p in points], "o-")
    ax.set_xlabel("average window size (source positions scored per step)")
    ax.set_ylabel("BLEU")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.margins(x=0.12, y=0.1)  # room for the labels of the outermost points
    fig.tight_layout()
    place_labels(ax, [(window, bleu, label) for label, window, bleu in points], fontsize=7)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_temperatures(row, hypothesis, path):
    """One cell per output token, coloured by log tau_t (Lin et al. Fig. 2)."""
    temps = row["temperatures"]
    tokens = drawable_labels(hypothesis, "y") + ["</s>"]
    logs = [math.log(t) for t in temps]
    bound = max(abs(v) for v in logs) or 1.0
    fig, ax = plt.subplots(figsize=(0.55 * len(tokens) + 1.5, 1.9))
    image = ax.imshow([logs], cmap="coolwarm", vmin=-bound, vmax=bound, aspect="auto")
    ax.set_xticks(range(len(tokens)))
    ax.set_xticklabels(tokens, rotation=90, fontsize=8)
    ax.set_yticks([])
    for t, tau in enumerate(temps):
        ax.text(t, 0, f"{tau:.2f}", ha="center", va="center", fontsize=6)
    fig.colorbar(image, ax=ax, fraction=0.03, pad=0.02).set_label("log tau", fontsize=7)
    ax.set_title(f"attention temperature, sentence {row['id']} (red: softer, blue: sharper)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def fixed_temperature_points(table_rows):
    """Report-table rows -> ([(T, BLEU)] of the fixed-temperature models incl. T = 1, SACT's BLEU)."""
    fixed, sact = [], None
    for row in table_rows:
        name, bleu = row[0], float(row[1])
        match = re.search(r"_T([0-9.]+)$", name)
        if match:
            fixed.append((float(match.group(1)), bleu))
        elif "sact" in name:
            sact = bleu
        else:
            fixed.append((1.0, bleu))
    return sorted(fixed), sact


def plot_fixed_temperature(fixed, sact, path):
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([t for t, _ in fixed], [b for _, b in fixed], "o-", label="fixed temperature (w/o SACT)")
    if sact is not None:
        ax.axhline(sact, color="tab:red", label="SACT")
    ax.set_xlabel("temperature")
    ax.set_ylabel("BLEU")
    ax.set_title("models trained with fixed temperatures against SACT (Lin et al. Fig. 1)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def read_bleu_curve(log_path):
    """[(epoch, valid BLEU)] from a fairseq-train log run with --eval-bleu."""
    points = []
    pattern = re.compile(r"\| valid \| epoch (\d+) .*?\| bleu ([0-9.]+)")
    with open(log_path, encoding="utf-8") as handle:
        for line in handle:
            match = pattern.search(line)
            if match:
                points.append((int(match.group(1)), float(match.group(2))))
    return points


def plot_curves(curves, path, title):
    """One line per (name, [(epoch, BLEU)]); a log without BLEU points is left out with a
    warning (no empty legend entry); none at all is an error."""
    from matplotlib.ticker import MaxNLocator

    empty = [name for name, points in curves if not points]
    curves = [(name, points) for name, points in curves if points]
    if not curves:
        raise SystemExit("no validation BLEU in any log: train with --eval-bleu")
    for name in empty:
        print(f"plots curves: warning: no validation BLEU in the log of {name}; left out", file=sys.stderr)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, points in curves:
        ax.plot([p[0] for p in points], [p[1] for p in points], "o-", ms=3, label=name)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation BLEU")
    _title(ax, title, 6)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _thin_ticks(ax, axis, labels, fontsize=7):
    """Every label when they fit (MAX_COLUMNS), else every k-th position's number."""
    step = max(1, math.ceil(len(labels) / MAX_COLUMNS))
    ticks = list(range(0, len(labels), step))
    shown = labels if step == 1 else [str(i + 1) for i in ticks]
    getattr(ax, f"set_{axis}ticks")(ticks)
    getattr(ax, f"set_{axis}ticklabels")(shown, rotation=90 if axis == "x" else 0, fontsize=fontsize)


def plot_alignment(weights, source, target, path, title, delays=None, weight_label="attention weight"):
    """weights: target x source matrix (rows: output steps); ``delays`` (1-indexed head
    positions, one per target token) outlines a streaming model's hard head. Long sentences keep
    every cell but show every k-th position's number and a figure of at most MAX_INCHES."""
    width = min(MAX_INCHES, 0.3 * len(source) + 3)
    height = min(MAX_INCHES, 0.3 * len(target) + 2)
    fig, ax = plt.subplots(figsize=(width, height))
    image = ax.imshow(weights, cmap="Greys", aspect="auto", vmin=0, interpolation="nearest")
    if delays is not None:
        heads = [d - 1 for d in delays]
        ax.plot(heads, range(len(heads)), "-", color="tab:red", lw=1)
        ax.scatter(
            heads, range(len(heads)), s=60, facecolors="none", edgecolors="tab:red", linewidths=1.5,
            label="hard head (last source token read)",
        )  # fmt: skip
        ax.legend(loc="upper right", fontsize=7)
    step_x = "" if len(source) <= MAX_COLUMNS else " (numbered)"
    step_y = "" if len(target) <= MAX_COLUMNS else " (numbered)"
    _thin_ticks(ax, "x", drawable_labels(source, "x"))
    _thin_ticks(ax, "y", drawable_labels(target, "y"))
    ax.set_xlabel(f"source token{step_x}", fontsize=8)
    ax.set_ylabel(f"output token{step_y}", fontsize=8)
    fig.colorbar(image, ax=ax, fraction=0.03, pad=0.02).set_label(weight_label, fontsize=7)
    _title(ax, title, width)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def load_for_plots(checkpoint, data_bin, subset):
    """(model in eval mode, task, dataset of ``subset``). Imports fairseq lazily: the other
    plots do not need it."""
    from fairseq import checkpoint_utils

    from . import register

    register()  # this command starts without the models (the package docstring)

    if not os.path.isfile(checkpoint):
        raise SystemExit(f"--path: no checkpoint at {checkpoint}")
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [checkpoint], arg_overrides={"data": data_bin}
    )
    from .models.lstm_attention import VisionAttnLSTMModel

    if not isinstance(models[0], VisionAttnLSTMModel):
        raise SystemExit(
            f"--path {checkpoint}: a {type(models[0]).__name__} checkpoint; these plots need one "
            "trained with this package's archs (lstm_global, lstm_memory, lstm_milk, ...)"
        )
    task.load_dataset(subset)
    return models[0].eval(), task, task.dataset(subset)


def one_sentence(dataset, i, subset):
    """A batch of sentence ``i`` alone, or a clear exit when there is no such sentence."""
    if not 0 <= i < len(dataset):
        raise SystemExit(f"sentence id {i} is not in {subset} ({len(dataset)} sentences)")
    return dataset.collater([dataset[i]])


def memory_alignments(checkpoint, data_bin, ids, out_dir, subset="valid"):
    """Teacher-force the references of ``ids`` through a checkpoint and plot its attention weights
    (for memory attention: alpha . beta)."""
    import torch

    model, task, dataset = load_for_plots(checkpoint, data_bin, subset)
    attention = getattr(model.decoder.attention, "mechanism", model.decoder.attention)
    if hasattr(attention, "expose_alignment"):  # off when the task built a generator (--eval-bleu)
        attention.expose_alignment = True
    os.makedirs(out_dir, exist_ok=True)
    for i in ids:
        sample = one_sentence(dataset, i, subset)
        with torch.no_grad():
            _, extra = model(**sample["net_input"])
        attn = extra["attn"][0]
        if attn is None:
            raise SystemExit(f"{checkpoint}: this model exposes no attention weights")
        src = task.source_dictionary.string(dataset[i]["source"]).split() + ["</s>"]
        tgt = task.target_dictionary.string(dataset[i]["target"]).split() + ["</s>"]
        weights = attn[0, : len(tgt), : len(src)].numpy()
        name = getattr(model.decoder.attention, "registry_name", "attention")
        memory = name == "memory"
        label = "alpha . beta (effective alignment)" if memory else "attention weight"
        title = f"{name} attention, {subset} sentence {i} (teacher-forced on the reference)"
        plot_alignment(
            weights, src, tgt, os.path.join(out_dir, f"alignment_{i}.png"), title, weight_label=label
        )


LATENCY_METRICS = ("DAL", "LAAL", "AL", "AP", "ATD")


def read_latency_points(path, metrics=None):
    """(system, family, BLEU, {metric: value}) per row of a TSV with columns system, BLEU and the
    latency metrics (the report table; other columns are ignored) and optionally family; without
    a family column the family is :func:`default_family` of the system name (``waitk_3`` and
    ``waitk3_s1`` -> ``waitk``). ``metrics``: the columns to read, each required;
    None = those of LATENCY_METRICS the table has.
    """
    with open(path, encoding="utf-8") as handle:
        rows = [r for r in csv.reader(handle, delimiter="\t") if r and not r[0].startswith("#")]
    header, rows = rows[0], rows[1:]
    wanted = [m for m in LATENCY_METRICS if m in header] if metrics is None else list(metrics)
    missing = [name for name in ("system", "BLEU", *(wanted or ["DAL"])) if name not in header]
    if missing:
        raise SystemExit(
            f"{path}: no column {', '.join(missing)} (decode streaming models with --stats-output)"
        )
    col = {name: header.index(name) for name in header}
    points = []
    for line, r in enumerate(rows, 2):
        if len(r) < len(header):
            raise VisionAttnError(f"{path} line {line}: {len(r)} columns where the header has {len(header)}")
        system = r[col["system"]]
        family = r[col["family"]] if "family" in col else default_family(system)
        where = f"{path} line {line}"
        latency = {m: number(r[col[m]], where) if r[col[m]] != "-" else float("nan") for m in wanted}
        points.append((system, family, number(r[col["BLEU"]], where), latency))
    return points


def default_family(system):
    """The name up to its first '_', less a number it ends in (and a '-' before it), unless
    that leaves nothing: waitk3_s1, wait-3 and milk0.1 -> waitk, wait, milk."""
    head = system.split("_")[0]
    return re.sub(r"-?[\d.]+$", "", head) or head


def seed_means(points):
    """One point per system BASE whose rows are named BASE_sN (seeds.split_seed): the mean BLEU
    and latencies of its seeds, named "BASE (n seeds)" when n > 1; other rows pass unchanged."""
    groups = {}
    for system, family, bleu, latency in points:
        groups.setdefault(split_seed(system)[0], []).append((family, bleu, latency))
    means = []
    for base, runs in groups.items():
        families = sorted({family for family, _, _ in runs})
        if len(families) > 1:
            raise VisionAttnError(
                f"--seed-means: the seeds of {base} are in families {', '.join(families)}: give them one"
            )
        latency = {m: statistics.fmean(lat[m] for _, _, lat in runs) for m in runs[0][2]}
        name = base if len(runs) == 1 else f"{base} ({len(runs)} seeds)"
        means.append((name, families[0], statistics.fmean(bleu for _, bleu, _ in runs), latency))
    return means


# where a point's label may go, in points from the point (the first free one wins): right above,
# right below, left above, left below, then further up and down
LABEL_OFFSETS = [(3, 2), (3, -8), (-3, 2), (-3, -8)] + [
    (dx, dy) for step in (7, 14, 21, 28, 35, 42) for dx in (3, -3) for dy in (2 + step, -8 - step)
]


def place_labels(ax, labelled, fontsize=6):
    """Annotate each (x, y, text) at the first offset of LABEL_OFFSETS where its text overlaps no
    point, no drawn line (a family's curve, an offline reference) and no label placed before it,
    and stays inside the axes (where none is free, the one with the fewest clashes, weighted so
    that a label on another label is the worst, since neither can then be read: 9 a label, 8
    outside the axes, 2 a point, 1 a line); a label moved off its point's corner gets a thin line
    to the point. A label still on another once all are placed is placed again, the others known
    (two passes). Returns the annotations."""
    renderer = ax.figure.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    curves = [  # the axes' drawn lines in pixels (markers alone are points, below)
        Path(line.get_transform().transform(line.get_xydata()))
        for line in ax.get_lines()
        if line.get_linestyle() not in ("None", "", " ") and len(line.get_xydata()) > 1
    ]
    boxes = []
    for x, y, _ in labelled:  # every point's marker, 4 pixels each way
        px, py = ax.transData.transform((x, y))
        boxes.append(Bbox.from_extents(px - 4, py - 4, px + 4, py + 4))
    n_points = len(boxes)

    def style(dx):
        return {"fontsize": fontsize, "textcoords": "offset points", "ha": "left" if dx > 0 else "right"}

    def best_offset(x, y, text, labels):  # the offset with the fewest weighted clashes
        best = None
        for dx, dy in LABEL_OFFSETS:
            trial = ax.annotate(text, (x, y), xytext=(dx, dy), **style(dx))
            box = trial.get_window_extent(renderer)
            trial.remove()
            outside = not (inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1))
            clashes = 9 * sum(box.overlaps(other) for other in labels)
            clashes += 2 * sum(box.overlaps(other) for other in boxes[:n_points]) + 8 * outside
            clashes += sum(curve.intersects_bbox(box, filled=False) for curve in curves)
            if best is None or clashes < best[0]:
                best = (clashes, (dx, dy), box)
            if clashes == 0:
                break
        return best

    offsets = []
    for x, y, text in labelled:  # each label clear of those placed before it
        _, offset, box = best_offset(x, y, text, boxes[n_points:])
        offsets.append(offset)
        boxes.append(box)
    for _ in range(2):  # then a label still on another is moved, every other label now known
        for k, (x, y, text) in enumerate(labelled):
            others = boxes[n_points : n_points + k] + boxes[n_points + k + 1 :]
            if any(boxes[n_points + k].overlaps(other) for other in others):
                _, offsets[k], boxes[n_points + k] = best_offset(x, y, text, others)
    placed = []
    for (x, y, text), (dx, dy) in zip(labelled, offsets):
        line = None if abs(dy) < 9 else {"arrowstyle": "-", "lw": 0.4, "color": "grey", "shrinkB": 2}
        placed.append(ax.annotate(text, (x, y), xytext=(dx, dy), arrowprops=line, **style(dx)))
    return placed


def family_styles(families):
    """A (colour, marker) for each family, none shared: the colour cycle's colours with circles,
    then again with squares, triangles, ... (matplotlib's ten colours alone repeat at the 11th)."""
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = "os^Dvp*hX<>"
    if len(families) > len(colours) * len(markers):
        raise VisionAttnError(
            f"{len(families)} families to draw: at most {len(colours) * len(markers)} can be told apart"
        )
    return {name: (colours[i % len(colours)], markers[i // len(colours)]) for i, name in enumerate(families)}


def plot_latency(points, path, title="latency / quality"):
    """BLEU against each latency metric of the points; one line per family sorted by latency,
    every point labelled with its name (place_labels: clear of other labels, points and lines)."""
    metrics = list(points[0][3]) if points else ["DAL"]
    legend_width = 2.2  # inches right of the panels for the legend (a family name is up to ~40 characters)
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.0 * len(metrics) + legend_width, 4.2), squeeze=False)
    axes = axes[0]
    families = sorted({family for _, family, _, _ in points})
    styles = family_styles([family for family in families if family != "offline"])
    for ax, metric in zip(axes, metrics):
        for family in families:
            members = sorted((lat[metric], bleu, name) for name, fam, bleu, lat in points if fam == family)
            if family == "offline":
                for _, bleu, name in members:
                    ax.axhline(bleu, color="grey", ls="--", lw=1, label=f"{name} (offline)")
                continue
            colour, marker = styles[family]
            xs, ys = [m[0] for m in members], [m[1] for m in members]
            ax.plot(xs, ys, "-", color=colour, marker=marker, ms=4, label=family)
        ax.set_xlabel(metric)
        ax.set_ylabel("BLEU")
        ax.grid(alpha=0.3)
        ax.margins(x=0.12, y=0.08)  # room for the labels of the outermost points
    # right of the last axes, not inside one: place_labels keeps labels clear of points and lines,
    # and a legend inside would cover them
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    for ax, metric in zip(axes, metrics):  # the labels last: the axes have their final size
        members = sorted((lat[metric], bleu, name) for name, fam, bleu, lat in points if fam != "offline")
        place_labels(ax, members)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def streaming_attentions(checkpoint, data_bin, ids, out_dir, subset="test", stop_rule=None):
    """Decode ``ids`` simultaneously (greedy, as fairseq-generate does for streaming archs), then
    teacher-force the output to read the test-time attention weights; the head is outlined.
    ``stop_rule`` is fairseq-generate's ``--monotonic-stop`` (None: as trained, ``energy``).
    Returns each sentence's read delays (source tokens read before each target token)."""
    import torch

    from .simultaneous import SimultaneousGenerator, streaming_attention

    model, task, dataset = load_for_plots(checkpoint, data_bin, subset)
    mechanism = streaming_attention(model)
    if mechanism is None:
        raise SystemExit(
            f"{checkpoint} is not a streaming checkpoint (lstm_monotonic, lstm_mocha, lstm_milk, lstm_waitk)"
        )
    if stop_rule is not None:
        if not hasattr(mechanism, "stop_rule"):
            raise SystemExit(
                "--monotonic-stop needs a model with a monotonic head (lstm_monotonic, lstm_mocha, lstm_milk)"
            )
        mechanism.stop_rule = stop_rule
    generator = SimultaneousGenerator([model], task.target_dictionary, max_len_a=2, max_len_b=10)
    os.makedirs(out_dir, exist_ok=True)
    delays = {}
    for i in ids:
        sample = one_sentence(dataset, i, subset)
        hypo = generator.generate([model], sample)[0][0]
        prev = torch.cat([torch.tensor([task.target_dictionary.eos()]), hypo["tokens"][:-1]]).unsqueeze(0)
        with torch.no_grad():
            _, extra = model(sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"], prev)
        src = task.source_dictionary.string(dataset[i]["source"]).split() + ["</s>"]
        tgt = task.target_dictionary.string(hypo["tokens"]).split() + ["</s>"]
        weights = extra["attn"][0][0, : len(tgt), : len(src)].numpy()
        name = getattr(model.decoder.attention, "registry_name", "attention")
        name += f" (stop: {stop_rule})" if stop_rule else ""
        title = f"{name}, {subset} {i}: DAL {hypo['latency']['DAL']:.2f}, AL {hypo['latency']['AL']:.2f}"
        path = os.path.join(out_dir, f"streaming_{i}.png")
        plot_alignment(weights, src, tgt, path, title, delays=hypo["delays"])
        delays[i] = list(hypo["delays"])
    return delays


def add_checkpoint_plot(sub, name, help_text, subset):
    """A sub-command that plots sentences of a split through a checkpoint."""
    plot = sub.add_parser(name, help=help_text)
    plot.add_argument("--path", required=True, help="checkpoint")
    plot.add_argument("--data-bin", required=True)
    plot.add_argument("--subset", default=subset)
    plot.add_argument("--ids", type=int, nargs="+", required=True)
    plot.add_argument("--out-dir", required=True)
    return plot


def get_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("span", "vision span per step (Shu Fig. 1b)"),
        ("temperature", "temperature per output token (Lin Fig. 2)"),
    ):
        sentence_plot = sub.add_parser(name, help=help_text)
        sentence_plot.add_argument("--generate", required=True, help="fairseq-generate output")
        sentence_plot.add_argument("--stats", required=True, help="its --stats-output")
        sentence_plot.add_argument("--ids", type=int, nargs="+", required=True)
        sentence_plot.add_argument("--out-dir", required=True)
    tradeoff = sub.add_parser("tradeoff", help="window/BLEU curve (Shu Fig. 3)")
    tradeoff.add_argument("--points", required=True, help="TSV: label, window, BLEU")
    tradeoff.add_argument("--out", required=True)
    tradeoff.add_argument("--title", default="window size vs BLEU")
    fixed = sub.add_parser("fixed-temperature", help="BLEU against fixed temperatures (Lin Fig. 1)")
    fixed.add_argument("--table", required=True, help="the report table (TSV) of the systems")
    fixed.add_argument("--out", required=True)
    curves = sub.add_parser("curves", help="validation BLEU per epoch (Britz Fig. 3a)")
    curves.add_argument("--logs", nargs="+", required=True, metavar="NAME=TRAIN_LOG")
    curves.add_argument("--out", required=True)
    curves.add_argument("--title", default="validation BLEU")
    add_checkpoint_plot(sub, "memory-alignment", "alpha . beta heatmaps (Britz Figs. 6-8)", "valid")
    latency = sub.add_parser("latency", help="BLEU against DAL, LAAL, AL, AP, ATD (MILk Figs. 2-3)")
    latency.add_argument("--points", required=True, help="TSV: system, BLEU, latency columns [, family]")
    latency.add_argument(
        "--metrics",
        nargs="+",
        choices=LATENCY_METRICS,
        help="one panel per metric, in this order (default: each of DAL, LAAL, AL, AP, ATD the table has)",
    )
    latency.add_argument("--out", required=True)
    latency.add_argument("--title", default="latency / quality")
    latency.add_argument(
        "--seed-means",
        action="store_true",
        help="draw the rows NAME_s1, NAME_s2 ... of one system as one point at their means",
    )
    streaming = add_checkpoint_plot(
        sub, "streaming-attention", "attention with the hard head (MILk Figs. 4-5)", "test"
    )
    streaming.add_argument(
        "--monotonic-stop",
        choices=STOP_RULES,
        default=None,
        help="monotonic head's test-time rule, as fairseq-generate's (default: energy, as trained)",
    )
    return parser


@one_line_errors
def main(argv=None):
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.command == "latency":
        points = read_latency_points(args.points, args.metrics)
        plot_latency(seed_means(points) if args.seed_means else points, args.out, args.title)
        return
    if args.command == "streaming-attention":
        streaming_attentions(
            args.path, args.data_bin, args.ids, args.out_dir, args.subset, args.monotonic_stop
        )
        return
    if args.command == "curves":
        named = [spec.rpartition("=") for spec in args.logs]
        if any(not sep for _, sep, _ in named):
            parser.error("--logs takes NAME=TRAIN_LOG")
        plot_curves([(name, read_bleu_curve(path)) for name, _, path in named], args.out, args.title)
        return
    if args.command == "memory-alignment":
        memory_alignments(args.path, args.data_bin, args.ids, args.out_dir, args.subset)
        return
    if args.command in ("span", "temperature"):
        sentences, stats = read_sentences(args.generate), read_stats(args.stats)
        os.makedirs(args.out_dir, exist_ok=True)
        for i in args.ids:
            if i not in sentences or i not in stats:
                raise VisionAttnError(f"sentence id {i} is not in both {args.generate} and {args.stats}")
            mismatch = units_mismatch(stats[i], *sentences[i])
            if mismatch:
                raise VisionAttnError(
                    f"sentence {i}: {mismatch} in {args.generate}: plot a decoding without "
                    "--remove-bpe / --post-process / --tokenizer (the statistics count the model's own units)"
                )
            if args.command == "span":
                plot_vision_span(stats[i], *sentences[i], os.path.join(args.out_dir, f"span_{i}.png"))
            elif "temperatures" not in stats[i]:
                parser.error(
                    f"{args.stats} has no 'temperatures': decode a model with --attention-temperature"
                )
            else:
                plot_temperatures(
                    stats[i], sentences[i][1], os.path.join(args.out_dir, f"temperature_{i}.png")
                )
    elif args.command == "fixed-temperature":
        rows = [row for row, _ in read_tsv(args.table, numeric=[1])]
        plot_fixed_temperature(*fixed_temperature_points(rows), args.out)
    else:
        rows = read_tsv(args.points, numeric=[1, 2])
        plot_tradeoff([(row[0], window, bleu) for row, (window, bleu) in rows], args.out, args.title)


if __name__ == "__main__":
    main()
