#!/usr/bin/env bash
# Install fairseq-vision-attn and its dependencies into the active Python environment.
#   python3.11 -m venv .venv && . .venv/bin/activate && bash recipes/install.sh
# EXTRAS (default "test"): the package's extras to add; "test,simuleval" adds SimulEval 1.1.4
# (the SimulEval agent and its agreement tests; CI installs it).
# fairseq-fixed is built from source against the pinned torch (about 4 minutes on 2 cores).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PIP_CONSTRAINT="$here/recipes/constraints.txt"
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -m pip install -q --upgrade pip setuptools wheel
python -m pip install -q torch==2.13.0 cython numpy
if ! python -c "import fairseq" 2>/dev/null; then
  # --no-cache-dir: a cached wheel may have been compiled against another torch
  python -m pip install -q --no-cache-dir --no-build-isolation fairseq-fixed==0.12.3.1
fi
python -m pip install -q --no-build-isolation -e "$here[${EXTRAS:-test}]"
python -c "import fairseq_vision_attn, torch, fairseq; print('installed fairseq-vision-attn', fairseq_vision_attn.__version__, 'torch', torch.__version__, 'fairseq', fairseq.__version__)"
