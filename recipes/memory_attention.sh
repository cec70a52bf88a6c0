#!/usr/bin/env bash
# Britz et al. (2017) fixed-size memory attention, CPU-sized.
#   bash recipes/memory_attention.sh [REAL_DATA_DIR] [OUT_DIR]
# Stage "toy" (Table 1 and Fig. 3a): the copy task with vocabulary 20 and random lengths up to L
# for L in LENGTHS; lstm_noattn, lstm_memory for K in SIZES with the paper's sigmoid encoder
# scores (--memory-encoder-score sigmoid), lstm_global (and K=NORM_K with --memory-normalize
# slots, the paper's literal Eq. 5; K=SOFTMAX_K with the package's default softmax encoder
# scores, each slot a softmax over the positions instead of sigmoid gates); BLEU and
# fairseq-generate seconds on the validation set (beam BEAM), one table ($OUT/memory_table.tsv);
# validation-BLEU training curves for L=CURVE_LENGTH ($OUT/memory_fig3a.png); alpha.beta heatmaps
# for a few validation sentences.
# Stage "real": on small_parallel_enja (REAL_DATA_DIR), lstm_memory K=32/64 with and without
# position encodings against lstm_global ($OUT/memory_real.tsv), default (softmax) encoder scores.
# Environment: STAGES ("toy real"), LENGTHS ("10 50 100"; the paper adds 200), SIZES ("1 4 16 32
# 64"), NORM_K (16; empty: no slots-normalised system), SOFTMAX_K (empty: no softmax-slot
# system), BASELINES ("noattn global"), TRAIN (20000; paper 100000), VALID (1000), EPOCHS (10),
# BATCH (16; paper 128), LR (0.001; paper 0.0001), PATIENCE (empty: every run trains EPOCHS
# epochs; P: a run stops once its greedy validation BLEU has not risen for P epochs, fairseq's
# --patience, so EPOCHS is a ceiling and each system stops at its own plateau),
# PARAM_INIT (0.1, --param-init of every run; 0 = PyTorch's defaults, the earlier
# initialisation), DIM (128), LAYERS (1; paper 2x256), BEAM (10),
# CURVE_LENGTH (50), ALIGN_K (16: the K of the heatmaps), ALIGN_IDS ("0 1 2": validation sentences
# drawn), REAL_EPOCHS (8). Empty LENGTHS, SIZES, NORM_K, SOFTMAX_K or BASELINES mean none.
# On a CPU a batch of 16 learns the copy task much faster per second than the paper's 128: 8x the
# updates per epoch for 1.7x the time per epoch (docs/results.md, toy copy section).
# DEVICE (auto: the GPU when there is one; cpu, cuda).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
REAL_DATA=$(arg_path "${1:-}" "$ROOT/../shared/data/small_parallel_enja")
OUT=$(arg_path "${2:-}" "$ROOT/outputs/memory")
check_order "$REAL_DATA" "$OUT" train.en
cd "$ROOT"
STAGES=${STAGES:-"toy real"}
LENGTHS=${LENGTHS-"10 50 100"}
SIZES=${SIZES-"1 4 16 32 64"}
NORM_K=${NORM_K-16}
SOFTMAX_K=${SOFTMAX_K-}
BASELINES=${BASELINES-"noattn global"}
TRAIN=${TRAIN:-20000}
VALID=${VALID:-1000}
EPOCHS=${EPOCHS:-10}
BATCH=${BATCH:-16}
LR=${LR:-0.001}
PARAM_INIT=${PARAM_INIT:-0.1}
DIM=${DIM:-128}
LAYERS=${LAYERS:-1}
BEAM=${BEAM:-10}
CURVE_LENGTH=${CURVE_LENGTH:-50}
ALIGN_K=${ALIGN_K:-16}
ALIGN_IDS=${ALIGN_IDS:-"0 1 2"}
for b in $BASELINES; do
  [[ $b == noattn || $b == global ]] || { echo "BASELINES: '$b' is not one of: noattn, global" >&2; exit 2; }
