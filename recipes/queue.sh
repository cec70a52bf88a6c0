#!/usr/bin/env bash
# Train a list of systems to convergence side by side, resumably, then decode each on valid and
# test: the unit of work of the claims tables (docs/results.md), on a GPU or the CPU.
#   bash recipes/queue.sh QUEUE_FILE DATA_BIN OUT_DIR
# QUEUE_FILE: one system per line, `NAME ARCH [fairseq-train flags ...]`; blank lines and lines
# starting with '#' are skipped. Each system trains with recipes/train.sh (the recipes' sizes)
# under the one stopping rule RULE into OUT_DIR/NAME; a system whose OUT_DIR/NAME/done exists is
# skipped, one interrupted resumes from its checkpoint_last.pt. A system is decoded on valid and
# test with --stats-output (OUT_DIR/NAME/{valid,test}.{txt,jsonl}) as soon as the rule finishes it
# (a queue cut off later keeps its hypotheses), every system left undecoded then (PARALLEL at a
# time), and OUT_DIR/table.{valid,test}.tsv is written (recipes' report, sacrebleu TOKENIZE).
# Environment: PARALLEL (2; 7 fit an H100), THREADS (1 per training), BEAM (5), TOKENIZE (none),
# GEN_FLAGS (extra fairseq-generate flags, e.g. "--remove-bpe"), TIME_LIMIT (seconds per training
# run, 0 = none: a run cut by it resumes next time), DEVICE (auto, cpu, cuda),
# RULE (default: the plateau rule below), SUBSETS ("valid test"), REPORT_FLAGS (e.g. "--ribes"),
# DECODE_ONLY (1: train nothing; decode every system with a best checkpoint so far, those the
# rule has not finished marked "(unfinished)" in the tables), MONOTONIC_STOP (e.g. "cumulative":
# systems with a monotonic head are also decoded with --monotonic-stop RULE into
# NAME/SUBSET.RULE.*, a row NAME@RULE in each table), LAST_CHECKPOINT (1: every system is also
# decoded from its checkpoint_last.pt into NAME/SUBSET.last.*, a row NAME@last in each table:
# docs/results.md "The stopping rule"), ONLY ("NAME [NAME ...]": train and decode
# only these systems, e.g. one row on a CPU; the tables still list every system decoded so far).
# Exit 1 when a system's training failed (after the others and the tables); a training stopped
# by TIME_LIMIT or a signal is not a failure: it resumes on the next run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
queue=$(arg_path "${1:?"usage: queue.sh QUEUE_FILE DATA_BIN OUT_DIR"}" "")
bin=$(arg_path "${2:?DATA_BIN}" "")
out=$(arg_path "${3:?OUT_DIR}" "")
[ -f "$queue" ] || usage_error "QUEUE_FILE $queue does not exist"
PARALLEL=${PARALLEL:-2}; BEAM=${BEAM:-5}; TOKENIZE=${TOKENIZE:-none}; TIME_LIMIT=${TIME_LIMIT:-0}
SUBSETS=${SUBSETS:-"valid test"}
[[ $PARALLEL =~ ^[1-9][0-9]*$ ]] || usage_error "PARALLEL: '$PARALLEL' is not a positive integer"
[[ $TIME_LIMIT =~ ^[0-9]+$ ]] || usage_error "TIME_LIMIT: '$TIME_LIMIT' is not a number of seconds"
[[ ${LAST_CHECKPOINT:-0} =~ ^[01]$ ]] || usage_error "LAST_CHECKPOINT: '$LAST_CHECKPOINT' is not 0 or 1"
# The stopping rule of every real-data model (lib.sh's PLATEAU_RULE), at most 60 epochs.
RULE=${RULE:-$PLATEAU_RULE}
export EPOCHS=${EPOCHS:-60} OMP_NUM_THREADS=${THREADS:-1}
cd "$ROOT"

