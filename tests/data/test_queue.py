"""Who a free GPU is kept for: the oldest waiter it suits, backfill for those that cannot start
now, and waiter files that are not what pick writes are refused."""

from __future__ import annotations

import pytest

from gpumon.data import claims as claim_rules
from gpumon.data import queue as rules
from tests.support.pick_helpers import GIB, gpu, job, sample

FREE = 1 * GIB  # FREE: under 1 GiB in use
GPUS = (gpu(0), gpu(1), gpu(2, memory_used_bytes=20 * GIB, memory_free_bytes=4 * GIB))
BUSY = (job(GPUS[2], 100),)


def waiter(name: str, since_s: float, **request: object) -> rules.Waiter:
    asked = rules.Request(**{"free_below_bytes": FREE, **request})  # type: ignore[arg-type]
    return rules.Waiter(1000, "alice", name, since_s, 4242, asked)


def key(index: int) -> str:
    found = claim_rules.claim_key(GPUS[index].uuid)
    assert found is not None
    return found


def test_the_oldest_waiters_keep_the_freest_gpus_in_turn() -> None:
    kept = rules.kept_for(
        sample(GPUS, BUSY), [waiter("a", 1.0, count=1), waiter("b", 2.0, count=1)], ()
    )
    assert {k: w.file_name for k, w in kept.items()} == {key(0): "a", key(1): "b"}


def test_an_older_waiter_that_cannot_start_now_keeps_nothing() -> None:
    """Backfill: 2 FREE GPUs, the oldest wants 3, the next 1: only the next keeps one."""
    kept = rules.kept_for(
        sample(GPUS, BUSY), [waiter("big", 1.0, count=3), waiter("small", 2.0, count=1)], ()
    )
    assert {k: w.file_name for k, w in kept.items()} == {key(0): "small"}


def test_claimed_gpus_and_gpus_a_waiter_did_not_name_are_not_kept() -> None:
    only_one = waiter("a", 1.0, count=1, only=(key(1),))
    assert set(rules.kept_for(sample(GPUS, BUSY), [only_one], ())) == {key(1)}
    assert rules.kept_for(sample(GPUS, BUSY), [only_one], {key(1)}) == {}


def test_a_waiter_file_round_trips_and_its_name_is_never_a_claims() -> None:
    request = rules.Request(count=2, min_free_bytes=20 * GIB, output_format="index", only=("k",))
    parsed = rules.parse_waiter_text(rules.waiter_text(request, 12.5, 42, 10.25))
    assert (parsed.request, parsed.since_s, parsed.pid, parsed.started_s) == (
        request,
        12.5,
        42,
        10.25,
    )
    name = rules.file_name(1000, "ab" * 8)
    assert rules.parse_file_name(name) == (1000, "ab" * 8)
    assert claim_rules.parse_file_name(name) is None


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"gpumon-claim 1\n", "not a gpumon waiter"),
        (b"gpumon-wait 1\nsince 1\nsince 2\n", "a field is given twice"),
        (b"gpumon-wait 1\nsince -1\n", "no valid since"),
        (b"\xff", "not text"),
        (b"gpumon-wait 1\n" + b"x" * 5000, "too large"),
    ],
)
def test_text_pick_did_not_write_is_refused(data: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        rules.parse_waiter_text(data)