done
[[ $EPOCHS =~ ^[1-9][0-9]*$ ]] || usage_error "EPOCHS: '$EPOCHS' is not a positive integer"
PATIENCE=${PATIENCE:-}
[[ -z $PATIENCE || $PATIENCE =~ ^[1-9][0-9]*$ ]] \
  || usage_error "PATIENCE: '$PATIENCE' is not a positive integer (epochs without a better validation BLEU)"
STOP_RULE=()
[ -z "$PATIENCE" ] || STOP_RULE=(--patience "$PATIENCE")
for k in $SIZES $NORM_K $SOFTMAX_K; do
  [[ $k =~ ^[1-9][0-9]*$ ]] || { echo "SIZES / NORM_K / SOFTMAX_K: '$k' is not a positive integer (the memory size K)" >&2; exit 2; }
done
mkdir -p "$OUT"

# train_toy BIN DIR ARCH [flags...]
train_toy() {
  local bin=$1 dir=$2 arch=$3; shift 3
  # done holds the EPOCHS it finished at (empty: written before it did; taken as finished):
  # skipped at that EPOCHS or fewer; a larger EPOCHS, or an interrupted run, resumes from
  # checkpoint_last.pt
  if [ -f "$dir/done" ]; then
    local trained
    trained=$(cat "$dir/done")
    if [ -z "$trained" ] || [ "$trained" -ge "$EPOCHS" ]; then return 0; fi
    rm "$dir/done"
  fi
  mkdir -p "$dir"
  train_logged "$(basename "$(dirname "$dir")")/$(basename "$dir")" "$dir/train.log" "$EPOCHS" \
  fairseq-train "$bin" --user-dir fairseq_vision_attn --task translation_vision_attn --arch "$arch" \
    --encoder-embed-dim "$DIM" --encoder-hidden-size "$DIM" --encoder-layers "$LAYERS" \
    --decoder-embed-dim "$DIM" --decoder-hidden-size "$DIM" --decoder-layers "$LAYERS" \
    --decoder-out-embed-dim "$DIM" --dropout 0.2 --optimizer adam --lr "$LR" --clip-norm 3 \
    --param-init "$PARAM_INIT" --batch-size "$BATCH" --max-tokens 12000 --max-epoch "$EPOCHS" \
    --criterion cross_entropy "${DEVICE_FLAGS[@]}" \
    --num-workers 0 --seed 1 --save-dir "$dir" --no-epoch-checkpoints --log-format simple \
    --log-interval 100 --max-source-positions 1024 --max-target-positions 1024 \
    --eval-bleu --eval-bleu-detok space --eval-bleu-args '{"beam": 1}' --best-checkpoint-metric bleu \
    --maximize-best-checkpoint-metric "${STOP_RULE[@]}" "$@"
  echo "$EPOCHS" > "$dir/done"
}

# decode_toy BIN DIR NAME: prints "NAME<TAB>BLEU<TAB>seconds" (fairseq-generate's own timing)
decode_toy() {
  local bin=$1 dir=$2 name=$3
  say "decoding $name (valid, beam $BEAM)"
  fairseq-generate "$bin" --user-dir fairseq_vision_attn --task translation_vision_attn \
    --path "$dir/checkpoint_best.pt" --gen-subset valid --beam "$BEAM" --batch-size 50 "${DEVICE_FLAGS[@]}" \
    --max-len-a 1.2 --max-len-b 10 > "$dir/generate.txt" 2> "$dir/generate.log" \
    || fail "decoding $name failed: $(explain "$dir/generate.log") (log: $dir/generate.log)"
  local bleu seconds
  bleu=$(python -m fairseq_vision_attn.report "x=$dir/generate.txt" | tail -n 1 | cut -f 2)
  seconds=$(grep -o "Translated .* in [0-9.]*s" "$dir/generate.log" | sed 's/.* in \([0-9.]*\)s/\1/')
  echo -e "$name\t$bleu\t$seconds"
}

