from . import translation_vision_attn  # noqa: F401  (registration side effects)
