#!/usr/bin/env bash
# Shu & Nakayama (2017) protocol, CPU-sized, on English-Japanese (small_parallel_enja; PAIR=enja,
# the default) or German-English (Multi30k; PAIR=deen, the paper's second pair).
#   bash recipes/flexible_attention.sh [DATA_DIR] [OUT_DIR]
# DATA_DIR: the corpus's raw files (enja: train/dev/test.{en,ja}; deen: ../shared/data/multi30k_de_en's
# layout); downloaded when it does not exist.
# 1. train lstm_global, lstm_local (D=10) and lstm_flexible (sigma=1.5) with beta = 0;
# 2. fine-tune lstm_flexible one epoch with --gt-regularizer-weight 0.1 (Eq. 9) at lr 1.25e-4;
# 3. pick tau on dev from TAUS: the smallest whose dev BLEU is at most 0.5 below
#    that of the plain flexible model with tau=inf (the paper's reference, sec. 5.3, for both the
#    plain and the fine-tuned model);
# 4. Table 1 on test (window, BLEU) for global, local, flexible inf, flexible tau*, fine-tuned tau*
#    (deen: also on test1 = Multi30k 2017, $OUT/table1.test1.tsv);
# 5. the Fig. 3 sweep of tau on dev and test with the fine-tuned model, and its plot;
# 6. vision-span plots (Fig. 1b) for a few test sentences.
# PAIR=deen: the data README's De-En settings (--dropout 0.3 --share-decoder-input-output-embed, also
# for the fine-tuning), BLEU of detokenized text (--remove-bpe --tokenizer moses, sacrebleu 13a; the
# span plots from a decoding in BPE units).
# Environment: PAIR (enja, deen), EPOCHS (8), BEAM (5; the paper uses 20), SENTENCES ("1 2 3" for the span plots),
# FIG3_SUBSETS ("valid test"; empty: no Fig. 3 sweep), DEVICE (auto: the GPU when there is one; cpu, cuda),
# TAUS (the dev grid of step 3: "0.3 0.5 0.8 1.0 1.2 1.4 1.6"; the paper's is 0.8-1.6),
# FT_BETA (0.1), FT_LR (0.000125: a converged model's last rate under the plateau rule; at the
# training rate 0.001 a fresh Adam lost 3 dev BLEU, docs/results.md) and FT_EPOCHS (1): step 2,
# MODELS (directories, ':'-separated, of systems trained by recipes/queue.sh under the plateau
# rule, named as in recipes/claims/enja_1.queue: global_s1, local_s1, flexible_s1; deen: global_bi_s1
# of deen_1.queue, local_s1 and flexible_s1 of deen_3.queue): step 1 trains nothing and uses their
# best checkpoints, each system from the first directory that has it; a Table 1 row whose system
# the queue has not finished is left out.
# SEED (1): with MODELS, the seed whose systems are used (global_sSEED or global_bi_sSEED,
# local_sSEED, flexible_sSEED).
# DATA_BIN: a prepared data-bin (e.g. the one MODELS were trained on) instead of preparing the
# corpus into OUT_DIR/data-bin.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PAIR=${PAIR:-enja}
case $PAIR in
  enja) corpus=small_parallel_enja; names=(global local flexible); tests=(test); tokenize=none
        gen=(); arch_flags=() ;;
  deen) corpus=multi30k_de_en; names=(global_bi local flexible); tests=(test test1); tokenize=13a
        gen=("${DEEN_DETOK[@]}")
        arch_flags=(--dropout 0.3 --share-decoder-input-output-embed) ;;
  *) usage_error "PAIR: '$PAIR' is not one of: enja, deen" ;;
esac
DATA=$(arg_path "${1:-}" "$ROOT/../shared/data/$corpus")
OUT=$(arg_path "${2:-}" "$ROOT/outputs/flexible_$PAIR")
cd "$ROOT"
BEAM=${BEAM:-5}
SENTENCES=${SENTENCES:-"1 2 3"}
TAUS=${TAUS:-"0.3 0.5 0.8 1.0 1.2 1.4 1.6"}
FT_BETA=${FT_BETA:-0.1}; FT_LR=${FT_LR:-0.000125}; FT_EPOCHS=${FT_EPOCHS:-1}; SEED=${SEED:-1}
for tau in $TAUS; do
  [[ $tau =~ ^[0-9]*\.?[0-9]+$ ]] || usage_error "TAUS: '$tau' is not a positive number"
