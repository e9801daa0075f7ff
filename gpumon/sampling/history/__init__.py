"""The history database: what ``gpumon record`` (and ``gpumon export --record``) write, and
what ``gpumon report`` and the dashboard read. SQLite: a private live database in WAL mode,
and a snapshot of it for everyone (docs/history.md).

``schema``, ``files``, ``live``, ``aggregate``, ``rows``, ``retention``, ``writer``,
``recorder``, ``queries``, ``reader``: each imports only those before it. May import
:mod:`gpumon.data`, :mod:`gpumon.config`; never a UI or a source.
"""
