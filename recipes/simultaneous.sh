#!/usr/bin/env bash
# MILk (Arivazhagan et al. 2019) against wait-k and the offline model, CPU-sized.
#   bash recipes/simultaneous.sh [DEEN_DATA_DIR] [OUT_DIR]
# On multi30k De-En (the paper's pair; prepared with recipes/prepare_data.sh deen): trains
# lstm_global (bidirectional, offline reference), lstm_waitk for k in WAITK, lstm_milk for lambda
# in LAMBDAS (--criterion latency_augmented_cross_entropy, DAL), and, for lambda in
# BASELINE_LAMBDAS, lstm_mocha and lstm_monotonic; decodes a test set (SUBSET) greedily
# (streaming archs simultaneously, with delays), scores detokenized BLEU with sacrebleu and writes
#   $OUT/latency_table.SUBSET.tsv     every point: system, BLEU, AL, AP, DAL, LAAL, ATD (and more)
#   $OUT/latency_quality.SUBSET.png   BLEU against DAL, LAAL, AL, AP, ATD (the paper's Figs. 2-3)
#   $OUT/attention/            MILk's attention with its hard head for sentences PLOT_IDS (Figs. 4-5)
# Latency is in BPE tokens with EOS on both sides (docs/simultaneous.md, "Lengths in the latency metrics").
# Environment: EPOCHS (8), WAITK ("1 3 5 7"), LAMBDAS ("0 0.1 0.3 1"), BASELINE_LAMBDAS ("")
# e.g. "0.3", MOCHA_CHUNK (4), NOISE (4), PLOT_IDS ("0 1 2"), THREADS (2), TEST_WAITK ("") e.g.
# "1 2 5 7": also decode the wait-k model trained with k = TEST_WAITK_FROM (3) at each of these
# k (--test-waitk-lagging; rows waitk3test_kK). WAITK="" or LAMBDAS="" trains none of that kind.
# SUBSET (test = test_2016_flickr; test1 = test_2017_flickr), DEVICE (auto: the GPU when there
# is one; cpu, cuda).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
DATA=$(arg_path "${1:-}" "$ROOT/../shared/data/multi30k_de_en")
OUT=$(arg_path "${2:-}" "$ROOT/outputs/simultaneous")
check_order "$DATA" "$OUT" train.de
cd "$ROOT"
SUBSET=${SUBSET:-test}
[[ $SUBSET == test || $SUBSET == test1 ]] || { echo "SUBSET: '$SUBSET' is not one of: test, test1" >&2; exit 2; }
EPOCHS=${EPOCHS:-8}
WAITK=${WAITK-"1 3 5 7"}
LAMBDAS=${LAMBDAS-"0 0.1 0.3 1"}
BASELINE_LAMBDAS=${BASELINE_LAMBDAS:-""}
MOCHA_CHUNK=${MOCHA_CHUNK:-4}
NOISE=${NOISE:-4}
PLOT_IDS=${PLOT_IDS:-"0 1 2"}
TEST_WAITK=${TEST_WAITK:-}
TEST_WAITK_FROM=${TEST_WAITK_FROM:-3}
export OMP_NUM_THREADS=${THREADS:-2} EPOCHS
# checked before hours of training, not after
for k in $TEST_WAITK $TEST_WAITK_FROM; do
  [[ $k =~ ^[1-9][0-9]*$ ]] || { echo "TEST_WAITK / TEST_WAITK_FROM: '$k' is not a positive integer" >&2; exit 2; }
done
if [ -n "$TEST_WAITK" ] && [[ " $WAITK " != *" $TEST_WAITK_FROM "* ]] \
    && [ ! -f "$OUT/waitk_$TEST_WAITK_FROM/checkpoints/checkpoint_best.pt" ]; then
  echo "TEST_WAITK_FROM=$TEST_WAITK_FROM: WAITK=\"$WAITK\" trains no wait-k model with k = $TEST_WAITK_FROM and $OUT has none" >&2
  exit 2
fi
BIN=$OUT/data-bin
mkdir -p "$OUT"
[ -f "$BIN/dict.de.txt" ] || bash recipes/prepare_data.sh deen "$DATA" "$OUT"

