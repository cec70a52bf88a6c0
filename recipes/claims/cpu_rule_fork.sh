#!/usr/bin/env bash
# Two queue rows that differ only in the plateau rule's --lr-patience are one run until the first
# epoch whose validation loss does not improve on the scheduler's best: train that common prefix
# once, then fork it and train both to the rule's end side by side (a 2-core CPU saves the
# prefix's epochs of one row, about 17 on En-Ja).
#   bash recipes/claims/cpu_rule_fork.sh QUEUE ROW_A ROW_B DATA_BIN OUT_DIR
#   e.g. bash recipes/claims/cpu_rule_fork.sh recipes/claims/enja_rule.queue global_p0_s1 \
#          global_p1_s1 outputs/enja/data-bin outputs/claims/enja_rule
# The prefix trains under ROW_B's flags into OUT_DIR/ROW_B one epoch per fairseq-train call
# (resumed from checkpoint_last.pt, which replays the pending learning-rate step: the same as
# one uninterrupted run), PREFIX_THREADS threads (2). At the first epoch without improvement
# ROW_B's checkpoints and log are copied to OUT_DIR/ROW_A, whose resume takes that epoch's step
# under its own rule, and queue.sh trains and decodes both (PARALLEL=2, THREADS=1; its other
# settings apply). Resumable: run it again; once forked it goes straight to queue.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
queue=$(arg_path "${1:?"usage: cpu_rule_fork.sh QUEUE ROW_A ROW_B DATA_BIN OUT_DIR"}" "")
row_a=${2:?ROW_A}
row_b=${3:?ROW_B}
bin=$(arg_path "${4:?DATA_BIN}" "")
out=$(arg_path "${5:?OUT_DIR}" "")
[ -f "$queue" ] || usage_error "QUEUE $queue does not exist"
spec() {  # ROW: its "ARCH FLAGS" in the queue
  awk -v name="$1" '$1 == name {$1 = ""; print substr($0, 2); found = 1} END {exit !found}' "$queue" \
    || usage_error "$1 is not a row of $queue (its rows: $(awk 'NF && $1 !~ /^#/ {print $1}' "$queue" | paste -sd ' '))"
}
spec_a=$(spec "$row_a")
spec_b=$(spec "$row_b")
strip() { sed 's/--lr-patience [0-9]*//; s/  */ /g; s/ *$//' <<< "$1"; }
[ "$(strip "$spec_a")" = "$(strip "$spec_b")" ] \
  || usage_error "$row_a and $row_b differ in more than --lr-patience: '$spec_a' / '$spec_b'"

# checkpoint_state CHECKPOINT: "EPOCH BAD", the epoch an end-of-epoch checkpoint ends and 1 when
# that epoch did not improve on the scheduler's best (saved before the scheduler's step)
checkpoint_state() {
  python - "$1" <<'PY'
import sys
import torch
state = torch.load(sys.argv[1], map_location="cpu", weights_only=False)
scheduler = state["optimizer_history"][-1]["lr_scheduler_state"]
loss, best = float(state["extra_state"]["val_loss"]), float(scheduler["best"])
# torch's ReduceLROnPlateau as fairseq builds it: mode min, the run's --lr-threshold, relative
threshold = float(state["cfg"]["lr_scheduler"]["lr_threshold"])
print(state["extra_state"]["train_iterator"]["epoch"] - 1, int(loss >= best * (1 - threshold)))
PY
}

read -r arch flags <<< "$spec_b"
if [ ! -f "$out/$row_a/checkpoints/checkpoint_last.pt" ]; then
  last=$out/$row_b/checkpoints/checkpoint_last.pt
  epoch=0 bad=0
  while :; do
    if [ -f "$last" ]; then read -r epoch bad < <(checkpoint_state "$last"); fi
    [ "$bad" = 1 ] && break
    [ "$epoch" -lt 60 ] || fail "no epoch without improvement in 60: nothing to fork"
    # shellcheck disable=SC2086  # flags are a word list
    OMP_NUM_THREADS=${PREFIX_THREADS:-2} EPOCHS=$((epoch + 1)) NAME=$row_b \
      bash "$ROOT/recipes/train.sh" "$arch" "$bin" "$out/$row_b" $PLATEAU_RULE $flags
  done
  say "epoch $epoch did not improve: forking $row_b into $row_a"
  rm -rf "$out/$row_a/checkpoints.part"
  mkdir -p "$out/$row_a/checkpoints.part"
  cp "$out/$row_b/checkpoints/"*.pt "$out/$row_a/checkpoints.part/"
  cp "$out/$row_b/train.log" "$out/$row_a/train.log"
  mv "$out/$row_a/checkpoints.part" "$out/$row_a/checkpoints"
fi
ONLY="$row_a $row_b" PARALLEL=2 THREADS=1 bash "$ROOT/recipes/queue.sh" "$queue" "$bin" "$out"
