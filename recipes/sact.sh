#!/usr/bin/env bash
# Lin et al. (2018) SACT on real data, CPU-sized: lstm_global against lstm_sact, and global
# attention trained with fixed temperatures (the paper's Fig. 1 control).
#   bash recipes/sact.sh [DATA_DIR] [OUT_DIR]
# DATA_DIR: the corpus's raw files (train/dev/test.{en,ja}), as for flexible_attention.sh; the
# two recipes can share OUT_DIR (the binarized data and lstm_global are then reused).
# 1. train lstm_global, lstm_sact (--sact-lambda LAMBDA) and lstm_global with
#    --attention-temperature fixed --fixed-temperature T for T in FIXED (T = 1 is lstm_global;
#    0.25 = 1/lambda is where our En-Ja SACT model's temperature saturated in a 4-epoch run, docs/results.md);
# 2. decode the test set: one BLEU table ($OUT/sact_table.tsv) and the Fig. 1 plot (BLEU against
#    the fixed temperature, SACT as a line);
# 3. temperature heatmaps (Fig. 2) for a few test sentences, and the mean temperature on the
#    most frequent target words (function words) against the rest.
# Environment: EPOCHS (8), BEAM (5), LAMBDA (4), FIXED ("0.8 1.2 0.25 0.9 1.1"), SENTENCES ("1 2 3"),
# FUNCTION_WORDS (50: the target dictionary's most frequent types counted as function words).
# DEVICE (auto: the GPU when there is one; cpu, cuda).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
DATA=$(arg_path "${1:-}" "$ROOT/../shared/data/small_parallel_enja")
OUT=$(arg_path "${2:-}" "$ROOT/outputs/sact_enja")
cd "$ROOT"
BEAM=${BEAM:-5}
LAMBDA=${LAMBDA:-4}
FIXED=${FIXED:-"0.8 1.2 0.25 0.9 1.1"}
SENTENCES=${SENTENCES:-"1 2 3"}
FUNCTION_WORDS=${FUNCTION_WORDS:-50}

BIN=$OUT/data-bin
[ -f "$BIN/dict.en.txt" ] || bash recipes/prepare_data.sh enja "$DATA" "$OUT"

bash recipes/train.sh lstm_global "$BIN" "$OUT/lstm_global"
bash recipes/train.sh lstm_sact "$BIN" "$OUT/lstm_sact" --sact-lambda "$LAMBDA"
for t in $FIXED; do
  bash recipes/train.sh lstm_global "$BIN" "$OUT/lstm_global_T$t" \
    --attention-temperature fixed --fixed-temperature "$t"
done

# decode NAME SUBSET: writes $OUT/decode/NAME.{txt,jsonl,log}, prints "NAME<TAB>BLEU<TAB>..."
decode() {
  local f="$OUT/decode/$1.$2"
  mkdir -p "$OUT/decode"
  say "decoding $1 ($2)"
  fairseq-generate "$BIN" --user-dir fairseq_vision_attn --task translation_vision_attn \
    --path "$OUT/$1/checkpoints/checkpoint_best.pt" --gen-subset "$2" --beam "$BEAM" \
    --batch-size 64 "${DEVICE_FLAGS[@]}" --stats-output "$f.jsonl" > "$f.txt" 2> "$f.log" \
    || fail "decoding $1 failed: $(explain "$f.log") (log: $f.log)"
  echo "$1=$f.txt:$f.jsonl"
}

systems=("$(decode lstm_global test)" "$(decode lstm_sact test)")
for t in $FIXED; do systems+=("$(decode "lstm_global_T$t" test)"); done
table=$OUT/sact_table.tsv
python -m fairseq_vision_attn.report "${systems[@]}" | tee "$table"
python -m fairseq_vision_attn.plots fixed-temperature --table "$table" --out "$OUT/sact_fig1.png"

sact=$OUT/decode/lstm_sact.test
# shellcheck disable=SC2086
python -m fairseq_vision_attn.plots temperature --generate "$sact.txt" --stats "$sact.jsonl" \
  --ids $SENTENCES --out-dir "$OUT/temperatures"
python -m fairseq_vision_attn.analysis temperature-by-word --generate "$sact.txt" --stats "$sact.jsonl" \
  --dict "$BIN/dict.ja.txt" --function-words "$FUNCTION_WORDS" | tee "$OUT/sact_function_words.txt"
say "table: $table; plots: $OUT/sact_fig1.png, $OUT/temperatures/; words: $OUT/sact_function_words.txt"
