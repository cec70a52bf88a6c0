"""Raw parallel text -> fairseq data-bin (checks, Moses tokenization, joint BPE, binarizing).

``recipes/prepare_data.sh`` runs this module.

    prepare_data.sh raw SRC TGT DATA_DIR OUT_DIR [--moses] [--bpe N] [--threshold N]
    prepare_data.sh enja DATA_DIR OUT_DIR   # small_parallel_enja (tokenized already)
    prepare_data.sh deen DATA_DIR OUT_DIR   # Multi30k De-En: Moses + 8k joint BPE, two test sets

``raw`` reads ``DATA_DIR/{train,valid,test}.{SRC,TGT}`` (one sentence per line, the two sides
line-aligned). Every file is checked before anything is written: a missing file, a split whose
sides have different line counts, or an empty line is one error line and exit status 2.
``enja``/``deen`` download the original corpus into DATA_DIR when it does not exist (checking
first that the host can be reached).

OUT_DIR receives ``data-bin/`` (fairseq-preprocess; ``test1`` is the second test set of
``deen``), ``tok/`` (tokenized and BPE text, the BPE codes), ``preprocess.log`` (everything the
tools printed) and, last, ``corpus.json``, which records what was prepared: its presence means
the data-bin is complete. Run again with the same inputs (the same bytes by SHA-256, from any
path or copy), the command says so and does nothing; an OUT_DIR prepared from another corpus or
with other options is refused; one left half-written by an interrupted run is rebuilt.
"""

import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

from .errors import VisionAttnError, positive_int

MANIFEST = "corpus.json"
PARTIAL = ".preparing"  # present while a run writes OUT_DIR; a finished run removes it

# name -> (source, target, {split: file stem}, options, download (url base, suffix))
CORPORA = {
    "enja": (
        "en",
        "ja",
        {"train": "train", "valid": "dev", "test": "test"},
        {"moses": False, "bpe": 0, "threshold": 2, "joined_dictionary": False},
        ("https://raw.githubusercontent.com/odashi/small_parallel_enja/master", ""),
    ),
    "deen": (
        "de",
        "en",
        {"train": "train", "valid": "val", "test": "test_2016_flickr", "test1": "test_2017_flickr"},
        {"moses": True, "bpe": 8000, "threshold": 0, "joined_dictionary": True},
        ("https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw", ".gz"),
    ),
}
RAW_SPLITS = {"train": "train", "valid": "valid", "test": "test"}


def say(message):
    """One progress line on the terminal (the tools' own output goes to preprocess.log)."""
    print(f"prepare_data: {message}", flush=True)


# --------------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------------


def count_lines(path):
    """Number of lines, and the 1-based number of the first empty (or blank) line, or None."""
    count, first_empty = 0, None
    with open(path, encoding="utf-8", errors="replace") as handle:
        for count, line in enumerate(handle, 1):
            if first_empty is None and not line.strip():
                first_empty = count
    return count, first_empty


def check_corpus(data_dir, src, tgt, splits):
    """Raise VisionAttnError naming the first problem of DATA_DIR; return {split: pairs}."""
    paths = {
        (split, lang): os.path.join(data_dir, f"{stem}.{lang}")
        for split, stem in splits.items()
        for lang in (src, tgt)
    }
    missing = [path for path in paths.values() if not os.path.isfile(path)]
    if missing:
        expected = ", ".join(f"{stem}.{{{src},{tgt}}}" for stem in splits.values())
        raise VisionAttnError(
            f"{missing[0]} does not exist ({len(missing)} of the files {expected} are missing)"
        )
    sizes = {}
    for split in splits:
        (n_src, empty_src), (n_tgt, empty_tgt) = (count_lines(paths[split, lang]) for lang in (src, tgt))
        if n_src != n_tgt:
            raise VisionAttnError(
                f"{paths[split, src]} has {n_src} lines but {paths[split, tgt]} has {n_tgt}: "
                "the two sides must be line-aligned"
            )
        for lang, empty in ((src, empty_src), (tgt, empty_tgt)):
            if empty is not None:
                raise VisionAttnError(
                    f"{paths[split, lang]} line {empty} is empty: remove that sentence pair from both sides"
                )
        if n_src == 0:
            raise VisionAttnError(f"{paths[split, src]} is empty")
        sizes[split] = n_src
    return sizes


