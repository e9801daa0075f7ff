"""Whether the Textual code gpumon replaces parts of is still the code it was written against.

gpumon replaces two of Textual's private methods (:mod:`gpumon.ui.exact_updates`,
:mod:`gpumon.ui.input_driver`) and how its footer rebuilds
(:mod:`gpumon.ui.widgets.keys_footer`). Each relies on more than the method it replaces (how
spans and strips are cut, how a driver is suspended, how the key parser times out, what the
footer composes from), so each does
so only where the Textual modules it was written against are those installed, byte for
byte: :func:`follows` compares their SHA-256 (a fraction of a millisecond, where
``textual.__version__`` costs ~11 ms of ``importlib.metadata`` at start-up). Another
Textual 8, or one installed without its source, gets Textual's own code, as it is; the
tests fail until the change is looked at and carried over.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Mapping


def module_sha256(name: str) -> str | None:
    """SHA-256 of module ``name``'s source file; ``None`` where it has none to read."""
    try:
        path = getattr(importlib.import_module(name), "__file__", None)
        if path is None or not path.endswith(".py"):
            return None
        with open(path, "rb") as source:
            return hashlib.sha256(source.read()).hexdigest()
    except (ImportError, OSError):
        return None


def follows(expected: Mapping[str, str]) -> bool:
    """Whether every module named in ``expected`` has the source file hashed there."""
    return all(module_sha256(name) == digest for name, digest in expected.items())
