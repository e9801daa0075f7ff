"""The history database: what ``gpumon record`` (and ``gpumon export --record``) write, and
what ``gpumon report`` and the dashboard read. SQLite from the standard library: a private
live database in WAL mode, and a snapshot of it for everyone (docs/history.md).

Modules import only those before them: schema, files, live, aggregate, rows, retention,
writer, recorder, queries, reader.

May import: :mod:`gpumon.data`, :mod:`gpumon.config_file`, :mod:`gpumon.settings`; never
textual or rich, never a source.
"""
