"""Whether a piece of Textual that gpumon replaces is still the code it was written against.

gpumon replaces two of Textual's private methods (:mod:`gpumon.ui.exact_updates`,
:mod:`gpumon.ui.input_driver`) and does so only where the installed Textual's method is the
one it follows, line for line: :func:`source_sha256` hashes the method's source lines, found
from its code objects' line numbers (a fraction of a millisecond, where
``textual.__version__`` costs ~11 ms of ``importlib.metadata`` at start-up and
``inspect.getsource`` ~4 ms). Another Textual 8 gets Textual's own code, as it is.
"""

from __future__ import annotations

import hashlib
import linecache
from collections.abc import Callable
from typing import Any


def source_sha256(function: Callable[..., Any]) -> str | None:
    """SHA-256 of ``function``'s source lines (those of its nested functions included);
    ``None`` where its source cannot be read."""
    try:
        code = function.__code__
        codes, last = [code], code.co_firstlineno
        while codes:
            current = codes.pop()
            last = max([last, *(line for _, _, line in current.co_lines() if line is not None)])
            codes.extend(const for const in current.co_consts if hasattr(const, "co_lines"))
        lines = linecache.getlines(code.co_filename)
    except (AttributeError, OSError, TypeError, ValueError):
        return None
    if len(lines) < last:
        return None
    return hashlib.sha256("".join(lines[code.co_firstlineno - 1 : last]).encode()).hexdigest()
