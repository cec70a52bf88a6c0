"""fairseq-vision-attn: where and how much an attention model looks, as a fairseq plugin.

Loaded with ``--user-dir fairseq_vision_attn`` (or by import), it registers the model family
``vision_attn_lstm`` with its architectures, the task ``translation_vision_attn`` and the
package's criteria. See docs/mechanisms.md for the map of files to papers.
"""

import logging

# fairseq's text-to-speech task logs "Please install tensorboardX" at INFO when imported; the
# package's own commands (python -m fairseq_vision_attn.*) import fairseq first and would print it.
logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)

from ._checkpoint_compat import allow_fairseq_checkpoint_globals, guard_damaged_checkpoints  # noqa: E402
from ._resume import keep_lr_schedule_on_resume  # noqa: E402
from .errors import VisionAttnError, install_excepthook  # noqa: E402

allow_fairseq_checkpoint_globals()
guard_damaged_checkpoints()
keep_lr_schedule_on_resume()
install_excepthook()

from . import attention, criterions, models, tasks  # noqa: E402,F401  (registration)

__version__ = "0.1.0"
__all__ = ["VisionAttnError", "__version__"]
