#!/usr/bin/env bash
# Train one architecture on a binarized corpus with the recipes' shared settings.
#   bash recipes/train.sh ARCH DATA_BIN OUT_DIR [extra fairseq-train flags ...]
# Settings are the data README's reference (1-layer biLSTM 256, Adam 1e-3, clip 3, max-tokens
# 4000, dropout 0.2, EPOCHS=8). Checkpoints go to OUT_DIR/checkpoints, the log to
# OUT_DIR/train.log. Re-running resumes from checkpoint_last.pt (a finished run returns at once).
set -euo pipefail
arch=${1:?ARCH}; bin=${2:?DATA_BIN}; out=${3:?OUT_DIR}; shift 3
EPOCHS=${EPOCHS:-8}
mkdir -p "$out"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fairseq-train "$bin" --user-dir fairseq_vision_attn --task translation_vision_attn --arch "$arch" \
  --encoder-embed-dim 256 --encoder-hidden-size 256 --decoder-embed-dim 256 --decoder-hidden-size 256 \
  --decoder-out-embed-dim 256 --dropout 0.2 --optimizer adam --lr 0.001 --clip-norm 3 \
  --max-tokens 4000 --max-epoch "$EPOCHS" --criterion cross_entropy --cpu --num-workers 0 --seed 1 \
  --save-dir "$out/checkpoints" --no-epoch-checkpoints --log-format simple --log-interval 100 \
  "$@" >> "$out/train.log" 2>&1 || { tail -n 30 "$out/train.log" >&2; exit 1; }
