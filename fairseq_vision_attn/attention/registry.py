"""In-package registry of attention mechanisms, keyed by the ``--attention`` flag's values."""

from ..errors import VisionAttnError

ATTENTION_REGISTRY = {}


def register_attention(name):
    """Class decorator: make ``cls`` selectable with ``--attention name``."""

    def wrapper(cls):
        if name in ATTENTION_REGISTRY:
            raise ValueError(f"attention {name!r} is registered twice")
        ATTENTION_REGISTRY[name] = cls
        cls.registry_name = name
        return cls

    return wrapper


def attention_choices():
    return sorted(ATTENTION_REGISTRY)


def build_attention(name, args, query_dim, key_dim, embed_dim):
    """Instantiate the mechanism called ``name`` (wrapped in ``--attention-temperature`` when
    one is asked for); unknown names list the valid ones."""
    if name not in ATTENTION_REGISTRY:
        raise VisionAttnError(
            f"--attention: unknown mechanism {name!r}; valid choices: {', '.join(attention_choices())}"
        )
    from .temperature import wrap_with_temperature

    attention = ATTENTION_REGISTRY[name](args, query_dim, key_dim, embed_dim)
    return wrap_with_temperature(attention, args)


def add_attention_args(parser):
    """Expose every registered mechanism's flags in one block."""
    from .temperature import add_temperature_args

    for name in attention_choices():
        ATTENTION_REGISTRY[name].add_args(parser)
    add_temperature_args(parser)
