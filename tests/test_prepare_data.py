"""recipes/prepare_data.sh: a corpus of one's own from raw text to a data-bin, one error line
(exit 2, no traceback, nothing presented as finished) for each kind of bad input, and the
download path of the recipes' corpora against a local server."""

import functools
import gzip
import http.server
import json
import os
import shutil
import subprocess
import threading

import pytest

from .conftest import REPO

SCRIPT = os.path.join(REPO, "recipes", "prepare_data.sh")
SENTENCES = [
    ("ein Hund läuft .", "a dog runs ."),
    ("zwei Männer spielen Fußball .", "two men play soccer ."),
    ("eine Frau liest ein Buch .", "a woman reads a book ."),
    ("Kinder spielen im Park .", "children play in the park ."),
]


def write_corpus(directory, src="de", tgt="en", splits=("train", "valid", "test"), pairs=12):
    os.makedirs(directory, exist_ok=True)
    for split in splits:
        rows = [SENTENCES[i % len(SENTENCES)] for i in range(pairs)]
        for side, lang in enumerate((src, tgt)):
            with open(os.path.join(directory, f"{split}.{lang}"), "w", encoding="utf-8") as handle:
                handle.writelines(row[side] + "\n" for row in rows)


def prepare(*args, cwd=None, env=None):
    return subprocess.run(
        ["bash", SCRIPT, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


def assert_one_error(proc, *fragments):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("prepare_data.sh: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_raw_corpus_to_data_bin_from_another_directory(tmp_path):
    """Relative paths from any directory; Moses + BPE; re-running is a no-op; other options are
    refused; the dictionaries hold the BPE units."""
    write_corpus(tmp_path / "data")
    proc = prepare("raw", "de", "en", "data", "out", "--moses", "--bpe", "20", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    for split in ("train", "valid", "test"):
        assert (out / "data-bin" / f"{split}.de-en.de.bin").stat().st_size > 0
    assert "@@" in (out / "data-bin" / "dict.de.txt").read_text()  # BPE applied
    assert "fairseq_cli.preprocess" in (out / "preprocess.log").read_text()  # the tools' log is kept
    manifest = json.loads((out / "corpus.json").read_text())
    assert manifest["sentences"] == {"train": 12, "valid": 12, "test": 12}
    assert not (out / ".preparing").exists()
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == ["prepare_data"] * 5
    again = prepare("raw", "de", "en", "data", "out", "--moses", "--bpe", "20", cwd=tmp_path)
    assert again.returncode == 0 and "prepared from these files already" in again.stdout
    other = prepare("raw", "de", "en", "data", "out", "--bpe", "30", cwd=tmp_path)
    assert_one_error(other, "out holds a corpus prepared with other inputs or options", "options")


@pytest.mark.parametrize(
    "damage, fragments",
    [
        ("missing", ["valid.en does not exist", "1 of the files"]),
        ("lines", ["test.de has 12 lines but", "test.en has 11", "line-aligned"]),
        ("empty", ["train.en line 3 is empty", "from both sides"]),
    ],
)
def test_bad_corpus_is_one_line_and_writes_nothing(damage, fragments, tmp_path):
    data = tmp_path / "data"
    write_corpus(data)
    if damage == "missing":
        os.remove(data / "valid.en")
    elif damage == "lines":
        lines = (data / "test.en").read_text().splitlines(keepends=True)
        (data / "test.en").write_text("".join(lines[:-1]))
    else:
        lines = (data / "train.en").read_text().splitlines(keepends=True)
        lines[2] = "  \n"
        (data / "train.en").write_text("".join(lines))
    proc = prepare("raw", "de", "en", data, tmp_path / "out")
    assert_one_error(proc, *fragments)
    assert not (tmp_path / "out").exists()


def test_out_dir_of_another_corpus_or_half_written(tmp_path):
    write_corpus(tmp_path / "a")
    write_corpus(tmp_path / "b", pairs=8)
    out = tmp_path / "out"
    assert prepare("raw", "de", "en", tmp_path / "a", out).returncode == 0
    other = prepare("raw", "de", "en", tmp_path / "b", out)
    assert_one_error(other, "other inputs", "(sentences, files differ")
    # a data-bin this command did not make is never overwritten
    foreign = tmp_path / "foreign"
    (foreign / "data-bin").mkdir(parents=True)
    assert_one_error(prepare("raw", "de", "en", tmp_path / "a", foreign), "was not made by this command")
    # an interrupted run (its marker left, no corpus.json) is rebuilt
    os.remove(out / "corpus.json")
    (out / ".preparing").write_text("")
    (out / "data-bin" / "train.de-en.de.bin").write_bytes(b"half")
    proc = prepare("raw", "de", "en", tmp_path / "a", out)
    assert proc.returncode == 0, proc.stderr
    assert (out / "data-bin" / "train.de-en.de.bin").stat().st_size > 4 and (out / "corpus.json").exists()


def test_same_bytes_elsewhere_are_the_same_corpus(tmp_path):
    """The corpus is its bytes: a copy at another path with other modification times is prepared
    already; a file of the same size with other bytes is another corpus; a corpus.json written
    before checksums (sizes and times) is accepted when the sizes agree and rewritten."""
    write_corpus(tmp_path / "a")
    out = tmp_path / "out"
    assert prepare("raw", "de", "en", tmp_path / "a", out).returncode == 0
    shutil.copytree(tmp_path / "a", tmp_path / "copy")
    for name in os.listdir(tmp_path / "copy"):
        os.utime(tmp_path / "copy" / name, (1e9, 1e9))
    again = prepare("raw", "de", "en", tmp_path / "copy", out)
    assert again.returncode == 0 and "prepared from these files already" in again.stdout, again.stderr
    text = (tmp_path / "copy" / "train.en").read_text()
    (tmp_path / "copy" / "train.en").write_text(text.replace("dog", "cat"))  # same size, other words
    assert_one_error(prepare("raw", "de", "en", tmp_path / "copy", out), "other inputs", "(files differ")
    manifest = json.loads((out / "corpus.json").read_text())
    manifest["files"] = {name: [entry["bytes"], 123] for name, entry in manifest["files"].items()}
    (out / "corpus.json").write_text(json.dumps(manifest))
    upgraded = prepare("raw", "de", "en", tmp_path / "a", out)
    assert upgraded.returncode == 0 and "rewritten with the files' checksums" in upgraded.stdout
    assert "sha256" in json.loads((out / "corpus.json").read_text())["files"]["train.en"]


def test_bad_arguments(tmp_path):
    write_corpus(tmp_path / "data")
    proc = prepare("raw", "de", "en", tmp_path / "nowhere", tmp_path / "out")
    assert_one_error(proc, "DATA_DIR", "is not a directory")
    proc = prepare("fr", tmp_path / "data", tmp_path / "out")
    assert proc.returncode == 2 and "invalid choice: 'fr'" in proc.stderr and "raw" in proc.stderr
    proc = prepare("raw", "de", "fr", tmp_path / "data", tmp_path / "out")
    assert_one_error(proc, "train.fr does not exist")


def test_without_network_and_without_data_dir_says_so(tmp_path):
    proc = prepare(
        "enja", tmp_path / "corpus", tmp_path / "out", env={"VISION_ATTN_CORPUS_URL": "http://127.0.0.1:9"}
    )
    assert_one_error(proc, "corpus does not exist and http://127.0.0.1:9 cannot be reached", "by hand")
    assert not (tmp_path / "corpus").exists() and not (tmp_path / "out").exists()


@pytest.fixture
def corpus_server(tmp_path):
    """A local HTTP server holding Multi30k-like gzipped files (the deen layout)."""
    root = tmp_path / "server"
    write_corpus(root / "plain", splits=("train", "val", "test_2016_flickr", "test_2017_flickr"))
    for path in (root / "plain").iterdir():
        (root / f"{path.name}.gz").write_bytes(gzip.compress(path.read_bytes()))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_deen_downloads_and_binarizes_both_test_sets(corpus_server, tmp_path):
    proc = prepare(
        "deen", tmp_path / "corpus", tmp_path / "out", env={"VISION_ATTN_CORPUS_URL": corpus_server}
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "corpus" / "test_2017_flickr.en").read_text().startswith("a dog runs .")
    bins = tmp_path / "out" / "data-bin"
    assert (bins / "test.de-en.de.bin").exists() and (bins / "test1.de-en.de.bin").exists()
    assert (bins / "dict.de.txt").read_text() == (bins / "dict.en.txt").read_text()  # joined dictionary
