from . import architectures, lstm_attention  # noqa: F401  (registration side effects)
