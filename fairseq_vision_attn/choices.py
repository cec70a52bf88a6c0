"""Values of flags that a command's parser offers before it imports torch: ``plots`` and
``analysis`` start without torch and fairseq, and import them only in the sub-commands that load a
checkpoint (see the package docstring)."""

#: ``--monotonic-stop``: the hard head's test-time stop rule (``attention/monotonic.py``'s docstring)
STOP_RULES = ("energy", "cumulative")
