"""Average the parameters of several checkpoints of one training run into one checkpoint.

    python -m fairseq_vision_attn.average --inputs CKPT [CKPT ...] --output AVG.pt
    python -m fairseq_vision_attn.average --dir SAVE_DIR --last N [--upto EPOCH|best] --output AVG.pt

The second form averages the epoch checkpoints ``checkpoint{E}.pt`` of a save directory (written
when training keeps them, e.g. ``KEEP_EPOCHS`` in ``recipes/train.sh``): the last ``N`` epochs, or
the ``N`` ending at ``--upto``: an epoch, or ``best``, the epoch whose weights are those of the
directory's ``checkpoint_best.pt``. Every floating-point tensor of the model's
state is the arithmetic mean of the inputs' (accumulated in float64, stored in the first input's
dtype); integer tensors (counters) are taken from the last input. The output keeps the last
input's flags and training state but no optimizer state, so ``fairseq-generate --path AVG.pt``
decodes it and nobody resumes a training from it by mistake. The inputs must be checkpoints of
one architecture (the same parameter names and shapes).
"""

import argparse
import os
import re

import torch

from .errors import VisionAttnError, one_line_errors, positive_int


def epoch_checkpoints(save_dir):
    """{epoch: path} of the ``checkpoint{E}.pt`` files in ``save_dir``."""
    if not os.path.isdir(save_dir):
        raise VisionAttnError(f"--dir {save_dir}: no such directory")
    found = {}
    for name in os.listdir(save_dir):
        match = re.fullmatch(r"checkpoint(\d+)\.pt", name)
        if match:
            found[int(match.group(1))] = os.path.join(save_dir, name)
    return found


def select_epochs(found, last, upto=None):
    """The paths of the ``last`` epochs ending at ``upto`` (default: the newest), oldest first."""
    if not found:
        raise VisionAttnError("the directory holds no epoch checkpoint (checkpoint{E}.pt)")
    upto = max(found) if upto is None else upto
    if last > upto:
        raise VisionAttnError(f"--last {last} epochs up to epoch {upto} would start before epoch 1")
    wanted = list(range(upto - last + 1, upto + 1))
    missing = [epoch for epoch in wanted if epoch not in found]
    if missing:
        have = f"{min(found)}-{max(found)}" if len(found) > 1 else str(min(found))
        raise VisionAttnError(
            f"epochs {missing} are not in the directory (it holds checkpoints of epochs {have}, "
            f"{len(found)} files): choose --last and --upto within them"
        )
    return [found[epoch] for epoch in wanted]


def same_weights(first, second):
    return first.keys() == second.keys() and all(torch.equal(first[key], second[key]) for key in first)


def best_epoch(save_dir, found):
    """The epoch whose checkpoint holds the weights of ``save_dir/checkpoint_best.pt``."""
    best = load(os.path.join(save_dir, "checkpoint_best.pt"))["model"]
    for epoch in sorted(found, reverse=True):
        if same_weights(load(found[epoch])["model"], best):
            return epoch
    raise VisionAttnError(
        f"{save_dir}/checkpoint_best.pt is none of the {len(found)} kept epoch checkpoints: "
        "keep more epochs (KEEP_EPOCHS) or give --upto EPOCH"
    )


def upto_epoch(text):
    return text if text == "best" else positive_int(text)


def average_states(states):
    """The mean of several model state dicts (same keys and shapes); integer entries from the last."""
    first = states[0]
    for index, state in enumerate(states[1:], 2):
        if state.keys() != first.keys():
            extra = sorted(set(state) ^ set(first))[:3]
            raise VisionAttnError(
                f"input {index} has other parameters than input 1 ({', '.join(extra)} ...): "
                "average checkpoints of one architecture"
            )
    averaged = {}
    for key, tensor in first.items():
        shapes = {tuple(state[key].shape) for state in states}
        if len(shapes) > 1:
            raise VisionAttnError(f"parameter {key} has different shapes {sorted(shapes)} across the inputs")
        if tensor.is_floating_point():
            total = sum(state[key].to(torch.float64) for state in states)
            averaged[key] = (total / len(states)).to(tensor.dtype)
        else:
            averaged[key] = states[-1][key].clone()
    return averaged


def load(path):
    """A checkpoint as saved (no fairseq upgrade of its flags), read with the weights-only check."""
    from . import _checkpoint_compat

    _checkpoint_compat.allow_fairseq_checkpoint_globals()
    if not os.path.isfile(path):
        raise VisionAttnError(f"{path}: no such checkpoint")
    try:
        state = torch.load(path, map_location="cpu")
    except Exception as exc:
        if not _checkpoint_compat._damaged(exc):
            raise
        raise VisionAttnError(f"checkpoint {path} is damaged or truncated: average other epochs") from None
    if not isinstance(state, dict) or "model" not in state:
        raise VisionAttnError(f"{path} is not a fairseq checkpoint (it has no 'model' entry)")
    return state


def average_checkpoints(paths):
    """A checkpoint dict: the last input's, its model the mean of all inputs' models."""
    states = [load(path) for path in paths]
    result = dict(states[-1])
    result["model"] = average_states([state["model"] for state in states])
    result["last_optimizer_state"] = None
    result["averaged_from"] = list(paths)
    return result


def get_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", nargs="+", metavar="CKPT", help="checkpoints to average")
    parser.add_argument("--dir", metavar="SAVE_DIR", help="a save directory with epoch checkpoints")
    parser.add_argument("--last", type=positive_int, metavar="N", help="with --dir: how many epochs")
    parser.add_argument(
        "--upto",
        type=upto_epoch,
        metavar="EPOCH",
        help="with --dir: the newest epoch to average, or 'best' (checkpoint_best.pt's epoch)",
    )
    parser.add_argument("--output", required=True, metavar="AVG.pt", help="where to write the average")
    return parser


@one_line_errors
def main(argv=None):
    parser = get_parser()
    args = parser.parse_args(argv)
    if bool(args.inputs) == bool(args.dir):
        parser.error("give either --inputs CKPT ... or --dir SAVE_DIR --last N")
    if args.dir:
        if args.last is None:
            parser.error("--dir needs --last N (how many epoch checkpoints to average)")
        found = epoch_checkpoints(args.dir)
        if not found:
            raise VisionAttnError(
                f"--dir {args.dir} holds no epoch checkpoint (checkpoint{{E}}.pt): train with KEEP_EPOCHS"
            )
        upto = best_epoch(args.dir, found) if args.upto == "best" else args.upto
        paths = select_epochs(found, args.last, upto)
    else:
        if args.last is not None or args.upto is not None:
            parser.error("--last and --upto go with --dir, not with --inputs")
        paths = args.inputs
    if os.path.abspath(args.output) in {os.path.abspath(path) for path in paths}:
        raise VisionAttnError(f"--output {args.output} is one of the inputs: write the average elsewhere")
    averaged = average_checkpoints(paths)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    partial = args.output + ".part"
    torch.save(averaged, partial)
    os.replace(partial, args.output)
    print(f"averaged {len(paths)} checkpoints into {args.output}: " + " ".join(paths))
    return 0


if __name__ == "__main__":
    main()
