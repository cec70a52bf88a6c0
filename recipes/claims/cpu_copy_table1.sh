#!/usr/bin/env bash
# Britz et al. Table 1 at one copy length on a 2-core CPU: every system of the table (no
# attention, memory K = 1 / 4 / 16 / 32 / 64 with the paper's sigmoid gates, global attention)
# trained to its own plateau (up to EPOCHS epochs, stopped once greedy validation BLEU has not
# risen for PATIENCE epochs), two single-thread lanes side by side, then one decoding pass over
# all systems alone on the machine (beam 10; its seconds compare within the table) with the
# Fig. 3a curves and the heatmaps.
#   LENGTH=50 bash recipes/claims/cpu_copy_table1.sh [OUT_DIR]
# Resumable: a finished system is skipped, an interrupted one resumes from checkpoint_last.pt.
# Environment: LENGTH (50), EPOCHS (30), PATIENCE (3), and memory_attention.sh's own settings.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:-$ROOT/outputs/copy${LENGTH:-50}}
export STAGES=toy LENGTHS=${LENGTH:-50} NORM_K="" EPOCHS=${EPOCHS:-30} PATIENCE=${PATIENCE:-3}
export OMP_NUM_THREADS=1 DEVICE=${DEVICE:-cpu}
mkdir -p "$OUT"
# The data first, so that the two lanes do not both write it.
BASELINES="" SIZES="" CURVE_LENGTH=0 bash "$ROOT/recipes/memory_attention.sh" "" "$OUT"
CURVE_LENGTH=0 BASELINES=noattn SIZES="1 4" \
  bash "$ROOT/recipes/memory_attention.sh" "" "$OUT" > "$OUT/laneA.log" 2>&1 &
lane_a=$!
CURVE_LENGTH=0 BASELINES=global SIZES="64 32 16" \
  bash "$ROOT/recipes/memory_attention.sh" "" "$OUT" > "$OUT/laneB.log" 2>&1 &
lane_b=$!
status=0
wait "$lane_a" || status=$?
wait "$lane_b" || status=$?
[ "$status" -eq 0 ] || { echo "[cpu_copy_table1] a lane stopped (exit $status): see $OUT/lane{A,B}.log" >&2; exit "$status"; }
# Every system finished: this pass only decodes (the table, in the recipe's order) and plots.
CURVE_LENGTH=$LENGTHS ALIGN_IDS=${ALIGN_IDS:-"2 3 4"} bash "$ROOT/recipes/memory_attention.sh" "" "$OUT"
