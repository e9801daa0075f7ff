"""Claims for tests: a claim file on one of :data:`GPUS`, and a claims directory that cannot be
listed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpumon.data import claims as rules
from gpumon.sources.host import claims as host_claims
from gpumon.sources.host.claims import ClaimsDir
from tests.support.samples import make_gpu

GPUS = tuple(make_gpu(index) for index in range(4))


def claim(claims_dir: Path, index: int, age_s: float) -> None:
    key = rules.claim_key(GPUS[index].uuid)
    assert key is not None
    with ClaimsDir.open(str(claims_dir), create=True) as directory:
        made = time.time() - age_s
        name = directory.write(key, made, made + 120)
        os.utime(name, (made, made), dir_fd=directory.fd)


def cannot_list(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Listing the claims directory fails (an I/O error); returns the count of tries."""
    tries = [0]

    def scan(self: ClaimsDir, *args: object, **options: object) -> object:
        tries[0] += 1
        raise host_claims.ClaimsOff(f"cannot list {self.path}: Input/output error")

    monkeypatch.setattr(ClaimsDir, "scan", scan)
    return tries
