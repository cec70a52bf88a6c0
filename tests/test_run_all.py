"""benchmarks/run_all.py rewrites a benchmark's block in docs/benchmarks.md from what the
benchmark prints (its last TSV table and its machine note), and leaves the rest alone."""

import os
import runpy
import sys

import pytest

from .conftest import REPO

RUN_ALL = os.path.join(REPO, "benchmarks", "run_all.py")


def run_all(argv):
    module = runpy.run_path(RUN_ALL)
    return module["main"](argv)


def test_rewrites_only_its_block(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        "# Benchmarks\n\nprose before\n<!-- run_all: memory_speed -->\nold table\n"
        "<!-- /run_all: memory_speed -->\n"
        "prose after\n<!-- run_all: flexible_speed -->\nkept\n<!-- /run_all: flexible_speed -->\n"
    )
    fake = "print('progress line'); print('length\\tsystem\\tspeed-up |x|'); print('100\\tK=32\\t1.76x');"
    fake += "print('# machine: 2 cores, load average 0.40 at the end of the run')"
    script = tmp_path / "fake_benchmark.py"
    script.write_text(fake.replace("; ", "\n"))
    run_all(["--only", "memory_speed", "--doc", str(doc), "--command", sys.executable, str(script)])
    text = doc.read_text()
    assert "old table" not in text and "kept" in text and "prose before" in text and "prose after" in text
    assert (
        "| length | system | speed-up \\|x\\| |\n|---|---|---|\n| 100 | K=32 | 1.76x |" in text
    )  # pipes escaped
    assert "    python benchmarks/bench_memory_speed.py --lengths 100 200 --sizes 16 32 64" in text
    assert "2 cores, load average 0.40 at the end of the run (the benchmark itself" in text
    assert "progress line" not in text


def test_a_document_without_the_block_is_an_error(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n")
    script = tmp_path / "fake_benchmark.py"
    script.write_text("print('a\\tb')\nprint('1\\t2')\n")
    with pytest.raises(SystemExit, match="no block '<!-- run_all: memory_speed -->'"):
        run_all(["--only", "memory_speed", "--doc", str(doc), "--command", sys.executable, str(script)])


def test_every_benchmark_has_its_block_in_the_docs():
    with open(os.path.join(REPO, "docs", "benchmarks.md"), encoding="utf-8") as handle:
        text = handle.read()
    for name in runpy.run_path(RUN_ALL)["BENCHMARKS"]:
        assert f"<!-- run_all: {name} -->" in text and f"<!-- /run_all: {name} -->" in text, name
