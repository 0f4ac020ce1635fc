"""The ``neurontrace`` command line (installed as ``neurontrace.cli``)."""
