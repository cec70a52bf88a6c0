"""Criteria of the package (flexible-attention and latency-augmented losses) register here."""
