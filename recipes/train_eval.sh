#!/usr/bin/env bash
# Train one architecture on a binarized corpus and score it on the test set with sacrebleu.
#   bash recipes/train_eval.sh ARCH DATA_BIN OUT_DIR [extra fairseq-train flags ...]
# Environment: EPOCHS (8), BEAM (5), TOKENIZE (sacrebleu tokenizer of the reference, none),
# REMOVE_BPE (set to remove subword-nmt's "@@ "), DETOK (moses language code to detokenize).
# Writes OUT_DIR/{train.log,generate.txt,stats.jsonl,bleu.txt}; the defaults are the data
# README's reference settings (1-layer biLSTM 256, Adam 1e-3, clip 3, max-tokens 4000).
set -euo pipefail
arch=${1:?ARCH}; bin=${2:?DATA_BIN}; out=${3:?OUT_DIR}; shift 3
EPOCHS=${EPOCHS:-8}; BEAM=${BEAM:-5}; TOKENIZE=${TOKENIZE:-none}
mkdir -p "$out"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fairseq-train "$bin" --user-dir fairseq_vision_attn --task translation_vision_attn --arch "$arch" \
  --encoder-embed-dim 256 --encoder-hidden-size 256 --decoder-embed-dim 256 --decoder-hidden-size 256 \
  --decoder-out-embed-dim 256 --dropout 0.2 --optimizer adam --lr 0.001 --clip-norm 3 \
  --max-tokens 4000 --max-epoch "$EPOCHS" --criterion cross_entropy --cpu --num-workers 0 --seed 1 \
  --save-dir "$out/checkpoints" --no-epoch-checkpoints --log-format simple --log-interval 100 \
  "$@" > "$out/train.log" 2>&1
fairseq-generate "$bin" --user-dir fairseq_vision_attn --task translation_vision_attn \
  --path "$out/checkpoints/checkpoint_best.pt" --gen-subset test --beam "$BEAM" --batch-size 64 --cpu \
  ${REMOVE_BPE:+--remove-bpe} --stats-output "$out/stats.jsonl" > "$out/generate.txt" 2> "$out/generate.log"
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
echo "$arch: test BLEU $(cat "$out/bleu.txt") ($out)"
