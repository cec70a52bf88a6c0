#!/usr/bin/env bash
# Shu & Nakayama (2017) protocol on English-Japanese (small_parallel_enja), CPU-sized.
#   bash recipes/flexible_attention.sh [DATA_DIR] [OUT_DIR]
# DATA_DIR: the corpus's raw files (train/dev/test.{en,ja}); downloaded when it does not exist.
# 1. train lstm_global, lstm_local (D=10) and lstm_flexible (sigma=1.5) with beta = 0;
# 2. fine-tune lstm_flexible one epoch with --gt-regularizer-weight 0.1 (Eq. 9);
# 3. pick tau on dev from (0.8 1.0 1.2 1.4 1.6): the smallest whose dev BLEU is at most 0.5 below
#    that of the plain flexible model with tau=inf (the paper's reference, sec. 5.3, for both the
#    plain and the fine-tuned model);
# 4. Table 1 on test (window, BLEU) for global, local, flexible inf, flexible tau*, fine-tuned tau*;
# 5. the Fig. 3 sweep of tau on dev and test with the fine-tuned model, and its plot;
# 6. vision-span plots (Fig. 1b) for a few test sentences.
# Environment: EPOCHS (8), BEAM (5; the paper uses 20), SENTENCES ("1 2 3" for the span plots),
# FIG3_SUBSETS ("valid test"), DEVICE (auto: the GPU when there is one; cpu, cuda).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
DATA=$(arg_path "${1:-}" "$ROOT/../shared/data/small_parallel_enja")
OUT=$(arg_path "${2:-}" "$ROOT/outputs/flexible_enja")
cd "$ROOT"
BEAM=${BEAM:-5}
SENTENCES=${SENTENCES:-"1 2 3"}
BIN=$OUT/data-bin
[ -f "$BIN/dict.en.txt" ] || bash recipes/prepare_data.sh enja "$DATA" "$OUT"

bash recipes/train.sh lstm_global "$BIN" "$OUT/lstm_global"
bash recipes/train.sh lstm_local "$BIN" "$OUT/lstm_local" --local-window-d 10
bash recipes/train.sh lstm_flexible "$BIN" "$OUT/lstm_flexible" --flex-sigma 1.5
# fine-tuning: one more epoch from the trained model, beta = 0.1
EPOCHS=1 bash recipes/train.sh lstm_flexible "$BIN" "$OUT/lstm_flexible_ft" --flex-sigma 1.5 \
  --finetune-from-model "$OUT/lstm_flexible/checkpoints/checkpoint_best.pt" \
  --criterion flexible_attention_cross_entropy --gt-regularizer-weight 0.1

# decode LABEL CHECKPOINT SUBSET TAU: writes $OUT/decode/<slug>.{txt,jsonl,log},
# prints "LABEL<TAB>window<TAB>BLEU"
slug() { echo "$1" | tr -c 'A-Za-z0-9._\n-' '_'; }
decode() {
  local f
  f="$OUT/decode/$(slug "$1")"
  mkdir -p "$OUT/decode"
  say "decoding $1 ($3, tau = $4)"
  fairseq-generate "$BIN" --user-dir fairseq_vision_attn --task translation_vision_attn --path "$2" \
    --gen-subset "$3" --beam "$BEAM" --batch-size 64 "${DEVICE_FLAGS[@]}" --vision-span-threshold "$4" \
    --stats-output "$f.jsonl" > "$f.txt" 2> "$f.log" || fail "decoding $1 failed: $(explain "$f.log") (log: $f.log)"
  python -m fairseq_vision_attn.report --points "$1=$f.txt:$f.jsonl"
}
ckpt() { echo "$OUT/$1/checkpoints/checkpoint_best.pt"; }

# pick_tau MODEL [REFERENCE_BLEU]: dev sweep; prints the smallest tau whose dev BLEU is at most 0.5
# below REFERENCE_BLEU (default: MODEL's own tau=inf dev BLEU), or inf when none is
pick_tau() {
  local model=$1 rows="$OUT/dev_sweep.$1.tsv"
  decode "$model.dev.inf" "$(ckpt "$model")" valid inf > "$rows"
  for tau in 0.8 1.0 1.2 1.4 1.6; do decode "$model.dev.$tau" "$(ckpt "$model")" valid "$tau" >> "$rows"; done
  python - "$rows" "${2:-}" <<'PY'
import sys
rows = [line.split("\t") for line in open(sys.argv[1]).read().splitlines()]
reference = float(sys.argv[2] or rows[0][2])
ok = [r for r in rows[1:] if float(r[2]) >= reference - 0.5]
print(ok[0][0].rsplit(".dev.", 1)[1] if ok else "inf")
PY
}
tau=$(pick_tau lstm_flexible)
reference=$(head -n 1 "$OUT/dev_sweep.lstm_flexible.tsv" | cut -f 3)
tau_ft=$(pick_tau lstm_flexible_ft "$reference")
echo "chosen thresholds: flexible tau*=$tau, fine-tuned tau*=$tau_ft" > "$OUT/thresholds.txt"
say "chosen thresholds (dev): flexible tau* = $tau, fine-tuned tau* = $tau_ft"

table=$OUT/table1.tsv
{
  echo -e "# system\twindow\tBLEU (test, sacrebleu -tok none, beam $BEAM)"
  decode global "$(ckpt lstm_global)" test inf
  decode local "$(ckpt lstm_local)" test inf
  decode "flexible(tau=inf)" "$(ckpt lstm_flexible)" test inf
  decode "flexible(tau=$tau)" "$(ckpt lstm_flexible)" test "$tau"
  decode "+fine-tuning(tau=$tau_ft)" "$(ckpt lstm_flexible_ft)" test "$tau_ft"
} > "$table"
column -t -s$'\t' "$table"

for subset in ${FIG3_SUBSETS:-valid test}; do
  points=$OUT/fig3.$subset.tsv
  : > "$points"
  for tau in 0.3 0.5 0.8 1.0 1.2 1.4 1.6 5.0 8.0 inf; do
    decode "ft.$subset.$tau" "$(ckpt lstm_flexible_ft)" "$subset" "$tau" | sed "s/^ft\.$subset\.//" >> "$points"
  done
  python -m fairseq_vision_attn.plots tradeoff --points "$points" --out "$OUT/fig3_$subset.png" \
    --title "fine-tuned flexible attention, $subset: window vs BLEU (tau labels)"
done
# shellcheck disable=SC2086
ft="$OUT/decode/$(slug "+fine-tuning(tau=$tau_ft)")"
python -m fairseq_vision_attn.plots span --generate "$ft.txt" --stats "$ft.jsonl" --ids $SENTENCES \
  --out-dir "$OUT/spans"
say "table: $table; plots: $OUT/fig3_{valid,test}.png, $OUT/spans/"
