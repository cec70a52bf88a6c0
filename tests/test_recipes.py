"""The recipes refuse bad settings with one line naming the setting and exit 2, before any work.

Each case runs the real script; a refusal must come before training or data preparation, so the
output directory is never created and nothing else runs.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_recipe(script, args, env_extra):
    env = dict(os.environ, **env_extra)
    # the recipes call `python -m ...` and fairseq's CLIs from the active environment
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return subprocess.run(
        ["bash", str(ROOT / "recipes" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "env_extra, message",
    [
        ({"BASELINES": "noattn lstm_global"}, "BASELINES: 'lstm_global' is not one of: noattn, global"),
        ({"SIZES": "16 0"}, "SIZES / NORM_K: '0' is not a positive integer"),
        ({"NORM_K": "x"}, "SIZES / NORM_K: 'x' is not a positive integer"),
    ],
)
def test_memory_recipe_refuses_bad_settings(tmp_path, env_extra, message):
    out = tmp_path / "out"
    result = run_recipe("memory_attention.sh", [str(out)], {"STAGES": "toy", **env_extra})
    assert result.returncode == 2
    assert message in result.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    "env_extra, message",
    [
        ({"TEST_WAITK": "2 -1"}, "TEST_WAITK / TEST_WAITK_FROM: '-1' is not a positive integer"),
        (
            {"TEST_WAITK": "2", "TEST_WAITK_FROM": "4", "WAITK": "3"},
            'TEST_WAITK_FROM=4: WAITK="3" trains no wait-k model with k = 4',
        ),
    ],
)
def test_simultaneous_recipe_refuses_bad_settings(tmp_path, env_extra, message):
    out = tmp_path / "out"
    result = run_recipe("simultaneous.sh", [str(out), str(tmp_path / "no_data")], env_extra)
    assert result.returncode == 2
    assert message in result.stderr
    assert not out.exists()


def test_prepare_data_refuses_unknown_corpus(tmp_path):
    result = run_recipe("prepare_data.sh", ["fren", str(tmp_path / "raw"), str(tmp_path / "out")], {})
    assert result.returncode == 2
    assert "unknown corpus 'fren'; valid choices: enja, deen" in result.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "raw").exists()
