"""The replayed Prometheus the source's tests read (recorded answers on a loopback server), and
the processes the live tests start (each ended after its test)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sources.prometheus.test_prometheus_integration import Started
from tests.support.prometheus_replay import Replay


@pytest.fixture
def replay() -> Iterator[Replay]:
    server = Replay()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def started() -> Iterator[Started]:
    processes = Started()
    try:
        yield processes
    finally:
        processes.stop_all()
