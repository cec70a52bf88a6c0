"""Criteria of the package: the flexible-attention regulariser (Shu & Nakayama Eq. 9) and the
latency-augmented cross-entropy (MILk Eq. 15)."""

from . import flexible_attention_cross_entropy, latency_augmented_cross_entropy  # noqa: F401  (registration)
