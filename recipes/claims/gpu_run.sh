#!/usr/bin/env bash
# One device call of the claims issue: train one queue (<= 7 systems) side by side on the lent
# GPU, decode valid and test (De-En: also test1, and the monotonic heads with both stopping
# rules: --monotonic-stop cumulative as NAME@cumulative), pack all but the checkpoints into $OUT.
#   run (carry [".gpu"]):  source .gpu/setup.sh && bash recipes/claims/gpu_run.sh enja_1
# A call is limited to 10 minutes and the machine keeps nothing: TIME_LIMIT (default 420 s) stops
# every training in time to decode and pack; a system it stopped is reported unfinished, and a
# rerun starts it over (the queue's own resume needs the files of the previous call). Systems the
# limit stopped are decoded from their best checkpoint so far, marked "(unfinished)" in the tables.
# DATA_BIN: a data-bin prepared on this side (recipes/prepare_data.sh) and carried with the call,
# instead of preparing one there (De-En's BPE takes about 50 s). DEADLINE (seconds since the
# epoch, e.g. `DEADLINE=$(($(date +%s) + 570))` before `source .gpu/setup.sh`): when everything
# must be packed; the trainings then stop DECODE_S (default 120) seconds before it, whatever the
# setup took. RIBES is added to the En-Ja tables when nltk is there; else score the packed
# hypotheses here with `python -m fairseq_vision_attn.report ... --ribes`. PACK_BEST=1: also bring
# back every system's best model (recipes/claims/pack_best.sh: $OUT/best.tar.part*, 15 MB
# pieces; a De-En model is 23 MB unidirectional, 36 MB bidirectional, and a call returns 8 files
# and 64 MiB in all, so beside the tables two unidirectional models or one bidirectional), e.g. to
# give the call's time to training (DECODE_S small) and decode here; PACK_BEST="SYSTEM ...":
# only those systems'.
set -euo pipefail
name=${1:?"usage: gpu_run.sh QUEUE_NAME (recipes/claims/QUEUE_NAME.queue, e.g. enja_1 or deen_milk)"}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${DATA_BIN:+$(cd "$DATA_BIN" && pwd)}
cd "$here"
queue=recipes/claims/$name.queue
[ -f "$queue" ] || { echo "gpu_run.sh: no queue $queue" >&2; exit 2; }
corpus=${name%%_*}
work=outputs/claims/$corpus
if [ -z "$bin" ]; then
  data=.gpu/data/$([ "$corpus" = enja ] && echo small_parallel_enja || echo multi30k_de_en)
  bash recipes/prepare_data.sh "$corpus" "$data" "$work/prep"
  bin=$work/prep/data-bin
fi
limit=${TIME_LIMIT:-420}
if [ -n "${DEADLINE:-}" ]; then
  limit=$((DEADLINE - $(date +%s) - ${DECODE_S:-120}))
  [ "$limit" -gt 60 ] || { echo "gpu_run.sh: DEADLINE leaves $limit s to train" >&2; exit 2; }
fi
echo "gpu_run.sh: $name, training for at most $limit s"
gen=()
[ "$corpus" = deen ] && gen=(--remove-bpe --tokenizer moses --source-lang de --target-lang en)
settings=(
  SUBSETS="${SUBSETS:-valid test $([ "$corpus" != deen ] || echo test1)}"
  GEN_FLAGS="${gen[*]}" TOKENIZE="$([ "$corpus" = deen ] && echo 13a || echo none)"
  REPORT_FLAGS="$({ [ "$corpus" = enja ] && python -c "import nltk" 2>/dev/null && echo --ribes; } || :)"
  MONOTONIC_STOP="$([ "$corpus" != deen ] || echo cumulative)"
  PARALLEL="${PARALLEL:-7}" TIME_LIMIT="$limit" DEVICE="${DEVICE:-cuda}" THREADS=2
)
run_queue=(bash recipes/queue.sh "$queue" "$bin" "$work/$name")
# a system whose training failed fails the queue (after the others): pack what there is anyway
env "${settings[@]}" "${run_queue[@]}" || echo "gpu_run.sh: the queue stopped with an error (above); packing what there is" >&2
# the systems the limit stopped: decoded from their best checkpoint so far, within the deadline
decode=(env "${settings[@]}" DECODE_ONLY=1 "${run_queue[@]}")
if [ -z "${DEADLINE:-}" ]; then
  "${decode[@]}"
elif [ $((left = DEADLINE - $(date +%s) - 10)) -gt 0 ]; then  # `timeout 0` would mean no limit
  timeout "$left" "${decode[@]}" || true
fi
tar -czf "${OUT:-.}/$name.tgz" --exclude='*.pt' -C "$work" "$name" || true
echo "packed ${OUT:-.}/$name.tgz"
case ${PACK_BEST:-0} in
  0) ;;
  1) bash recipes/claims/pack_best.sh "$work/$name" "${OUT:-.}" || true ;;
  *) read -ra systems <<< "$PACK_BEST"; bash recipes/claims/pack_best.sh "$work/$name" "${OUT:-.}" "${systems[@]}" || true ;;
esac
