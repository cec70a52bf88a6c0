#!/usr/bin/env bash
# Prepare a real parallel corpus for the recipes: tokenization, optional BPE, fairseq-preprocess.
#   bash recipes/prepare_data.sh enja DATA_DIR OUT_DIR   # small_parallel_enja (tokenized already)
#   bash recipes/prepare_data.sh deen DATA_DIR OUT_DIR   # multi30k de-en (moses tok + 8k joint BPE)
# DATA_DIR holds the raw files; when it does not exist the original corpus is downloaded
# (needs internet): odashi/small_parallel_enja or multi30k/dataset on GitHub.
set -euo pipefail
corpus=${1:?"usage: prepare_data.sh enja|deen DATA_DIR OUT_DIR"}
data=${2:?DATA_DIR}
out=${3:?OUT_DIR}
case "$corpus" in
  enja | deen) ;;
  *) echo "unknown corpus '$corpus'; valid choices: enja, deen" >&2; exit 2 ;;
esac
mkdir -p "$out"

download() {
  mkdir -p "$data"
  case "$corpus" in
    enja)
      for f in train dev test; do for l in en ja; do
        curl -fsSL "https://raw.githubusercontent.com/odashi/small_parallel_enja/master/$f.$l" -o "$data/$f.$l"
      done; done ;;
    deen)
      base=https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw
      for f in train val test_2016_flickr; do for l in de en; do
        curl -fsSL "$base/$f.$l.gz" | gunzip > "$data/$f.$l"
      done; done ;;
  esac
}
[ -d "$data" ] || download

case "$corpus" in
  enja)
    # the corpus is lowercased and tokenized already (Stanford tokenizer / KyTea)
    src=en; tgt=ja
    fairseq-preprocess --source-lang $src --target-lang $tgt \
      --trainpref "$data/train" --validpref "$data/dev" --testpref "$data/test" \
      --thresholdsrc 2 --thresholdtgt 2 --destdir "$out/data-bin" --workers 2 > "$out/preprocess.log"
    ;;
  deen)
    src=de; tgt=en
    mkdir -p "$out/tok"
    for split in train val test_2016_flickr; do
      for l in de en; do
        sacremoses -l $l -j 2 tokenize -x < "$data/$split.$l" > "$out/tok/$split.$l"
      done
    done
    cat "$out/tok/train.de" "$out/tok/train.en" | subword-nmt learn-bpe -s 8000 > "$out/tok/bpe.codes"
    for split in train val test_2016_flickr; do
      for l in de en; do
        subword-nmt apply-bpe -c "$out/tok/bpe.codes" < "$out/tok/$split.$l" > "$out/tok/$split.bpe.$l"
      done
    done
    fairseq-preprocess --source-lang de --target-lang en --trainpref "$out/tok/train.bpe" \
      --validpref "$out/tok/val.bpe" --testpref "$out/tok/test_2016_flickr.bpe" \
      --joined-dictionary --destdir "$out/data-bin" --workers 2 > "$out/preprocess.log"
    ;;
esac
echo "binarized $corpus into $out/data-bin"
