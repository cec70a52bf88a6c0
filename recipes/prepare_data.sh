#!/usr/bin/env bash
# Raw parallel text -> fairseq data-bin (checks, optional Moses tokenization and joint BPE).
#   bash recipes/prepare_data.sh raw SRC TGT DATA_DIR OUT_DIR [--moses] [--bpe N] [--threshold N] [--joined-dictionary]
#        DATA_DIR holds train/valid/test.{SRC,TGT}, one sentence per line, line-aligned
#   bash recipes/prepare_data.sh enja DATA_DIR OUT_DIR   # small_parallel_enja (tokenized already)
#   bash recipes/prepare_data.sh deen DATA_DIR OUT_DIR   # Multi30k De-En: Moses + 8k joint BPE; test = 2016, test1 = 2017
# enja/deen download the original corpus into DATA_DIR when it does not exist (needs internet).
# OUT_DIR gets data-bin/, tok/, preprocess.log (the tools' output) and corpus.json (written last:
# the data-bin is complete). See `python -m fairseq_vision_attn.prepare_data --help`.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" exec python -m fairseq_vision_attn.prepare_data "$@"
