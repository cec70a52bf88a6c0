"""Attention mechanisms behind one interface (:mod:`.base`), selected by ``--attention``.

Importing this package registers every mechanism in :data:`.registry.ATTENTION_REGISTRY`.
"""

from . import additive, flexible, local, memory, monotonic, none, temperature, waitk  # noqa: F401  (registration side effects)
from .base import Attention, AttentionStep, masked_softmax, source_lengths  # noqa: F401
from .registry import (  # noqa: F401
    ATTENTION_REGISTRY,
    add_attention_args,
    attention_choices,
    build_attention,
    register_attention,
)
