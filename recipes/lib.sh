# Helpers the recipes share (sourced, not run): paths, the device, progress lines, failures.
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Paths given on the command line are relative to the directory the recipe was started from;
# defaults are relative to the repository root ($ROOT), where the recipe then works.
# DEVICE: auto (default: the GPU when torch sees one, else the CPU), cpu or cuda.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CALLER=$PWD
RECIPE=$(basename "$0" .sh)

# arg_path VALUE DEFAULT: VALUE resolved against the caller's directory; DEFAULT when empty
arg_path() {
  if [ -z "$1" ]; then printf '%s\n' "$2"
  elif [[ $1 == /* ]]; then printf '%s\n' "$1"
  else printf '%s\n' "$CALLER/$1"; fi
}

say() { echo "[$RECIPE] $*" >&2; }
fail() { echo "[$RECIPE] error: $*" >&2; exit 1; }
usage_error() { echo "[$RECIPE] error: $*" >&2; exit 2; }
explain() { python "$ROOT/recipes/progress.py" --explain "$1"; }

# every recipe that sources this file runs fairseq's commands; without them on PATH (usually: the
# environment recipes/install.sh installed into is not active) say so before any work
command -v fairseq-train >/dev/null 2>&1 || usage_error "fairseq-train is not on PATH: activate \
the environment recipes/install.sh installed into (. .venv/bin/activate), or run recipes/install.sh"

# The stopping rule of every real-data model (docs/results.md "One stopping rule"): halve the
# learning rate when the validation loss does not improve, stop after 5 epochs without
# improvement; queue.sh adds at most 60 epochs. A queue row's own flags come after it and win
# (e.g. --lr-patience 1).
PLATEAU_RULE="--lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 --lr-patience 0 --patience 5"

# fairseq-generate's flags for Multi30k De-En output scored as the recipes score it (sacrebleu
# 13a): BPE removed, Moses-detokenized
DEEN_DETOK=(--remove-bpe --tokenizer moses --source-lang de --target-lang en)

# auto asks torch (2-3 s to import) only where a GPU driver's device node exists (NVIDIA's
# /dev/nvidiactl, AMD's /dev/kfd, WSL2's /dev/dxg): elsewhere torch.cuda.is_available() is
# False, and a recipe that refuses its settings does so at once
DEVICE=${DEVICE:-auto}
case $DEVICE in
  auto) if { [ -e /dev/nvidiactl ] || [ -e /dev/kfd ] || [ -e /dev/dxg ]; } \
          && python -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
          DEVICE=cuda; else DEVICE=cpu; fi ;;
  cpu | cuda) ;;
  *) echo "DEVICE: '$DEVICE' is not one of: auto, cpu, cuda" >&2; exit 2 ;;
esac
export DEVICE
# fairseq's flag for the device: --cpu, or nothing (fairseq uses the GPU when it sees one)
DEVICE_FLAGS=()
if [ "$DEVICE" = cpu ]; then DEVICE_FLAGS=(--cpu); fi

# train_logged NAME LOG MAX_EPOCH COMMAND...: COMMAND's output appended to LOG, one line per
# epoch on the terminal, one line and exit status 1 if it fails
# (TIME_LIMIT > 0: the run is stopped after that many seconds and exits 3; it resumes next time;
# so does a training stopped by a signal, e.g. a session's end: exit 3 and one line that says so)
train_logged() {
  local name=$1 log=$2 epochs=$3; shift 3
  local limit=()
  if [ "${TIME_LIMIT:-0}" -gt 0 ]; then limit=(timeout "$TIME_LIMIT"); fi
  say "$name: training, up to $epochs epochs (log: $log)"
  set +e
  "${limit[@]}" "$@" 2>&1 | python "$ROOT/recipes/progress.py" --name "$name" --log "$log" --max-epoch "$epochs"
  local codes=("${PIPESTATUS[@]}")
  set -e
  local stopped=
  if [ "${codes[0]}" -eq 124 ] && [ ${#limit[@]} -gt 0 ]; then
    stopped="at TIME_LIMIT=$TIME_LIMIT s"
  elif [ "${codes[0]}" -gt 128 ] && [ "${codes[0]}" -le 192 ]; then  # not an error of the run's own
    stopped="by signal $(kill -l "${codes[0]}")"
  fi
  if [ -n "$stopped" ]; then
    say "$name: stopped $stopped; it resumes from checkpoint_last.pt on the next run (log: $log)"
    exit 3
  fi
  if [ "${codes[0]}" -ne 0 ] || [ "${codes[1]}" -ne 0 ]; then
    fail "$name: training failed: $(explain "$log") (log: $log)"
  fi
}

# check_order DATA_DIR OUT_DIR FILE: refuse the pre-2026-11 argument order (OUT_DIR DATA_DIR)
check_order() {
  if [ -f "$2/$3" ] && [ ! -f "$1/$3" ]; then
    usage_error "the arguments are [DATA_DIR] [OUT_DIR]; $2 holds the corpus ($3) and $1 does not: swap them"
  fi
}
