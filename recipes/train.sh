#!/usr/bin/env bash
# Train one architecture on a binarized corpus with the recipes' shared settings.
#   bash recipes/train.sh ARCH DATA_BIN OUT_DIR [extra fairseq-train flags ...]
# Settings are the data README's reference (1-layer biLSTM 256, Adam 1e-3, clip 3, max-tokens
# 4000, dropout 0.2, EPOCHS=8). Checkpoints go to OUT_DIR/checkpoints, fairseq's output to
# OUT_DIR/train.log; the terminal gets one line per epoch. Re-running resumes from
# checkpoint_last.pt (a finished run returns at once). DEVICE: auto (GPU if any), cpu or cuda;
# NAME (the name on the progress lines; default ARCH); TIME_LIMIT (seconds, 0 = none: stop, exit 3).
# KEEP_EPOCHS (0 = none): keep the last N epochs' checkpoint{E}.pt too, for checkpoint averaging
# (python -m fairseq_vision_attn.average) or a choice of epoch by dev BLEU.
# Exit 3 too when a signal stopped the training (a session's end): resumable, not failed. Exit 2
# at once when another training holds OUT_DIR (its lock file OUT_DIR/.train.lock).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
arch=${1:?"usage: train.sh ARCH DATA_BIN OUT_DIR [fairseq-train flags]"}
bin=$(arg_path "${2:?DATA_BIN}" "")
out=$(arg_path "${3:?OUT_DIR}" "")
shift 3
EPOCHS=${EPOCHS:-8}
KEEP_EPOCHS=${KEEP_EPOCHS:-0}
[[ $KEEP_EPOCHS =~ ^[0-9]+$ ]] || usage_error "KEEP_EPOCHS: '$KEEP_EPOCHS' is not a number of epochs (0: keep none)"
if [ "$KEEP_EPOCHS" -gt 0 ]; then epoch_flags=(--keep-last-epochs "$KEEP_EPOCHS")
else epoch_flags=(--no-epoch-checkpoints); fi
[ -f "$bin/dict.$(ls "$bin" 2>/dev/null | sed -n 's/^dict\.\(.*\)\.txt$/\1/p' | head -n 1).txt" ] \
  || usage_error "DATA_BIN $bin holds no fairseq dictionary (dict.*.txt): binarize it with recipes/prepare_data.sh"
mkdir -p "$out"
# one training per OUT_DIR: a second one (the same queue row started twice) would write the same
# checkpoints; the lock goes with the training's processes
if command -v flock >/dev/null 2>&1; then
  exec 9>>"$out/.train.lock"
  flock -n 9 || usage_error "$out is being trained by another process already (its lock: \
$out/.train.lock): let it finish, or stop it, and run again"
fi
cd "$ROOT"
train_logged "${NAME:-$arch}" "$out/train.log" "$EPOCHS" \
  fairseq-train "$bin" --user-dir fairseq_vision_attn --task translation_vision_attn --arch "$arch" \
  --encoder-embed-dim 256 --encoder-hidden-size 256 --decoder-embed-dim 256 --decoder-hidden-size 256 \
  --decoder-out-embed-dim 256 --dropout 0.2 --optimizer adam --lr 0.001 --clip-norm 3 \
  --max-tokens 4000 --max-epoch "$EPOCHS" --criterion cross_entropy "${DEVICE_FLAGS[@]}" --num-workers 0 --seed 1 \
  --save-dir "$out/checkpoints" "${epoch_flags[@]}" --log-format simple --log-interval 100 "$@"
