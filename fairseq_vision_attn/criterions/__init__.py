"""Criteria of the package: the flexible-attention regulariser (Shu & Nakayama Eq. 9)."""

from . import flexible_attention_cross_entropy  # noqa: F401  (registration side effects)
