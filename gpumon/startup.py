"""How gpumon starts: without the cyclic garbage collector until it has settled.

Start-up builds tens of thousands of objects (modules, classes, Textual's widgets and
styles, the parsers) and frees next to none of them, so each collection then walks them all
for nothing: ~4 ms of a 60 ms ``gpumon status``, ~6 % of the dashboard's first frame. The
entry point (:mod:`gpumon.__main__`) calls :func:`begin`; a mode that lives on calls
:func:`settled` once it has started (the dashboard: after its first frame with data, or
5 s after start without one), and
what start-up left is frozen there, so no later collection walks it again either (the
dashboard's steady CPU ~10 % lower). A one-shot command never calls it: the few cycles it
makes go with the process.

Imports nothing of gpumon: every layer may use it.
"""

from __future__ import annotations

import gc


def begin() -> None:
    """Start without the collector (the entry point, before anything else is imported)."""
    gc.disable()


def settled() -> None:
    """Start-up is over: collect what it left as garbage, freeze what it keeps (modules,
    classes, the screen), and turn the collector back on. Nothing when it is on already (a
    test, or a caller that is not the entry point)."""
    if gc.isenabled():
        return
    gc.collect()
    gc.freeze()
    gc.enable()
