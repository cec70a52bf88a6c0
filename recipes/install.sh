#!/usr/bin/env bash
# Install fairseq-vision-attn and its dependencies into the active Python environment.
#   python3.11 -m venv .venv && . .venv/bin/activate && bash recipes/install.sh
# EXTRAS (default "test"): the package's extras to add; "test,simuleval" adds SimulEval 1.1.4
# (the SimulEval agent and its agreement tests; CI installs it).
# FAIRSEQ_EXTENSIONS (default "translation"): which of fairseq's compiled extensions to build;
# "all" adds the two nothing here uses (libbase, libnat).
# fairseq-fixed is built from source against the pinned torch (about 1 minute on 2 cores; 2 with all).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FAIRSEQ_EXTENSIONS=${FAIRSEQ_EXTENSIONS:-translation}
case $FAIRSEQ_EXTENSIONS in
  translation | all) ;;
  *) echo "[install] error: FAIRSEQ_EXTENSIONS=$FAIRSEQ_EXTENSIONS: valid values are translation (the \
default: the compiled parts translation and the tests need) and all (also libbase and libnat, for \
fairseq's BASE layers and non-autoregressive models)" >&2; exit 2 ;;
esac
export PIP_CONSTRAINT="$here/recipes/constraints.txt"
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -m pip install -q --upgrade pip setuptools wheel
python -m pip install -q torch==2.13.0 cython numpy
if ! python -c "import fairseq" 2>/dev/null; then
  # --no-cache-dir: a cached wheel may have been compiled against another torch
  if [ "$FAIRSEQ_EXTENSIONS" = all ]; then
    python -m pip install -q --no-cache-dir --no-build-isolation fairseq-fixed==0.12.3.1
  else
    # fairseq's setup.py compiles six extensions one after another; two of them (libbase,
    # libnat) include torch's headers and took 74 of its 124 s (docs/benchmarks.md), and
    # nothing here imports them (fairseq imports each only when a model that needs it runs:
    # BASE layers, the non-autoregressive models). Build the source with the other four
    # (alignment_train_cpu_binding: fairseq's monotonic-attention op, a test's oracle).
    src=$(mktemp -d)
    trap 'rm -rf "$src"' EXIT
    python -m pip download -q --no-deps --no-binary fairseq-fixed --no-build-isolation \
      fairseq-fixed==0.12.3.1 -d "$src"
    tar xzf "$src/fairseq_fixed-0.12.3.1.tar.gz" -C "$src"
    python - "$src/fairseq_fixed-0.12.3.1/setup.py" <<'PY'
import sys

path = sys.argv[1]
text = open(path).read()
anchor = 'cmdclass = {"build_ext": cpp_extension.BuildExtension}'
if text.count(anchor) != 1:
    sys.exit(f"[install] error: {path} is not fairseq-fixed 0.12.3.1's; run with FAIRSEQ_EXTENSIONS=all")
skip = 'extensions = [e for e in extensions if e.name not in ("fairseq.libbase", "fairseq.libnat")]'
open(path, "w").write(text.replace(anchor, f"{skip}\n{anchor}"))
PY
    python -m pip install -q --no-cache-dir --no-build-isolation "$src/fairseq_fixed-0.12.3.1"
  fi
fi
python -m pip install -q --no-build-isolation -e "$here[${EXTRAS:-test}]"
python -c "import fairseq_vision_attn, torch, fairseq; print('installed fairseq-vision-attn', fairseq_vision_attn.__version__, 'torch', torch.__version__, 'fairseq', fairseq.__version__)"
