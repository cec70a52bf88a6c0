#!/usr/bin/env bash
# Quick start: offline, CPU, a few minutes on 2 cores. Generates a toy reversal corpus
# (Britz et al. sec. 4.1 style: vocabulary 20), binarizes it, trains every registered
# architecture briefly, decodes with beam search (streaming archs: greedy simultaneous decoding)
# and prints one table (arch, BLEU and the decoding statistics each arch reports, latency
# included). Run from the repository root:
#   bash recipes/quickstart.sh            # OUT=outputs/quickstart EPOCHS=... to change
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OUT=$(arg_path "${OUT:-}" "$ROOT/outputs/quickstart")
cd "$ROOT"
EPOCHS=${EPOCHS:-8}
ARCHS=${ARCHS:-"lstm_noattn lstm_global lstm_local lstm_flexible lstm_memory lstm_sact lstm_waitk lstm_monotonic lstm_mocha lstm_milk"}
LATENCY_WEIGHT=${LATENCY_WEIGHT:-0.05}  # lambda of MILk Eq. 15 for the streaming archs
FLEX_TAU=${FLEX_TAU:-1.0}  # lstm_flexible is decoded twice: tau = inf and tau = FLEX_TAU
# one torch thread: the toy models train about as fast on one as on two idle cores, and two
# collapse beside a busy process of another session, e.g. a training started from another
# terminal (the kernel shares CPU by session; OpenMP workers wait for each other: benchmarks/bench_threads.py)
THREADS=${THREADS:-1}
export OMP_NUM_THREADS=$THREADS

mkdir -p "$OUT"
if [ ! -f "$OUT/data-bin/dict.src.txt" ]; then
  say "toy reversal corpus: generating and binarizing"
  python -m fairseq_vision_attn.toydata --task reverse --out-dir "$OUT/raw" \
    --train-size 6000 --valid-size 200 --test-size 200 --vocab-size 20 --min-len 4 --max-len 16 --seed 1
  fairseq-preprocess --source-lang src --target-lang tgt \
    --trainpref "$OUT/raw/train" --validpref "$OUT/raw/valid" --testpref "$OUT/raw/test" \
    --destdir "$OUT/data-bin" --joined-dictionary --workers 2 > "$OUT/preprocess.log" 2>&1 \
    || fail "binarizing failed: $(explain "$OUT/preprocess.log") (log: $OUT/preprocess.log)"
fi

systems=()
for arch in $ARCHS; do
  criterion=(--criterion cross_entropy)
  case $arch in  # streaming archs: DAL-augmented loss (wait-k's delays are fixed: it only logs them)
    lstm_monotonic|lstm_mocha|lstm_milk|lstm_waitk)
      criterion=(--criterion latency_augmented_cross_entropy --latency-weight "$LATENCY_WEIGHT") ;;
  esac
  case $arch in  # the flags only one mechanism reads (others refuse them)
    lstm_local) criterion+=(--local-window-d 3) ;;
    lstm_mocha) criterion+=(--mocha-chunk-size 3) ;;
  esac
  train_logged "$arch" "$OUT/train.$arch.log" "$EPOCHS" \
  fairseq-train "$OUT/data-bin" --user-dir fairseq_vision_attn --task translation_vision_attn \
    --arch "$arch" --encoder-embed-dim 64 --encoder-hidden-size 64 --decoder-embed-dim 64 \
    --decoder-hidden-size 128 --decoder-out-embed-dim 64 --dropout 0.0 \
    --optimizer adam --lr 0.005 --clip-norm 3 --max-tokens 1000 --max-epoch "$EPOCHS" \
    "${criterion[@]}" --seed 1 "${DEVICE_FLAGS[@]}" --num-workers 0 \
    --save-dir "$OUT/checkpoints/$arch" --no-epoch-checkpoints --no-last-checkpoints \
    --log-format simple --log-interval 50
  taus=inf
  [ "$arch" = lstm_flexible ] && taus="inf $FLEX_TAU"
  for tau in $taus; do
    name=$arch; [ "$tau" = inf ] || name="$arch.tau$tau"
    say "$arch: decoding the test set$([ "$tau" = inf ] || echo " (tau = $tau)")"
    fairseq-generate "$OUT/data-bin" --user-dir fairseq_vision_attn --task translation_vision_attn \
      --path "$OUT/checkpoints/$arch/checkpoint_best.pt" --gen-subset test --beam 5 --batch-size 64 \
      "${DEVICE_FLAGS[@]}" --vision-span-threshold "$tau" --stats-output "$OUT/$name.stats.jsonl" \
      > "$OUT/generate.$name.txt" 2> "$OUT/generate.$name.log" \
      || fail "decoding $name failed: $(explain "$OUT/generate.$name.log") (log: $OUT/generate.$name.log)"
    label=$arch; [ "$tau" = inf ] || label="$arch(tau=$tau)"
    systems+=("$label=$OUT/generate.$name.txt:$OUT/$name.stats.jsonl")
  done
done

echo "== quick start: toy reversal, 200 test sentences (sacrebleu, tokenize none); window_sizes ="
echo "   source positions scored per target token, g = flexible attention's penalty strength;"
echo "   streaming archs decode greedily and simultaneously: delays = source tokens read per"
echo "   target token, AL/AP/DAL in tokens with EOS (reversal needs the whole source first)"
python -m fairseq_vision_attn.report "${systems[@]}" | tee "$OUT/table.tsv"
say "table: $OUT/table.tsv (logs: $OUT/train.*.log, $OUT/generate.*.log)"
