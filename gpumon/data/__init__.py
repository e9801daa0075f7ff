"""Pure data and functions: the model, the field table, formatting, views and the cluster.

What lives here: :mod:`~gpumon.data.model` (frozen samples, units in field names, ``None``
for N/A), :mod:`~gpumon.data.fields` (one descriptor per GPU field), :mod:`~gpumon.data.format`
(values to short strings, hostile text made safe), :mod:`~gpumon.data.views` (filters, the
per-user summary, FREE), :mod:`~gpumon.data.idle` (held idle: what IDLE means, per process
and per GPU), :mod:`~gpumon.data.selection` (``--only``, ``--only-visible``),
:mod:`~gpumon.data.cluster` (nodes and their states),
:mod:`~gpumon.data.painting` (ANSI colours of the headless text), :mod:`~gpumon.data.text_table`
(the headless GPU table's lines), :mod:`~gpumon.data.ranking` (``gpumon pick``'s ranking),
:mod:`~gpumon.data.usage` and :mod:`~gpumon.data.report` (``gpumon report``'s rows and the
whole report) and :mod:`~gpumon.data.periods` (its ``--since``, ``--from`` and ``--to``).

May import: the standard library only. No I/O, no threads, no textual, rich, psutil or pynvml
(the lowest layer; enforced by the import-linter contracts in pyproject.toml).
"""
