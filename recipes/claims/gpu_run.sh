#!/usr/bin/env bash
# One device call of the claims issue: train one queue (<= 7 systems) side by side on the lent
# GPU, decode valid and test (De-En: also test1, and the monotonic heads with both stopping
# rules: --monotonic-stop cumulative as NAME@cumulative), pack all but the checkpoints into $OUT.
#   run (carry [".gpu"]):  source .gpu/setup.sh && bash recipes/claims/gpu_run.sh enja_1
# A call is limited to 10 minutes and the machine keeps nothing: TIME_LIMIT (default 420 s) stops
# every training in time to decode and pack; a system it stopped is reported unfinished, and a
# rerun starts it over (the queue's own resume needs the files of the previous call). RIBES is
# added to the En-Ja tables when nltk is there; else score the packed hypotheses here with
# `python -m fairseq_vision_attn.report ... --ribes`.
set -euo pipefail
name=${1:?"usage: gpu_run.sh QUEUE_NAME (enja_1 to enja_4, deen_1 to deen_3)"}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$here"
queue=recipes/claims/$name.queue
[ -f "$queue" ] || { echo "gpu_run.sh: no queue $queue" >&2; exit 2; }
corpus=${name%%_*}
data=.gpu/data/$([ "$corpus" = enja ] && echo small_parallel_enja || echo multi30k_de_en)
work=outputs/claims/$corpus
bash recipes/prepare_data.sh "$corpus" "$data" "$work/prep"
gen=()
[ "$corpus" = deen ] && gen=(--remove-bpe --tokenizer moses --source-lang de --target-lang en)
SUBSETS=${SUBSETS:-"valid test $([ "$corpus" = deen ] && echo test1)"} \
  GEN_FLAGS="${gen[*]}" TOKENIZE=$([ "$corpus" = deen ] && echo 13a || echo none) \
  REPORT_FLAGS=$([ "$corpus" = enja ] && python -c "import nltk" 2>/dev/null && echo --ribes) \
  MONOTONIC_STOP=$([ "$corpus" = deen ] && echo cumulative) \
  PARALLEL=${PARALLEL:-7} TIME_LIMIT=${TIME_LIMIT:-420} DEVICE=${DEVICE:-cuda} THREADS=2 \
  bash recipes/queue.sh "$queue" "$work/prep/data-bin" "$work/$name"
tar -czf "${OUT:-.}/$name.tgz" --exclude='*.pt' -C "$work" "$name"
echo "packed ${OUT:-.}/$name.tgz"
