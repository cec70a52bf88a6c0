"""Loading checkpoints: let torch >= 2.6 (``weights_only=True`` by default) load fairseq
checkpoints, and report a damaged checkpoint file in one line (:func:`guard_damaged_checkpoints`).

fairseq's checkpoints pickle the legacy ``argparse.Namespace`` of a model's flags and, with
``--eval-bleu`` or ``--best-checkpoint-metric bleu``, numpy scalars and arrays (the
BLEU counts in the saved meters). fairseq imports the
``--user-dir`` package before it loads any checkpoint (fairseq-generate, fairseq-interactive,
resumed training), so allow-listing exactly these globals here is enough: the weights-only
check stays on for everything else.
"""

import argparse
import errno
import os
import pickle

import numpy as np
import torch

from .errors import VisionAttnError


def _numpy_globals():
    found = [np.dtype, np.ndarray]
    try:  # numpy >= 2
        from numpy._core.multiarray import _reconstruct, scalar
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _reconstruct, scalar
    found += [scalar, _reconstruct]
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        for name in ("Float64DType", "Float32DType", "Int64DType", "Int32DType", "BoolDType"):
            if hasattr(dtypes, name):
                found.append(getattr(dtypes, name))
    return found


def allow_fairseq_checkpoint_globals():
    if hasattr(torch.serialization, "add_safe_globals"):
        torch.serialization.add_safe_globals([argparse.Namespace, *_numpy_globals()])


# What torch raises on a checkpoint file that is truncated, empty or not a checkpoint at all.
_DAMAGED = (EOFError, pickle.UnpicklingError)
_DAMAGED_RUNTIME = ("PytorchStreamReader", "failed finding central directory", "zip archive")


def _damaged(exc):
    if isinstance(exc, _DAMAGED):
        return True
    if isinstance(exc, OSError) and exc.errno == errno.EINVAL:  # torch's zip reader on a cut file
        return True
    return isinstance(exc, RuntimeError) and any(text in str(exc) for text in _DAMAGED_RUNTIME)


def guard_damaged_checkpoints():
    """Make fairseq's one checkpoint reader (``checkpoint_utils.load_checkpoint_to_cpu``, used by
    fairseq-generate, fairseq-interactive, resumed training and this package's plots) turn a
    truncated, empty or foreign file into one line naming it, instead of a traceback from inside
    torch's zip reader. Every other error passes through unchanged."""
    from fairseq import checkpoint_utils

    load = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(load, "_vision_attn", False):
        return

    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return load(path, *args, **kwargs)
        except Exception as exc:
            if not _damaged(exc):
                raise
            size = os.path.getsize(path) if os.path.isfile(path) else 0
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise VisionAttnError(
                f"checkpoint {path} ({size:,} bytes) is damaged or truncated ({first}); "
                "load another checkpoint (checkpoint_best.pt, checkpoint_last.pt, an epoch's) "
                "or train again"
            ) from None

    load_checkpoint_to_cpu._vision_attn = True
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