done
[[ $FT_EPOCHS =~ ^[1-9][0-9]*$ ]] || usage_error "FT_EPOCHS: '$FT_EPOCHS' is not a positive integer"
[[ $SEED =~ ^[0-9]+$ ]] || usage_error "SEED: '$SEED' is not a seed (a non-negative integer)"
# model SYSTEM: MODELS' folder of SYSTEM (global, local, flexible) at SEED: the first directory of
# MODELS that has its best checkpoint, else (to name in an error) the one in MODELS' first directory
model() {
  local name dir first= dirs
  case $1 in global) name=${names[0]} ;; local) name=${names[1]} ;; *) name=${names[2]} ;; esac
  IFS=: read -ra dirs <<< "$MODELS"
  for dir in "${dirs[@]}"; do
    [ -n "$first" ] || first=$dir/${name}_s$SEED
    [ -f "$dir/${name}_s$SEED/checkpoints/checkpoint_best.pt" ] && { echo "$dir/${name}_s$SEED"; return; }
  done
  echo "$first"
}
# ckpt SYSTEM: its best checkpoint (SYSTEM: lstm_global, lstm_local, lstm_flexible, lstm_flexible_ft)
ckpt() {
  if [ -n "${MODELS:-}" ] && [ "$1" != lstm_flexible_ft ]; then
    echo "$(model "${1#lstm_}")/checkpoints/checkpoint_best.pt"
  else
    echo "$OUT/$1/checkpoints/checkpoint_best.pt"
  fi
}
if [ -n "${MODELS:-}" ]; then
  IFS=: read -ra dirs <<< "$MODELS"
  resolved=()
  for dir in "${dirs[@]}"; do resolved+=("$(arg_path "$dir" "")"); done
  MODELS=$(IFS=:; echo "${resolved[*]}")
  [ -f "$(ckpt lstm_flexible)" ] \
    || usage_error "MODELS: $(ckpt lstm_flexible) does not exist (train ${names[2]}_s$SEED with recipes/queue.sh)"
fi
if [ -n "${DATA_BIN:-}" ]; then
  BIN=$(arg_path "$DATA_BIN" "")
  [ -f "$BIN/dict.en.txt" ] || usage_error "DATA_BIN: $BIN has no dict.en.txt (not a data-bin of recipes/prepare_data.sh $PAIR)"
else
  BIN=$OUT/data-bin
  [ -f "$BIN/dict.en.txt" ] || bash recipes/prepare_data.sh "$PAIR" "$DATA" "$OUT"
fi

if [ -z "${MODELS:-}" ]; then
  bash recipes/train.sh lstm_global "$BIN" "$OUT/lstm_global" "${arch_flags[@]}"
  bash recipes/train.sh lstm_local "$BIN" "$OUT/lstm_local" --local-window-d 10 "${arch_flags[@]}"
  bash recipes/train.sh lstm_flexible "$BIN" "$OUT/lstm_flexible" --flex-sigma 1.5 "${arch_flags[@]}"
fi
# fine-tuning: FT_EPOCHS more epochs from the trained model with the g(t) regularizer (Eq. 9)
EPOCHS=$FT_EPOCHS bash recipes/train.sh lstm_flexible "$BIN" "$OUT/lstm_flexible_ft" --flex-sigma 1.5 \
  "${arch_flags[@]}" --finetune-from-model "$(ckpt lstm_flexible)" --lr "$FT_LR" \
  --criterion flexible_attention_cross_entropy --gt-regularizer-weight "$FT_BETA"

# decode LABEL CHECKPOINT SUBSET TAU [tokens]: writes $OUT/decode/<slug>.{txt,jsonl,log} (a
# SUBSET other than valid and test: <slug>.SUBSET.*), prints "LABEL<TAB>window<TAB>BLEU";
# "tokens": the output in the model's own units (no BPE removal, no detokenization: what the span
# plots label their rows and columns with) and no table row
slug() { echo "$1" | tr -c 'A-Za-z0-9._\n-' '_'; }
decode() {
  local f flags=("${gen[@]}")
  f="$OUT/decode/$(slug "$1")"
  case $3 in valid | test) ;; *) f+=".$3" ;; esac  # test1: beside test's files of the same label
  [ "${5:-}" = tokens ] && flags=()
  mkdir -p "$OUT/decode"
  say "decoding $1 ($3, tau = $4)"
  fairseq-generate "$BIN" --user-dir fairseq_vision_attn --task translation_vision_attn --path "$2" \
    --gen-subset "$3" --beam "$BEAM" --batch-size 64 "${DEVICE_FLAGS[@]}" --vision-span-threshold "$4" \
    "${flags[@]}" --stats-output "$f.jsonl" > "$f.txt" 2> "$f.log" \
    || fail "decoding $1 failed: $(explain "$f.log") (log: $f.log)"
  [ "${5:-}" = tokens ] || python -m fairseq_vision_attn.report --tokenize "$tokenize" --points "$1=$f.txt:$f.jsonl"
}

