#!/usr/bin/env bash
# The De-En (Multi30k) claim runs a 2-core CPU still owes, as two single-thread lanes side by
# side: each lane trains its rows (QUEUE:NAME, a row NAME of recipes/claims/QUEUE.queue) one after
# another to the plateau rule's end and decodes each on valid, test and test1 (test_2017) as it
# finishes, greedy for the streaming archs, MILk also with --monotonic-stop cumulative.
#   bash recipes/claims/cpu_deen_lanes.sh [DATA_DIR] [OUT_DIR]
# DATA_DIR: the Multi30k corpus (`prepare_data.sh deen`'s input; e.g. ../shared/data/multi30k_de_en),
# needed only while OUT_DIR/prep/data-bin does not exist. OUT_DIR (outputs/claims/deen): each
# queue's runs and tables go to OUT_DIR/cpu_QUEUE less its "deen_" (cpu_waitk_seeds, cpu_milk5, ...).
# Resumable: run it again after an interruption; a finished row is skipped, an interrupted one
# resumes from its checkpoint_last.pt. Logs: OUT_DIR/lane{A,B}.log.
# Environment: LANE_A, LANE_B (rows in order; the defaults below), LANES (2, the default: the two
# lanes side by side on one thread each; 1: every row of LANE_A then LANE_B in one lane on two
# threads, faster on an idle 2-core machine: 87 s an epoch of De-En `lstm_global` against 3-5 min
# for each of two one-thread lanes, measured 2026-12-01), and queue.sh's own settings.
# Machines differ: on 2026-12-05 evening's machine an epoch of De-En `lstm_flexible` took 6.1-7.7
# minutes on two threads alone (10-24 beside a fresh-clone check; 9.6 alone on 2026-12-06), so
# one De-En model outlasts a 3-hour session; a row resumes only where its folder survived.
# The default rows (after 2026-12-08, early): MILk lambda 0.1 held's seed 1 in the conditional
# order (deen_cond2:milk_0.1_hold_cond_s1; paused at epoch 8 on 2026-12-07, its folder lost with
# that machine; started again on 2026-12-08), then that order's wait-5 at seed 2
# (deen_cond4:waitk5_cond_s2, the line at MILk's DAL 5) in lane A; MILk lambda 0.3 with noise 16's
# seed 2 in that order (deen_cond4:milk_0.3_noise16_cond_s2), then SACT in the authors' Luong order
# (deen_step:sact_embed_luong_s1) in lane B. The second seeds of that order's wait-1 and wait-3
# (deen_cond3:waitk1_cond_s2, waitk3_cond_s2), the line at DAL 3 with two seeds a point, reached
# the rule's end on 2026-12-08 and 2026-12-07 late evening.
# MILk lambda 1 with noise 16's seeds 2 and 3 in the conditional order
# (deen_cond2:milk_1_noise16_cond_s2, _s3) reached the rule's end on 2026-12-07 afternoon and
# evening. Wait-1 in that order (deen_cond2:waitk1_cond_s1, the line below DAL 3.2) reached the
# rule's end on 2026-12-07 midday. MILk lambda 1 with noise 16 in the conditional order
# (deen_cond2:milk_1_noise16_cond_s1, level with that order's wait-3) reached the rule's end on
# 2026-12-07 late morning; wait-3 in that order (deen_cond:waitk3_cond_s1), MILk's best recipe there
# (deen_cond:milk_0.3_noise16_cond_s1: lambda 0.3, noise 16, at wait-5's lag) and wait-7
# (deen_cond2:waitk7_cond_s1) reached the rule's end on 2026-12-07, wait-5 there
# (deen_cond:waitk5_cond_s1) on 2026-12-06 late evening; MILk lambda 0.1 held in the conditional
# order at seed 2 (deen_cond:milk_0.1_hold_cond_s2) and MoChA's second seed at noise 4
# (deen_mocha:mocha_0.1_s2) on 2026-12-06, flexible attention's seeds 2 and 3 (deen_5:flexible_s2,
# deen_7:flexible_s3) on 2026-12-05 and 2026-12-06 (docs/results.md). SACT's second and third seeds
# (deen_5:sact_embed_s2, deen_7:sact_embed_s3) and lstm_global's third (deen_7:global_bi_s3) ran on
# 2026-12-05. MoChA at noise 16 (seeds 1-3, and chunk 8 at seed 1) and hard monotonic attention with
# the same noise ran on 2026-12-04/05 (deen_mocha:mocha_0.1_noise16_s1.._s3, _chunk8_s1,
# deen_mocha:monotonic_0.1_noise16_s1; docs/results.md).
# A finished row named again is skipped.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
DATA_DIR=$(arg_path "${1:-}" "")
OUT=$(arg_path "${2:-}" "$ROOT/outputs/claims/deen")
LANE_A=${LANE_A:-"deen_cond2:milk_0.1_hold_cond_s1 deen_cond4:waitk5_cond_s2"}
LANE_B=${LANE_B:-"deen_cond4:milk_0.3_noise16_cond_s2 deen_step:sact_embed_luong_s1"}
LANES=${LANES:-2}
[[ $LANES == 1 || $LANES == 2 ]] || usage_error "LANES=$LANES: valid values are 1 (one lane, two threads) \
and 2 (two lanes side by side, one thread each)"