names=()
specs_dir=$out/.queue
mkdir -p "$specs_dir"
while read -r name arch flags; do
  [[ -z ${name:-} || $name == \#* ]] && continue
  [ -n "${arch:-}" ] || usage_error "$queue: line '$name' names no ARCH (NAME ARCH [flags])"
  names+=("$name")
  echo "$arch ${flags:-}" > "$specs_dir/$name"
done < "$queue"
[ ${#names[@]} -gt 0 ] || usage_error "$queue lists no system"
ONLY=${ONLY:-}
for name in $ONLY; do
  [[ " ${names[*]} " == *" $name "* ]] \
    || usage_error "ONLY: '$name' is not a system of $queue (its systems: ${names[*]})"
done
selected() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }  # NAME: ONLY names it, or ONLY is empty
say "${#names[@]} systems${ONLY:+ (training and decoding only $ONLY)}, $PARALLEL at a time, rule: $RULE, at most $EPOCHS epochs"

DECODE_ONLY=${DECODE_ONLY:-0}
decodable() {  # NAME: trained to the rule, or (DECODE_ONLY=1) has a best checkpoint so far
  [ -f "$out/$1/done" ] \
    || { [ "$DECODE_ONLY" = 1 ] && [ -f "$out/$1/checkpoints/checkpoint_best.pt" ]; }
}

checkpoint() {  # NAME VARIANT: the checkpoint a variant decodes ("last": checkpoint_last.pt)
  echo "$out/$1/checkpoints/checkpoint_$([ "$2" = last ] && echo last || echo best).pt"
}
decode_one() {  # NAME SUBSET [VARIANT]: hypotheses and statistics of the best checkpoint, or of
  # the last one (VARIANT "last"), or of the best with --monotonic-stop VARIANT
  local f=$out/$1/$2${3:+.$3} rule=() what=${3:+, --monotonic-stop $3}
  if [ "${3:-}" = last ]; then what=", checkpoint_last.pt"
  elif [ -n "${3:-}" ]; then rule=(--monotonic-stop "$3"); fi
  say "decoding $1 ($2$what)"
  # written to .part files, renamed when complete: a decoding cut off (a time limit, a killed
  # call) leaves no NAME/SUBSET.txt that a later run would take for finished hypotheses, and no
  # older one (of an earlier best checkpoint) that the tables would list as this one's
  rm -f "$f.txt" "$f.jsonl"
  # shellcheck disable=SC2086
  if fairseq-generate "$bin" --user-dir fairseq_vision_attn --task translation_vision_attn \
    --path "$(checkpoint "$1" "${3:-}")" --gen-subset "$2" --beam "$BEAM" \
    "${rule[@]}" --batch-size 64 "${DEVICE_FLAGS[@]}" --stats-output "$f.jsonl.part" ${GEN_FLAGS:-} \
    > "$f.txt.part" 2> "$f.log"; then
    mv -f "$f.jsonl.part" "$f.jsonl" && mv -f "$f.txt.part" "$f.txt"
  else
    rm -f "$f.txt.part" "$f.jsonl.part"
    say "decoding $1 ($2$what) failed: $(explain "$f.log") (log: $f.log)"
  fi
}
variants() {  # NAME: what it is decoded with besides the default: MONOTONIC_STOP's rules if NAME
  # has a monotonic head, and "last" with LAST_CHECKPOINT=1
  local arch
  read -r arch _ < "$specs_dir/$1"
  case $arch in lstm_monotonic | lstm_mocha | lstm_milk) echo "${MONOTONIC_STOP:-}" ;; esac
  [ "${LAST_CHECKPOINT:-0}" != 1 ] || echo last
}
decode_pending() {  # NAME: every subset (and variant) not decoded since its checkpoint was written
  local subset rule f
  for subset in $SUBSETS; do
    for rule in "" $(variants "$1"); do  # "": the default rule
      f=$out/$1/$subset${rule:+.$rule}
      [ -s "$f.txt" ] && [ "$f.txt" -nt "$(checkpoint "$1" "$rule")" ] && continue
      decode_one "$1" "$subset" "$rule"
    done
  done
}

train_one() {  # NAME; a training that fails (not one stopped to resume) leaves $specs_dir/NAME.failed
  local name=$1 arch flags status=0
  read -r arch flags < "$specs_dir/$name"
  rm -f "$specs_dir/$name.failed"
  # shellcheck disable=SC2086
  NAME=$name TIME_LIMIT=$TIME_LIMIT bash recipes/train.sh "$arch" "$bin" "$out/$name" $RULE $flags || status=$?
  if [ "$status" -eq 0 ]; then
    touch "$out/$name/done"
    decode_pending "$name"
  elif [ "$status" -eq 3 ]; then  # TIME_LIMIT or a signal: train.sh said it resumes
    say "$name: not finished (resumes on the next run)"
  else
    touch "$specs_dir/$name.failed"
    say "$name: not trained (exit $status; its error is above)"
  fi
}
running=0
for name in "${names[@]}"; do
  [ "$DECODE_ONLY" = 1 ] && break
  selected "$name" || continue
  if [ -f "$out/$name/done" ]; then say "$name: trained already"; continue; fi
  train_one "$name" &
  running=$((running + 1))
  if [ "$running" -ge "$PARALLEL" ]; then wait -n || true; running=$((running - 1)); fi
done
wait || true
running=0  # systems decoded side by side too: on a GPU each fairseq-generate is mostly start-up
for name in "${names[@]}"; do
  selected "$name" && decodable "$name" || continue
  decode_pending "$name" &
  running=$((running + 1))
  if [ "$running" -ge "$PARALLEL" ]; then wait -n || true; running=$((running - 1)); fi
done
wait || true
for subset in $SUBSETS; do
  specs=()
  for name in "${names[@]}"; do
    for rule in "" $(variants "$name"); do
      f=$out/$name/$subset${rule:+.$rule}
      label=$name${rule:+@$rule}$([ -f "$out/$name/done" ] || echo " (unfinished)")
      [ -s "$f.txt" ] && specs+=("$label=$f.txt:$f.jsonl")
    done
  done
  [ ${#specs[@]} -gt 0 ] || continue
  # shellcheck disable=SC2086
  python -m fairseq_vision_attn.report "${specs[@]}" --tokenize "$TOKENIZE" ${REPORT_FLAGS:-} > "$out/table.$subset.tsv"
  say "table: $out/table.$subset.tsv"
done
# the other systems trained and the tables written, a system whose training failed fails the queue
failed=()
for name in "${names[@]}"; do
  [ "$DECODE_ONLY" != 1 ] && selected "$name" && [ -f "$specs_dir/$name.failed" ] && failed+=("$name")
done
[ ${#failed[@]} -eq 0 ] || fail "not trained: ${failed[*]} (each one's error is above)"
