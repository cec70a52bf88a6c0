"""fairseq-vision-attn: where and how much an attention model looks, as a fairseq plugin.

Loaded with ``--user-dir fairseq_vision_attn`` (or by import), it registers the model family
``vision_attn_lstm`` with its architectures, the task ``translation_vision_attn`` and the
package's criteria. See docs/mechanisms.md for the map of files to papers.

The commands that read and write text (``TEXT_TOOLS``), run as ``python -m
fairseq_vision_attn.NAME``, skip that registration: importing torch and fairseq costs about 5 s a
start, which recipes pay once per decoding they tabulate. So does ``average``
(``CHECKPOINT_TOOLS``), which reads and writes checkpoints with torch alone. The sub-commands of
``plots`` and ``analysis`` that load a checkpoint register when they run (``register``).
"""

import logging
import sys

from .errors import VisionAttnError, install_excepthook

#: ``python -m fairseq_vision_attn.NAME`` for these starts without torch and fairseq (``plots`` and
#: ``analysis`` import them in the sub-commands that load a checkpoint, which call ``register``)
TEXT_TOOLS = ("report", "seeds", "toydata", "prepare_data", "plots", "analysis")
#: ... and for these without fairseq: they need torch, not a registered model
CHECKPOINT_TOOLS = ("average",)

_VALUED_OPTIONS = ("-X", "-W")  # the interpreter's options that take the next argument


def started_as_text_tool(argv=None, tools=TEXT_TOOLS):
    """Whether the interpreter was started as ``python [options] -m fairseq_vision_attn.NAME`` for
    a NAME in ``tools``; ``argv``: the interpreter's own arguments (``sys.orig_argv``, which
    runpy leaves as they were while it imports this package)."""
    names = {f"{__name__}.{tool}" for tool in tools}
    args = iter((sys.orig_argv if argv is None else argv)[1:])
    for arg in args:
        if arg == "-m":
            return next(args, None) in names
        if arg in _VALUED_OPTIONS:
            next(args, None)
        elif arg == "-c" or not arg.startswith("-"):
            return False  # a command string or a script: not a module run
    return False


_registered = False


def register():
    """Register the package with fairseq (models, task, criteria; checkpoints loadable under
    ``weights_only``), once; importing the package does it unless started as a text tool, whose
    sub-commands that load a checkpoint call it first."""
    global _registered
    if _registered:
        return
    _registered = True
    # fairseq's text-to-speech task logs "Please install tensorboardX" at INFO when imported; the
    # package's own commands (python -m fairseq_vision_attn.*) import fairseq first and would print it.
    logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)

    from ._checkpoint_compat import allow_fairseq_checkpoint_globals, guard_damaged_checkpoints
    from ._resume import keep_lr_schedule_on_resume

    allow_fairseq_checkpoint_globals()
    guard_damaged_checkpoints()
    keep_lr_schedule_on_resume()

    from . import attention, criterions, models, tasks  # noqa: F401  (registration)
    from .tasks.translation_vision_attn import (
        refuse_moses_without_languages,
        refuse_task_flags_without_the_task,
    )

    refuse_task_flags_without_the_task(sys.argv)
    refuse_moses_without_languages(sys.argv)


install_excepthook()

if not started_as_text_tool(tools=TEXT_TOOLS + CHECKPOINT_TOOLS):
    register()

__version__ = "0.1.0"
__all__ = [
    "CHECKPOINT_TOOLS",
    "TEXT_TOOLS",
    "VisionAttnError",
    "__version__",
    "register",
    "started_as_text_tool",
]