# The data README's De-En reference settings (dropout 0.3, shared decoder embeddings).
COMMON=(--dropout 0.3 --share-decoder-input-output-embed --max-epoch "$EPOCHS")
STREAM=(--criterion latency_augmented_cross_entropy --latency-metric dal --monotonic-noise-var "$NOISE")

bash recipes/train.sh lstm_global "$BIN" "$OUT/offline_global" "${COMMON[@]}"
for k in $WAITK; do
  bash recipes/train.sh lstm_waitk "$BIN" "$OUT/waitk_$k" "${COMMON[@]}" --waitk-lagging "$k"
done
for lambda in $LAMBDAS; do
  bash recipes/train.sh lstm_milk "$BIN" "$OUT/milk_$lambda" "${COMMON[@]}" "${STREAM[@]}" \
    --latency-weight "$lambda"
done
for lambda in $BASELINE_LAMBDAS; do
  bash recipes/train.sh lstm_mocha "$BIN" "$OUT/mocha_$lambda" "${COMMON[@]}" "${STREAM[@]}" \
    --latency-weight "$lambda" --mocha-chunk-size "$MOCHA_CHUNK"
  bash recipes/train.sh lstm_monotonic "$BIN" "$OUT/monotonic_$lambda" "${COMMON[@]}" "${STREAM[@]}" \
    --latency-weight "$lambda"
done

specs=()
decode() {  # NAME DIR [extra fairseq-generate flags]: greedy, as the paper decodes its streaming
  # models; streaming checkpoints go through the simultaneous generator and write delays and AL/AP/DAL
  local name=$1 ckpt=$2/checkpoints/checkpoint_best.pt; shift 2
  local res=$OUT/decode.$SUBSET/$name
  mkdir -p "$res"
  say "decoding $name ($SUBSET)"
  fairseq-generate "$BIN" --user-dir fairseq_vision_attn --task translation_vision_attn \
    --path "$ckpt" --gen-subset "$SUBSET" --beam 1 --batch-size 64 "${DEVICE_FLAGS[@]}" \
    "${DEEN_DETOK[@]}" \
    --max-len-a 1.5 --max-len-b 10 --stats-output "$res/stats.jsonl" "$@" \
    > "$res/generate.txt" 2> "$res/generate.log" \
    || fail "decoding $name failed: $(explain "$res/generate.log") (log: $res/generate.log)"
  specs+=("$name=$res/generate.txt:$res/stats.jsonl")
}
for dir in "$OUT"/offline_* "$OUT"/waitk_* "$OUT"/milk_* "$OUT"/mocha_* "$OUT"/monotonic_*; do
  [ -f "$dir/checkpoints/checkpoint_best.pt" ] || continue
  decode "$(basename "$dir")" "$dir"
done
for k in $TEST_WAITK; do
  decode "waitk${TEST_WAITK_FROM}test_k$k" "$OUT/waitk_$TEST_WAITK_FROM" --test-waitk-lagging "$k"
done
python -m fairseq_vision_attn.report "${specs[@]}" --tokenize 13a | tee "$OUT/latency_table.$SUBSET.tsv"
python -m fairseq_vision_attn.plots latency --points "$OUT/latency_table.$SUBSET.tsv" \
  --out "$OUT/latency_quality.$SUBSET.png" --title "multi30k De-En $SUBSET: BLEU against latency (BPE tokens)"
milk=$(find "$OUT" -maxdepth 3 -path "$OUT/milk_*/checkpoints/checkpoint_best.pt" | sort -V | sed -n '1,2p' | tail -n 1)
if [ -n "$milk" ]; then  # the second-lowest lambda (or the only one)
  # shellcheck disable=SC2086
  python -m fairseq_vision_attn.plots streaming-attention --path "$milk" \
    --data-bin "$BIN" --subset "$SUBSET" --ids $PLOT_IDS --out-dir "$OUT/attention"
fi
say "table: $OUT/latency_table.$SUBSET.tsv; plot: $OUT/latency_quality.$SUBSET.png; attention: $OUT/attention/"
