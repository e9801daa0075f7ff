"""Detail on demand: one node's per-GPU and per-process series, read only for the nodes the
user looks at (a node's screen) or watches.

The node list comes from rows; a node's GPUs and processes come from the source's
``detail(node)`` (blocking HTTP), on a thread worker, never two reads at once: a read asked
for while one runs starts once it ends (one, however often it was asked). The app asks on
opening a node and after each answer of the cluster (its refresh interval). Each read is
posted back as a :class:`DetailRead`; a failure keeps the last node read, with why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from textual.app import App
from textual.message import Message

from gpumon.data.cluster import Node
from gpumon.data.format import error_text


class DetailSource(Protocol):
    def detail(self, node: str) -> Node: ...


@dataclass(frozen=True, slots=True)
class Detail:
    """What the last read of a node told: ``node`` (``None`` before the first answer, or
    when none ever came), ``error`` when the last read failed (``node`` is the one before)."""

    node: Node | None = None
    error: str | None = None
    reading: bool = False  # asked for, no answer yet


class DetailRead(Message):
    """A node's detail read on the worker thread (messages up): the node, or why not."""

    def __init__(self, name: str, node: Node | None, error: str | None) -> None:
        super().__init__()
        self.name = name
        self.node = node
        self.error = error


class DetailsDone(Message):
    """The worker read every node it was asked for."""


class DetailReader:
    """The nodes whose detail is wanted, what was read of each, and the one read in flight.

    ``names`` says, when a read starts, which nodes to read (the wanted ones, and the app's
    watched ones, less those whose GPUs the cluster's answer already carries).
    """

    def __init__(self, app: App[Any], source: DetailSource) -> None:
        self._app = app
        self._source = source
        self.details: dict[str, Detail] = {}
        self.wanted: Counter[str] = Counter()
        self.in_flight = False
        self._again = False
        self.reads = 0  # reads started (tests count them)

    def want(self, name: str, fresh: bool = False) -> None:
        """A screen shows ``name``: read it now (or once the read in flight ends). What was
        read of it before is not shown as current unless ``fresh`` (read at each answer:
        another screen shows it, or it is watched)."""
        if not fresh and not self.wanted[name]:
            self.details[name] = Detail(reading=True)
        self.wanted[name] += 1
        self.details.setdefault(name, Detail(reading=True))

    def drop(self, name: str, keep: bool = False) -> None:
        """A screen of ``name`` closed; what was read is forgotten unless ``keep``."""
        self.wanted[name] -= 1
        if self.wanted[name] <= 0:
            del self.wanted[name]
            if not keep:
                self.details.pop(name, None)

    def read(self, names: Iterable[str]) -> None:
        """Read ``names`` on a thread worker; while a read runs, once more after it."""
        names = list(dict.fromkeys(names))
        if not names:
            return
        if self.in_flight:
            self._again = True
            return
        self.in_flight = True
        self.reads += 1
        source, post = self._source, self._app.post_message

        def read_all() -> None:
            try:
                for name in names:
                    try:
                        post(DetailRead(name, source.detail(name), None))
                    except Exception as error:  # the source's own failure, in words
                        post(DetailRead(name, None, error_text(error) or type(error).__name__))
            finally:
                post(DetailsDone())

        self._app.run_worker(read_all, thread=True, group="detail", exit_on_error=False)

    def on_read(self, message: DetailRead) -> None:
        if message.name not in self.details:
            return  # its screen closed meanwhile
        before = self.details[message.name]
        if message.node is not None:
            self.details[message.name] = Detail(message.node)
        else:
            self.details[message.name] = replace(before, error=message.error, reading=False)

    def on_done(self, again: Callable[[], Iterable[str]]) -> None:
        """The read ended: a read asked for meanwhile starts now, of ``again()``."""
        self.in_flight = False
        if self._again:
            self._again = False
            self.read(again())
