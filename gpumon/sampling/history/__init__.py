"""The history database: what ``gpumon record`` (and ``gpumon export --record``) write, and
what ``gpumon report`` and the dashboard read. SQLite from the standard library: a private
live database in WAL mode, and a snapshot of it for everyone.

What lives here, each module importing only those above it in this list:
:mod:`~gpumon.sampling.history.schema` (the tables, versions and migrations, and the one-line
errors), :mod:`~gpumon.sampling.history.files` (where the file is; opening it read-only; the
checks on who else could write it), :mod:`~gpumon.sampling.history.live` (the recorder's
private live database, and the snapshot of it that it publishes for readers),
:mod:`~gpumon.sampling.history.aggregate` (samples into pending minute, session and usage
rows; no SQL), :mod:`~gpumon.sampling.history.rows` and
:mod:`~gpumon.sampling.history.retention` (writing them; pruning),
:mod:`~gpumon.sampling.history.writer` (one transaction per batch),
:mod:`~gpumon.sampling.history.recorder` (errors as lines, a thread for the exporter),
:mod:`~gpumon.sampling.history.queries` and :mod:`~gpumon.sampling.history.reader` (the
read API).

May import: :mod:`gpumon.data`, :mod:`gpumon.config`; never
textual or rich, never a source.
"""
