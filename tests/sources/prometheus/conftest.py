"""The replayed Prometheus the source's tests read: recorded answers on a loopback server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.prometheus_replay import Replay


@pytest.fixture
def replay() -> Iterator[Replay]:
    server = Replay()
    try:
        yield server
    finally:
        server.close()
