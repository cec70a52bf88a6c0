"""Let torch >= 2.6 (``weights_only=True`` by default) load fairseq checkpoints.

fairseq's checkpoints pickle the legacy ``argparse.Namespace`` of a model's flags and, with
``--eval-bleu`` or ``--best-checkpoint-metric bleu``, numpy scalars and arrays (the
BLEU counts in the saved meters). fairseq imports the
``--user-dir`` package before it loads any checkpoint (fairseq-generate, fairseq-interactive,
resumed training), so allow-listing exactly these globals here is enough: the weights-only
check stays on for everything else.
"""

import argparse

import numpy as np
import torch


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