# every row named must exist before anything trains
for item in $LANE_A $LANE_B; do
  [[ $item == *:* ]] || usage_error "lane row '$item' is not QUEUE:NAME (e.g. deen_milk5:milk_0.1_hold_s2)"
  queue=$ROOT/recipes/claims/${item%%:*}.queue
  [ -f "$queue" ] || usage_error "lane row '$item': no queue recipes/claims/${item%%:*}.queue (the queues: \
$(cd "$ROOT/recipes/claims" && ls -- *.queue | sed 's/\.queue$//' | paste -sd ' '))"
  awk -v name="${item#*:}" '$1 == name {found = 1} END {exit !found}' "$queue" || usage_error "lane row '$item': ${item#*:} is not a row of \
recipes/claims/${item%%:*}.queue (its rows: $(awk 'NF && $1 !~ /^#/ {print $1}' "$queue" | paste -sd ' '))"
done

DATA_BIN=$OUT/prep/data-bin
if [ ! -f "$OUT/prep/corpus.json" ]; then
  [ -n "$DATA_DIR" ] || usage_error "$OUT/prep/data-bin does not exist: give the Multi30k corpus \
as DATA_DIR (e.g. ../shared/data/multi30k_de_en)"
  bash "$ROOT/recipes/prepare_data.sh" deen "$DATA_DIR" "$OUT/prep"
fi
mkdir -p "$OUT"

lane() {  # THREADS ROWS...: train and decode each row in turn, each on THREADS threads
  local threads=$1
  shift
  for item in "$@"; do
    queue=${item%%:*}
    ONLY=${item#*:} DEVICE=cpu PARALLEL=1 THREADS=$threads SUBSETS="valid test test1" TOKENIZE=13a \
      MONOTONIC_STOP=cumulative GEN_FLAGS="${DEEN_DETOK[*]}" \
      bash "$ROOT/recipes/queue.sh" "$ROOT/recipes/claims/$queue.queue" "$DATA_BIN" "$OUT/cpu_${queue#deen_}"
  done
}
if [ "$LANES" = 1 ]; then
  say "one lane, two threads: $LANE_A $LANE_B (log: $OUT/laneA.log)"
  # shellcheck disable=SC2086  # the lanes are word lists
  lane 2 $LANE_A $LANE_B >> "$OUT/laneA.log" 2>&1 || fail "the lane stopped (exit $?): see $OUT/laneA.log"
  say "the lane finished: tables in $OUT/cpu_*/table.{valid,test,test1}.tsv"
  exit 0
fi
say "lane A: $LANE_A (log: $OUT/laneA.log)"
say "lane B: $LANE_B (log: $OUT/laneB.log)"
# shellcheck disable=SC2086  # the lanes are word lists
lane 1 $LANE_A >> "$OUT/laneA.log" 2>&1 &
lane_a=$!
# shellcheck disable=SC2086
lane 1 $LANE_B >> "$OUT/laneB.log" 2>&1 &
lane_b=$!
status=0
wait "$lane_a" || status=$?
wait "$lane_b" || status=$?
[ "$status" -eq 0 ] || fail "a lane stopped (exit $status): see $OUT/lane{A,B}.log"
say "both lanes finished: tables in $OUT/cpu_*/table.{valid,test,test1}.tsv"