if [[ " $STAGES " == *" toy "* ]]; then
  table=$OUT/memory_table.tsv
  echo -e "# length\tsystem\tBLEU (valid)\tdecode seconds (valid, beam $BEAM)" > "$table"
  for L in $LENGTHS; do
    d=$OUT/copy$L
    if [ ! -f "$d/data-bin/dict.src.txt" ]; then
      say "copy task, lengths 1-$L: generating and binarizing"
      python -m fairseq_vision_attn.toydata --task copy --out-dir "$d/raw" --train-size "$TRAIN" \
        --valid-size "$VALID" --test-size 100 --vocab-size 20 --min-len 1 --max-len "$L" --seed 1
      fairseq-preprocess --source-lang src --target-lang tgt --trainpref "$d/raw/train" \
        --validpref "$d/raw/valid" --testpref "$d/raw/test" --destdir "$d/data-bin" \
        --joined-dictionary --workers 2 > "$d/preprocess.log" 2>&1 \
        || fail "binarizing copy$L failed: $(explain "$d/preprocess.log") (log: $d/preprocess.log)"
    fi
    systems=()
    for b in $BASELINES; do systems+=("lstm_$b:$b:"); done
    for k in $SIZES; do systems+=("lstm_memory:memory_K$k:--memory-size $k --memory-encoder-score sigmoid"); done
    [ -z "$NORM_K" ] \
      || systems+=("lstm_memory:memory_K${NORM_K}_slots:--memory-size $NORM_K --memory-normalize slots --memory-encoder-score sigmoid")
    [ -z "$SOFTMAX_K" ] \
      || systems+=("lstm_memory:memory_K${SOFTMAX_K}_softmax:--memory-size $SOFTMAX_K --memory-encoder-score softmax")
    for spec in "${systems[@]}"; do
      IFS=: read -r arch name flags <<< "$spec"
      # shellcheck disable=SC2086
      train_toy "$d/data-bin" "$d/$name" "$arch" $flags
    done
    for spec in "${systems[@]}"; do
      IFS=: read -r arch name flags <<< "$spec"
      decode_toy "$d/data-bin" "$d/$name" "$name" | sed "s/^/$L\t/" | tee -a "$table"
    done
  done
  column -t -s$'\t' "$table"
  say "table: $table"
  c=$OUT/copy$CURVE_LENGTH
  if [ -d "$c" ]; then
    curves=()
    for dir in "$c"/*/; do [ -f "$dir/train.log" ] && curves+=("$(basename "$dir")=$dir/train.log"); done
    python -m fairseq_vision_attn.plots curves --logs "${curves[@]}" --out "$OUT/memory_fig3a.png" \
      --title "copy task, length <= $CURVE_LENGTH: validation BLEU (greedy) per epoch"
    python -m fairseq_vision_attn.plots memory-alignment --path "$c/memory_K$ALIGN_K/checkpoint_best.pt" \
      --data-bin "$c/data-bin" --ids $ALIGN_IDS --out-dir "$OUT/alignments"
  fi
fi

if [[ " $STAGES " == *" real "* ]]; then
  BIN=$OUT/real/data-bin
  [ -f "$BIN/dict.en.txt" ] || bash recipes/prepare_data.sh enja "$REAL_DATA" "$OUT/real"
  export EPOCHS=${REAL_EPOCHS:-8}
  bash recipes/train.sh lstm_global "$BIN" "$OUT/real/lstm_global" --param-init "$PARAM_INIT"
  for k in 32 64; do
    bash recipes/train.sh lstm_memory "$BIN" "$OUT/real/memory_K$k" --memory-size "$k" \
      --param-init "$PARAM_INIT"
    bash recipes/train.sh lstm_memory "$BIN" "$OUT/real/memory_K${k}_pe" --memory-size "$k" \
      --memory-position-encoding --param-init "$PARAM_INIT"
  done
  specs=()
  for name in lstm_global memory_K32 memory_K32_pe memory_K64 memory_K64_pe; do
    f=$OUT/real/$name
    say "decoding $name (test, beam 5)"
    fairseq-generate "$BIN" --user-dir fairseq_vision_attn --task translation_vision_attn \
      --path "$f/checkpoints/checkpoint_best.pt" --gen-subset test --beam 5 --batch-size 64 "${DEVICE_FLAGS[@]}" \
      > "$f/generate.txt" 2> "$f/generate.log" || fail "decoding $name failed: $(explain "$f/generate.log")"
    specs+=("$name=$f/generate.txt")
  done
  python -m fairseq_vision_attn.report "${specs[@]}" | tee "$OUT/memory_real.tsv"
  say "table: $OUT/memory_real.tsv"
fi
