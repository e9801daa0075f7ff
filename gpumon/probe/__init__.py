"""The torch probe: a child process that checks torch on one GPU.

``protocol`` and ``steps`` (shared by both sides), ``runner``, ``child_process`` and
``confirm`` (the parent), ``cli`` (``gpumon probe``), ``child`` and ``child_io`` (the child,
which imports only the standard library, the protocol and steps, and torch). Never textual
or rich; nothing of the monitor imports torch (import contracts in pyproject.toml).
"""
