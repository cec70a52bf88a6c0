#!/usr/bin/env bash
# Train one architecture (recipes/train.sh) and score it on the test set with sacrebleu.
#   bash recipes/train_eval.sh ARCH DATA_BIN OUT_DIR [extra fairseq-train flags ...]
# Environment: EPOCHS (8), BEAM (5), TOKENIZE (sacrebleu tokenizer of the reference, none),
# REMOVE_BPE (set to remove subword-nmt's "@@ "), DETOK (moses language code to detokenize).
# Writes OUT_DIR/{train.log,generate.txt,stats.jsonl,bleu.txt}.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
arch=${1:?"usage: train_eval.sh ARCH DATA_BIN OUT_DIR [fairseq-train flags]"}
bin=$(arg_path "${2:?DATA_BIN}" "")
out=$(arg_path "${3:?OUT_DIR}" "")
shift 3
BEAM=${BEAM:-5}; TOKENIZE=${TOKENIZE:-none}
mkdir -p "$out"
cd "$ROOT"
bash recipes/train.sh "$arch" "$bin" "$out" "$@"
say "$arch: decoding the test set (beam $BEAM)"
fairseq-generate "$bin" --user-dir fairseq_vision_attn --task translation_vision_attn \
  --path "$out/checkpoints/checkpoint_best.pt" --gen-subset test --beam "$BEAM" --batch-size 64 "${DEVICE_FLAGS[@]}" \
  ${REMOVE_BPE:+--remove-bpe} --stats-output "$out/stats.jsonl" > "$out/generate.txt" 2> "$out/generate.log" \
  || fail "decoding failed: $(explain "$out/generate.log") (log: $out/generate.log)"
if [ -n "${DETOK:-}" ]; then
  for tag in D T; do
    grep "^$tag-" "$out/generate.txt" | sort -t- -k2 -n | cut -f"$([ $tag = D ] && echo 3 || echo 2)" \
      | sacremoses -l "$DETOK" detokenize > "$out/$tag.detok"
  done
  sacrebleu "$out/T.detok" -i "$out/D.detok" -b > "$out/bleu.txt"
else
  python -m fairseq_vision_attn.report "$arch=$out/generate.txt:$out/stats.jsonl" --tokenize "$TOKENIZE" \
    | tee "$out/table.tsv" | awk 'NR==2{print $2}' > "$out/bleu.txt"
fi
say "$arch: test BLEU $(cat "$out/bleu.txt") (outputs in $out)"