def fingerprint(data_dir, src, tgt, splits):
    """Size and SHA-256 of every input file: what the corpus is, wherever it lies and whenever
    it was copied (a copied or re-mounted corpus keeps its bytes, not its modification times)."""
    out = {}
    for stem in splits.values():
        for lang in (src, tgt):
            digest, size = hashlib.sha256(), 0
            with open(os.path.join(data_dir, f"{stem}.{lang}"), "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
                    size += len(block)
            out[f"{stem}.{lang}"] = {"bytes": size, "sha256": digest.hexdigest()}
    return out


# what tells two preparations apart; data_dir is recorded for the reader, not compared: the same
# files under another path make the same data-bin
COMPARED = ("source", "target", "splits", "options", "sentences", "files")


def older_manifest_matches(existing, manifest):
    """corpus.json of versions before 2026-12-03 records [size, mtime] per file, not contents:
    accepted when everything else and every size agree (it is then rewritten with checksums)."""
    old_files = existing.get("files", {})
    if not old_files or not all(isinstance(value, list) for value in old_files.values()):
        return False
    sizes = {name: value[0] for name, value in old_files.items()}
    if sizes != {name: value["bytes"] for name, value in manifest["files"].items()}:
        return False
    return all(existing.get(key) == manifest[key] for key in COMPARED if key != "files")


def check_out_dir(out_dir, manifest):
    """True when OUT_DIR already holds exactly this preparation; raise when it holds another."""
    path = os.path.join(out_dir, MANIFEST)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            existing = json.load(handle)
        if all(existing.get(key) == manifest[key] for key in COMPARED):
            return True
        if older_manifest_matches(existing, manifest):
            upgraded = {**manifest, "data_dir": existing.get("data_dir", manifest["data_dir"])}
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(upgraded, handle, indent=1)
            say(f"{path} recorded file sizes and times only: rewritten with the files' checksums")
            return True
        differs = [key for key in COMPARED if existing.get(key) != manifest[key]]
        raise VisionAttnError(
            f"{out_dir} holds a corpus prepared with other inputs or options ({', '.join(differs)} differ, "
            f"see {path}): choose another OUT_DIR or remove that one"
        )
    leftovers = [name for name in ("data-bin", "tok") if os.path.exists(os.path.join(out_dir, name))]
    if leftovers and not os.path.exists(os.path.join(out_dir, PARTIAL)):
        raise VisionAttnError(
            f"{os.path.join(out_dir, leftovers[0])} exists but was not made by this command (no {MANIFEST}): "
            "choose another OUT_DIR or remove it"
        )
    return False


# --------------------------------------------------------------------------------------------
# download
# --------------------------------------------------------------------------------------------


def download(corpus, data_dir):
    """Fetch the original corpus into DATA_DIR (written under a temporary name, then renamed)."""
    src, tgt, splits, _, (base, suffix) = CORPORA[corpus]
    base = os.environ.get("VISION_ATTN_CORPUS_URL", base)  # a mirror, or a local server in tests
    try:
        urllib.request.urlopen(f"{base}/{splits['train']}.{src}{suffix}", timeout=15).close()
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise VisionAttnError(
            f"{data_dir} does not exist and {base} cannot be reached ({reason}): download the corpus "
            "there by hand or give the directory that holds it"
        ) from None
    say(f"downloading {corpus} from {base} into {data_dir}")
    partial = tempfile.mkdtemp(prefix=".download-", dir=os.path.dirname(os.path.abspath(data_dir)))
    try:
        for stem in splits.values():
            for lang in (src, tgt):
                with urllib.request.urlopen(f"{base}/{stem}.{lang}{suffix}", timeout=60) as response:
                    data = response.read()
                with open(os.path.join(partial, f"{stem}.{lang}"), "wb") as handle:
                    handle.write(gzip.decompress(data) if suffix == ".gz" else data)
        os.replace(partial, data_dir)
    except (urllib.error.URLError, OSError) as err:
        raise VisionAttnError(f"downloading {corpus} failed ({getattr(err, 'reason', err)})") from None
    finally:
        shutil.rmtree(partial, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# the pipeline
# --------------------------------------------------------------------------------------------


def run_logged(command, log, stdin=None, stdout=None):
    """Run a tool with its messages appended to ``log``; one error line if it fails."""
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    try:
        proc = subprocess.run(command, stdin=stdin, stdout=stdout or log, stderr=log)
    except FileNotFoundError:
        raise VisionAttnError(
            f"{command[0]} is not installed (bash recipes/install.sh installs it)"
        ) from None
    if proc.returncode != 0:
        raise VisionAttnError(f"{command[0]} failed (exit {proc.returncode}); its output is in {log.name}")


def prepare(data_dir, out_dir, src, tgt, splits, options, workers=2):
    sizes = check_corpus(data_dir, src, tgt, splits)
    manifest = {
        "data_dir": os.path.abspath(data_dir),
        "source": src,
        "target": tgt,
        "splits": splits,
        "options": options,
        "sentences": sizes,
        "files": fingerprint(data_dir, src, tgt, splits),
    }
    if check_out_dir(out_dir, manifest):
        say(f"{out_dir}/data-bin is prepared from these files already ({os.path.join(out_dir, MANIFEST)})")
        return
    os.makedirs(out_dir, exist_ok=True)
    open(os.path.join(out_dir, PARTIAL), "w").close()
    for name in ("data-bin", "tok"):  # what an interrupted run of this command left
        shutil.rmtree(os.path.join(out_dir, name), ignore_errors=True)
    tok = os.path.join(out_dir, "tok")
    os.makedirs(tok)
    summary = ", ".join(f"{split} {n}" for split, n in sizes.items())
    say(f"{src}-{tgt} from {data_dir}: {summary} sentence pairs")
    with open(os.path.join(out_dir, "preprocess.log"), "w", encoding="utf-8") as log:
        current = {}  # (split, lang) -> path of the text at the current stage
        for split, stem in splits.items():
            for lang in (src, tgt):
                current[split, lang] = os.path.join(data_dir, f"{stem}.{lang}")
        if options["moses"]:
            say("tokenizing (sacremoses)")
            for (split, lang), path in list(current.items()):
                out = os.path.join(tok, f"{split}.tok.{lang}")
                with open(path, "rb") as stdin, open(out, "wb") as stdout:
                    command = ["sacremoses", "-l", lang, "-j", str(workers), "tokenize", "-x"]
                    run_logged(command, log, stdin=stdin, stdout=stdout)
                current[split, lang] = out
        if options["bpe"]:
            say(f"learning {options['bpe']} joint BPE merges (subword-nmt) on train")
            codes = os.path.join(tok, "bpe.codes")
            joint = os.path.join(tok, "train.joint")
            with open(joint, "wb") as handle:
                for lang in (src, tgt):
                    with open(current["train", lang], "rb") as part:
                        shutil.copyfileobj(part, handle)
            with open(joint, "rb") as stdin, open(codes, "wb") as stdout:
                run_logged(
                    ["subword-nmt", "learn-bpe", "-s", str(options["bpe"])], log, stdin=stdin, stdout=stdout
                )
            os.remove(joint)
            for (split, lang), path in list(current.items()):
                out = os.path.join(tok, f"{split}.bpe.{lang}")
                with open(path, "rb") as stdin, open(out, "wb") as stdout:
                    run_logged(["subword-nmt", "apply-bpe", "-c", codes], log, stdin=stdin, stdout=stdout)
                current[split, lang] = out
        # fairseq-preprocess wants PREFIX.lang: link every split's current text under one name
        for (split, lang), path in current.items():
            os.symlink(os.path.abspath(path), os.path.join(tok, f"final.{split}.{lang}"))
        prefix = os.path.join(tok, "final")
        tests = [f"{prefix}.{split}" for split in splits if split.startswith("test")]
        command = ["fairseq-preprocess", "--source-lang", src, "--target-lang", tgt]
        command += ["--trainpref", f"{prefix}.train", "--validpref", f"{prefix}.valid"]
        command += ["--testpref", ",".join(tests), "--destdir", os.path.join(out_dir, "data-bin")]
        command += ["--workers", str(workers)]
        if options["threshold"]:
            command += [
                "--thresholdsrc",
                str(options["threshold"]),
                "--thresholdtgt",
                str(options["threshold"]),
            ]
        if options["joined_dictionary"]:
            command += ["--joined-dictionary"]
        say("binarizing (fairseq-preprocess)")
        run_logged(command, log)
    with open(os.path.join(out_dir, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1)
    os.remove(os.path.join(out_dir, PARTIAL))
    say(f"done: {os.path.join(out_dir, 'data-bin')} (log: {os.path.join(out_dir, 'preprocess.log')})")


def get_parser():
    parser = argparse.ArgumentParser(prog="prepare_data.sh", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="corpus", required=True, metavar="{raw,enja,deen}")
    raw = sub.add_parser("raw", help="your own corpus: DATA_DIR/{train,valid,test}.{SRC,TGT}")
    raw.add_argument("src", metavar="SRC", help="source language suffix, e.g. de")
    raw.add_argument("tgt", metavar="TGT", help="target language suffix, e.g. en")
    raw.add_argument("data_dir", metavar="DATA_DIR")
    raw.add_argument("out_dir", metavar="OUT_DIR")
    raw.add_argument("--moses", action="store_true", help="tokenize both sides with sacremoses first")
    raw.add_argument(
        "--bpe", type=int, default=0, metavar="N", help="learn N joint BPE merges on train (0 = none)"
    )
    raw.add_argument(
        "--threshold", type=int, default=0, metavar="N", help="map words seen <= N times in train to <unk>"
    )
    raw.add_argument("--joined-dictionary", action="store_true", help="one dictionary for both sides")
    for name, (src, tgt, _, _, _) in CORPORA.items():
        known = sub.add_parser(
            name, help=f"the {src}-{tgt} corpus of the recipes (downloaded when DATA_DIR is missing)"
        )
        known.add_argument("data_dir", metavar="DATA_DIR")
        known.add_argument("out_dir", metavar="OUT_DIR")
    for command in sub.choices.values():
        command.add_argument("--workers", type=positive_int, default=2)
    return parser


def main(argv=None):
    parser = get_parser()
    args = parser.parse_args(argv)
    try:
        if args.corpus == "raw":
            if args.bpe < 0 or args.threshold < 0:
                parser.error("--bpe and --threshold must be >= 0")
            splits = dict(RAW_SPLITS)
            options = {"moses": args.moses, "bpe": args.bpe, "threshold": args.threshold}
            options["joined_dictionary"] = args.joined_dictionary
            if not os.path.isdir(args.data_dir):
                raise VisionAttnError(f"DATA_DIR {args.data_dir} is not a directory")
            prepare(args.data_dir, args.out_dir, args.src, args.tgt, splits, options, args.workers)
        else:
            src, tgt, splits, options, _ = CORPORA[args.corpus]
            if not os.path.isdir(args.data_dir):
                download(args.corpus, args.data_dir)
            prepare(args.data_dir, args.out_dir, src, tgt, splits, options, args.workers)
    except VisionAttnError as err:
        print(f"prepare_data.sh: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("prepare_data.sh: interrupted; run the same command again to rebuild OUT_DIR", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
