#!/usr/bin/env bash
# Bring the best checkpoints of a device run back: a call returns at most 8 files of 16 MB, and a
# recipe-sized checkpoint with its Adam state is about 69 MB. Packs WORK/NAME/checkpoints/
# checkpoint_best.pt of every system (or of the SYSTEMs named: a call returns 64 MiB in all),
# without the optimizer state (all that fairseq-generate reads: 23 MB for a recipe-sized
# unidirectional De-En model, 36 MB for a bidirectional one), as 15 MB pieces
# DEST/best.tar.partaa, ab, ...:
#   device:  bash recipes/claims/pack_best.sh outputs/claims/deen/deen_milk "$OUT" [SYSTEM ...]
#   here:    cat FILES_AT/best.tar.part* | tar -x -C outputs/claims/deen/deen_milk
# Decoding them here (CPU) can differ from a GPU decoding in the last digits of a score.
set -euo pipefail
work=${1:?"usage: pack_best.sh WORK_DIR DEST_DIR"}
dest=${2:?"usage: pack_best.sh WORK_DIR DEST_DIR"}
shift 2
for name in "$@"; do
  [ -f "$work/$name/checkpoints/checkpoint_best.pt" ] || { echo "pack_best.sh: no $work/$name/checkpoints/checkpoint_best.pt" >&2; exit 2; }
done
if [ $# -eq 0 ]; then  # every system that has a best checkpoint
  for ckpt in "$work"/*/checkpoints/checkpoint_best.pt; do
    [ -f "$ckpt" ] && set -- "$@" "$(basename "$(dirname "$(dirname "$ckpt")")")"
  done
  [ $# -gt 0 ] || { echo "pack_best.sh: no checkpoints/checkpoint_best.pt under $work/*" >&2; exit 2; }
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for name in "$@"; do
  ckpt=$work/$name/checkpoints/checkpoint_best.pt
  mkdir -p "$tmp/$name/checkpoints"
  python3 - "$ckpt" "$tmp/$name/checkpoints/checkpoint_best.pt" <<'PY'
import sys

import torch

state = torch.load(sys.argv[1], map_location="cpu", weights_only=False)
state.pop("last_optimizer_state", None)
torch.save(state, sys.argv[2])
PY
done
mkdir -p "$dest"
(cd "$tmp" && tar -cf - -- *) | split -b 15M - "$dest/best.tar.part"
echo "pack_best.sh: $# checkpoints in $(ls "$dest"/best.tar.part* | wc -l) pieces under $dest"
