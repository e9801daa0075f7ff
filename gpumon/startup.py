"""How gpumon starts: without the cyclic garbage collector until it has settled.

Start-up builds many objects and frees next to none, so collecting then is work for nothing.
The entry point calls :func:`begin`; a mode that lives on calls :func:`settled` once started,
freezing what start-up left. Imports nothing of gpumon: every layer may use it.
docs/process-and-terminal.md has the figures.
"""

from __future__ import annotations

import gc


def begin() -> None:
    """Start without the collector (the entry point, before anything else is imported)."""
    gc.disable()


def settled() -> None:
    """Start-up is over: collect its garbage, freeze what it keeps, and turn the collector
    back on; nothing when it is on already."""
    if gc.isenabled():
        return
    gc.collect()
    gc.freeze()
    gc.enable()