# pick_tau MODEL [REFERENCE_BLEU]: dev sweep; prints the smallest tau whose dev BLEU is at most 0.5
# below REFERENCE_BLEU (default: MODEL's own tau=inf dev BLEU), or inf when none is
pick_tau() {
  local model=$1 rows="$OUT/dev_sweep.$1.tsv"
  decode "$model.dev.inf" "$(ckpt "$model")" valid inf > "$rows"
  for tau in $TAUS; do decode "$model.dev.$tau" "$(ckpt "$model")" valid "$tau" >> "$rows"; done
  python - "$rows" "${2:-}" <<'PY'
import sys
rows = [line.split("\t") for line in open(sys.argv[1]).read().splitlines()]
reference = float(sys.argv[2] or rows[0][2])
taus = [r[0].rsplit(".dev.", 1)[1] for r in rows[1:] if float(r[2]) >= reference - 0.5]
print(min(taus, key=float) if taus else "inf")
PY
}
tau=$(pick_tau lstm_flexible)
reference=$(head -n 1 "$OUT/dev_sweep.lstm_flexible.tsv" | cut -f 3)
tau_ft=$(pick_tau lstm_flexible_ft "$reference")
echo "chosen thresholds: flexible tau*=$tau, fine-tuned tau*=$tau_ft" > "$OUT/thresholds.txt"
say "chosen thresholds (dev): flexible tau* = $tau, fine-tuned tau* = $tau_ft"

for subset in "${tests[@]}"; do
  table=$OUT/table1.tsv
  [ "$subset" = test ] || table=$OUT/table1.$subset.tsv
  {
    echo -e "# system\twindow\tBLEU ($subset, sacrebleu -tok $tokenize, beam $BEAM)"
    for system in global local; do
      if [ -z "${MODELS:-}" ] || [ -f "$(model "$system")/done" ]; then
        decode "$system" "$(ckpt "lstm_$system")" "$subset" inf
      else say "MODELS has no finished $(basename "$(model "$system")") (no done marker): its Table 1 row is left out"; fi
    done
    decode "flexible(tau=inf)" "$(ckpt lstm_flexible)" "$subset" inf
    decode "flexible(tau=$tau)" "$(ckpt lstm_flexible)" "$subset" "$tau"
    decode "+fine-tuning(tau=$tau_ft)" "$(ckpt lstm_flexible_ft)" "$subset" "$tau_ft"
  } > "$table"
  column -t -s$'\t' "$table"
done

for subset in ${FIG3_SUBSETS-valid test}; do
  points=$OUT/fig3.$subset.tsv
  : > "$points"
  for tau in 0.3 0.5 0.8 1.0 1.2 1.4 1.6 5.0 8.0 inf; do
    decode "ft.$subset.$tau" "$(ckpt lstm_flexible_ft)" "$subset" "$tau" | sed "s/^ft\.$subset\.//" >> "$points"
  done
  python -m fairseq_vision_attn.plots tradeoff --points "$points" --out "$OUT/fig3_$subset.png" \
    --title "fine-tuned flexible attention, $subset: window vs BLEU (tau labels)"
done
ft="$OUT/decode/$(slug "+fine-tuning(tau=$tau_ft)")"
if [ ${#gen[@]} -gt 0 ]; then  # the plots label the model's own units
  decode "spans(tau=$tau_ft)" "$(ckpt lstm_flexible_ft)" test "$tau_ft" tokens
  ft="$OUT/decode/$(slug "spans(tau=$tau_ft)")"
fi
# shellcheck disable=SC2086
python -m fairseq_vision_attn.plots span --generate "$ft.txt" --stats "$ft.jsonl" --ids $SENTENCES \
  --out-dir "$OUT/spans"
say "table: $OUT/table1*.tsv; plots: $OUT/fig3_{valid,test}.png, $OUT/spans/"
