#!/usr/bin/env bash
# Which checkpoint of one trained system to decode: each kept epoch checkpoint, and averages of
# consecutive epochs, decoded on valid and test into one table per subset, so that the choice is
# made on valid and test is read once for it (docs/results.md "Which checkpoint to decode").
#   bash recipes/claims/checkpoint_choice.sh QUEUE_OUT NAME DATA_BIN
# QUEUE_OUT/NAME/checkpoints must hold the epochs' checkpoint{E}.pt: train with KEEP_EPOCHS (e.g.
# recipes/claims/enja_average.queue). Candidates: epoch{E} for every kept epoch from FIRST_EPOCH
# (default 1), best and last (checkpoint_best.pt / checkpoint_last.pt), avg_lastN (the last N
# epochs, ending at the last one) and avg_bestN (the N epochs ending at the best-loss epoch) for
# every N in AVERAGES (default "3 5 8"). Writes QUEUE_OUT/NAME/choice/CANDIDATE.SUBSET.{txt,jsonl}
# (decoded once; a candidate decoded already is skipped) and QUEUE_OUT/NAME/choice/table.SUBSET.tsv.
# Environment: SUBSETS ("valid test"), BEAM (5), TOKENIZE (none), GEN_FLAGS (e.g. "--remove-bpe"),
# REPORT_FLAGS (e.g. "--ribes"), THREADS (1), DEVICE (auto, cpu, cuda).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
out=$(arg_path "${1:?"usage: checkpoint_choice.sh QUEUE_OUT NAME DATA_BIN"}" "")
name=${2:?NAME}
bin=$(arg_path "${3:?DATA_BIN}" "")
ckpts=$out/$name/checkpoints
[ -f "$ckpts/checkpoint_best.pt" ] || usage_error "$ckpts holds no checkpoint_best.pt: train $name first"
SUBSETS=${SUBSETS:-"valid test"}; BEAM=${BEAM:-5}; TOKENIZE=${TOKENIZE:-none}
AVERAGES=${AVERAGES:-"3 5 8"}; FIRST_EPOCH=${FIRST_EPOCH:-1}
[[ $FIRST_EPOCH =~ ^[0-9]+$ ]] || usage_error "FIRST_EPOCH: '$FIRST_EPOCH' is not an epoch number"
for n in $AVERAGES; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || usage_error "AVERAGES: '$n' is not a positive number of epochs"
done
export OMP_NUM_THREADS=${THREADS:-1}
mapfile -t epochs < <(find "$ckpts" -maxdepth 1 -name 'checkpoint[0-9]*.pt' -printf '%f\n' \
  | sed 's/^checkpoint\([0-9]*\)\.pt$/\1/' | sort -n)
[ ${#epochs[@]} -gt 0 ] || usage_error "$ckpts holds no epoch checkpoint (checkpoint{E}.pt): \
train $name with KEEP_EPOCHS (recipes/train.sh)"
choice=$out/$name/choice
mkdir -p "$choice"
cd "$ROOT"

candidates=()
for epoch in "${epochs[@]}"; do
  [ "$epoch" -ge "$FIRST_EPOCH" ] || continue
  ln -sf "$ckpts/checkpoint$epoch.pt" "$choice/epoch$epoch.pt"
  candidates+=("epoch$epoch")
done
ln -sf "$ckpts/checkpoint_best.pt" "$choice/best.pt"
ln -sf "$ckpts/checkpoint_last.pt" "$choice/last.pt"
candidates+=(best last)
for n in $AVERAGES; do
  for upto in last best; do
    cand=avg_$upto$n
    if [ ! -s "$choice/$cand.pt" ] || [ "$ckpts/checkpoint_last.pt" -nt "$choice/$cand.pt" ]; then
      upto_flag=(--upto best); [ "$upto" = last ] && upto_flag=()
      if ! python -m fairseq_vision_attn.average --dir "$ckpts" --last "$n" "${upto_flag[@]}" \
        --output "$choice/$cand.pt" > "$choice/$cand.log" 2>&1; then
        say "$cand: not averaged ($(tail -n 1 "$choice/$cand.log"))"; continue
      fi
    fi
    candidates+=("$cand")
  done
done

for subset in $SUBSETS; do
  specs=()
  for cand in "${candidates[@]}"; do
    f=$choice/$cand.$subset
    if [ ! -s "$f.txt" ] || [ "$choice/$cand.pt" -nt "$f.txt" ]; then
      say "decoding $name $cand ($subset)"
      # shellcheck disable=SC2086
      if ! fairseq-generate "$bin" --user-dir fairseq_vision_attn --task translation_vision_attn \
        --path "$choice/$cand.pt" --gen-subset "$subset" --beam "$BEAM" --batch-size 64 \
        "${DEVICE_FLAGS[@]}" --stats-output "$f.jsonl.part" ${GEN_FLAGS:-} > "$f.txt.part" 2> "$f.log"; then
        rm -f "$f.txt.part" "$f.jsonl.part"
        say "decoding $cand ($subset) failed: $(explain "$f.log") (log: $f.log)"; continue
      fi
      mv -f "$f.jsonl.part" "$f.jsonl" && mv -f "$f.txt.part" "$f.txt"
    fi
    specs+=("$cand=$f.txt:$f.jsonl")
  done
  # shellcheck disable=SC2086
  python -m fairseq_vision_attn.report "${specs[@]}" --tokenize "$TOKENIZE" ${REPORT_FLAGS:-} > "$choice/table.$subset.tsv"
  say "table: $choice/table.$subset.tsv"
done
