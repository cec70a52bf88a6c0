"""User-facing errors and the validators that raise them.

Every invalid flag or input this package detects raises :class:`VisionAttnError` with a
one-line message that names the flag and the valid values. When the package is loaded
through ``--user-dir``, :func:`install_excepthook` makes an uncaught ``VisionAttnError``
(also one that fairseq re-raised as a generic ``Exception``) print that line and exit
with status 2, like an argparse error, instead of a traceback from deep inside fairseq.
Any other exception keeps Python's normal traceback.
"""

import argparse
import functools
import math
import sys


class VisionAttnError(ValueError):
    """An invalid flag value, input or checkpoint, described in one line."""


def _find_ours(exc):
    """Return the first VisionAttnError in ``exc``'s cause/context chain, or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, VisionAttnError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


# fairseq's own errors about user input (a missing checkpoint or split), which it raises as
# plain exceptions: shown as one line too, when this package is loaded.
FAIRSEQ_USER_ERRORS = (
    (OSError, "Model file not found"),
    (FileNotFoundError, "Dataset not found"),
)


def _user_error_line(exc):
    ours = _find_ours(exc)
    if ours is not None:
        return str(ours)
    for kind, prefix in FAIRSEQ_USER_ERRORS:
        if isinstance(exc, kind) and str(exc).startswith(prefix):
            return str(exc)
    return None


def install_excepthook():
    """Print our errors as one line (``fairseq-vision-attn: error: ...``) and exit 2."""
    if getattr(sys.excepthook, "_vision_attn", False):
        return
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        line = _user_error_line(exc)
        if line is None:
            previous(exc_type, exc, tb)
            return
        sys.stderr.write(f"fairseq-vision-attn: error: {line}\n")
        sys.stderr.flush()
        # sys.exit is not allowed inside an excepthook; the interpreter is exiting anyway.
        import os

        os._exit(2)

    hook._vision_attn = True
    sys.excepthook = hook


# ---------------------------------------------------------------------------------------
# argparse ``type=`` validators: argparse turns their ArgumentTypeError into
# "error: argument --flag: <message>" with exit status 2 and no traceback.
# ---------------------------------------------------------------------------------------


def str2bool(text):
    """true/false, yes/no, on/off, 1/0 (case-insensitive)."""
    lowered = str(text).lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def greater_than_one(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a number > 1, got {text!r}") from None
    if not value > 1 or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"expected a finite number > 1 (tau_t lies in (1/lambda, lambda)), got {text!r}"
        )
    return value


def positive_int(text):
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def nonzero_int(text):
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a non-zero integer, got {text!r}") from None
    if value == 0:
        raise argparse.ArgumentTypeError("expected a non-zero integer, got 0")
    return value


def positive_float(text):
    """A finite float > 0; ``inf`` is allowed only where :func:`positive_float_or_inf` is used."""
    value = _parse_float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def positive_float_or_inf(text):
    value = _parse_float(text)
    if math.isnan(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0 (or 'inf'), got {text!r}")
    return value


def finite_float(text):
    value = _parse_float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def non_negative_float(text):
    value = _parse_float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def probability(text):
    value = _parse_float(text)
    if not (0.0 <= value < 1.0):
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1), got {text!r}")
    return value


def _parse_float(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def check(condition, message):
    """Raise :class:`VisionAttnError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise VisionAttnError(message)


# ---------------------------------------------------------------------------------------
# The package's own commands (plots, analysis, report, toydata): one line and exit 2 for
# every error about their input, the same contract as the fairseq entry points.
# ---------------------------------------------------------------------------------------


def _os_error_line(err):
    where = f"{err.filename}: " if err.filename else ""
    return f"{where}{err.strerror or err}"


def one_line_errors(main):
    """Wrap a command's ``main(argv)``: a :class:`VisionAttnError`, an ``OSError`` (a missing
    or unwritable file) or a ``SystemExit`` with a message prints ``fairseq-vision-attn: error:
    <message>`` and exits 2; argparse's own errors keep their usage line and exit 2."""

    @functools.wraps(main)
    def wrapped(argv=None):
        try:
            return main(argv)
        except SystemExit as exit_:
            if not isinstance(exit_.code, str):
                raise
            line = exit_.code
        except VisionAttnError as err:
            line = str(err)
        except OSError as err:
            line = _os_error_line(err)
        sys.stderr.write(f"fairseq-vision-attn: error: {line}\n")
        sys.exit(2)

    return wrapped


def number(text, where):
    """float(text), or a VisionAttnError naming ``where`` (file and line)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        raise VisionAttnError(f"{where}: expected a number, got {text!r}") from None
