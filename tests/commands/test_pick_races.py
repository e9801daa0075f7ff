"""Racing `gpumon pick` processes never get the same GPU: of users or of one user, with or
without --wait, and whatever another user does to the shared claims directory (holds a
lock on it, fills it with junk). Each racer is a forked process (as nobody where a test
says so) running the real pick (tests/support/pick_race_child.py), released together."""

from __future__ import annotations

import fcntl
import os
import select
import shutil
import signal
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from gpumon.sources.host.claims import ClaimsDir
from tests.support import pick_race_child

NOBODY = 65534
ME = os.geteuid()
needs_root = pytest.mark.skipif(
    ME != 0, reason="a pick of another user needs a second uid: run as root"
)


@pytest.fixture
def base() -> Iterator[Path]:
    """A place every racer can reach (the test's tmp_path is root's alone)."""
    made = Path(tempfile.mkdtemp(prefix="gpumon-race-test-", dir="/tmp"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


def become(uid: int) -> None:
    """Be ``uid``, with no config of the user this test runs as (nobody cannot read it)."""
    for name in ("HOME", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "XDG_STATE_HOME"):
        os.environ[name] = "/nonexistent"
    if uid != os.geteuid():
        os.setgid(uid)
        os.setuid(uid)


def read_all(descriptor: int, count: int) -> bytes:
    """``count`` bytes from the pipe, or fewer once a minute passes without one (a racer
    that died before its turn: the others still hold the pipe open)."""
    got = b""
    while len(got) < count and select.select([descriptor], [], [], 60)[0]:
        byte = os.read(descriptor, 1)
        if not byte:
            break
        got += byte
    return got


def race(
    base: Path,
    uids: Sequence[int],
    *argv: str,
    gpus: int = 1,
    rounds: int = 1,
    stagger_s: float = 0.0,
    prepare: Callable[[Path], None] | None = None,
) -> list[list[tuple[int, int, str, str]]]:
    """Run one pick process per uid in ``uids``, ``rounds`` times over ``gpus`` FREE GPUs,
    released together once all have begun (``stagger_s``: one round, each racer started
    that long after the one before and released at once). ``prepare`` is given each round's
    claims directory (made root's, mode 1777) first. Returns each round's ``(uid, exit
    status, stdout, stderr)`` of each racer."""
    assert not stagger_s or rounds == 1
    for round_number in range(rounds):
        directory = base / f"round-{round_number}"
        directory.mkdir()
        directory.chmod(0o777)
        if prepare is not None:
            ClaimsDir.open(str(directory / "claims"), create=True).close()
            prepare(directory / "claims")
    gates = [os.pipe() for _ in uids]
    ready_read, ready_write = os.pipe()
    done_read, done_write = os.pipe()
    children: dict[int, int] = {}
    for (go_read, _), uid in zip(gates, uids, strict=True):
        child = os.fork()
        if child == 0:  # pragma: no cover - the child
            status = 0
            try:
                become(uid)
                pick_race_child.run(
                    str(base), rounds, go_read, ready_write, done_write, gpus, list(argv)
                )
            except BaseException:
                traceback.print_exc()
                status = 1
            os._exit(status)
        children[child] = uid
        if stagger_s:
            assert read_all(ready_read, 1) == b"r"
            os.write(gates[len(children) - 1][1], b"g")
            time.sleep(stagger_s)
    # Only the children hold these now: a child that dies ends the reads below (b"").
    for descriptor in (ready_write, done_write, *(go_read for go_read, _ in gates)):
        os.close(descriptor)
    try:
        for _ in range(rounds):
            if not stagger_s:
                assert read_all(ready_read, len(uids)) == b"r" * len(uids)
                for _, go_write in gates:
                    os.write(go_write, b"g")
            assert read_all(done_read, len(uids)) == b"d" * len(uids)
    finally:
        for descriptor in (ready_read, done_read, *(go_write for _, go_write in gates)):
            os.close(descriptor)  # a racer still waiting for its turn reads b"": it ends
        statuses = [os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) for child in children]
    assert statuses == [0] * len(uids)
    results = []
    for round_number in range(rounds):
        directory = base / f"round-{round_number}"
        found = []
        for child, uid in children.items():
            code, _, out = (directory / str(child)).read_text().partition(" ")
            found.append((uid, int(code), out, (directory / f"{child}.err").read_text()))
        results.append(found)
    return results


def winners(results: list[tuple[int, int, str, str]]) -> list[str]:
    """The GPUs printed, one per pick that printed one."""
    return sorted(out for _, code, out, _ in results if code == 0)


def test_two_picks_racing_for_one_gpu_exactly_one_wins(base: Path) -> None:
    """Two real `gpumon pick` processes, released together 20 times: one GPU each time."""
    for found in race(base, (ME, ME), rounds=20):
        assert sorted((code, out) for _, code, out, _ in found) == [(0, "0\n"), (1, "")], found


@needs_root
@pytest.mark.slow
def test_two_users_racing_for_one_gpu_exactly_one_wins(base: Path) -> None:
    for found in race(base, (ME, NOBODY), rounds=20):
        assert winners(found) == ["0\n"], found


@pytest.mark.slow
def test_waiting_picks_of_one_user_never_share_a_gpu(base: Path) -> None:
    """Four `pick --wait` of one user started half a second apart, for two FREE GPUs: two
    get one each; the other two wait (their user's own claims hold the GPUs: the first jobs
    may be about to start there) and give up, rather than hand out a GPU again."""
    (found,) = race(base, (ME,) * 4, "--wait", "2", gpus=2, stagger_s=0.5)
    assert winners(found) == ["0\n", "1\n"], found
    for _, code, _, err in found:
        assert code == 0 or err.startswith("gpumon pick: gave up after waiting"), err


@needs_root
@pytest.mark.slow
def test_waiting_picks_of_two_users_never_share_a_gpu(base: Path) -> None:
    """Two users, two `pick --wait` each, started in turn for two FREE GPUs: each GPU is
    printed once."""
    (found,) = race(base, (ME, NOBODY, ME, NOBODY), "--wait", "2", gpus=2, stagger_s=0.5)
    assert winners(found) == ["0\n", "1\n"], found


def hold_lock(claims_dir: Path) -> Callable[[], None]:
    """Another user holds flock on the claims directory until the returned stop is called."""
    locked_read, locked_write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            become(NOBODY)
            fcntl.flock(os.open(claims_dir, os.O_RDONLY), fcntl.LOCK_EX)
            os.write(locked_write, b"l")
            while True:
                time.sleep(60)
        finally:
            os._exit(0)
    os.close(locked_write)
    assert os.read(locked_read, 1) == b"l"
    os.close(locked_read)

    def stop() -> None:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)

    return stop


def fill_with_junk(claims_dir: Path) -> None:
    """Another user leaves 10,001 files there (they stay: the directory is sticky)."""

    def fill() -> None:
        become(NOBODY)
        for number in range(10_001):
            os.close(os.open(claims_dir / f"junk-{number}", os.O_CREAT | os.O_WRONLY, 0o644))

    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            fill()
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    assert len(os.listdir(claims_dir)) == 10_001


@needs_root
@pytest.mark.parametrize("wait", [(), ("--wait", "1")], ids=["once", "wait"])
@pytest.mark.slow
def test_another_users_lock_on_the_claims_directory_hands_nobody_a_taken_gpu(
    base: Path, wait: tuple[str, ...]
) -> None:
    """Four picks race for one GPU while another user holds flock on the directory for
    ever: exactly one gets the GPU, the others exit 1."""
    stops: list[Callable[[], None]] = []
    try:
        found = race(base, (ME,) * 4, *wait, rounds=2, prepare=lambda d: stops.append(hold_lock(d)))
    finally:
        for stop in stops:
            stop()
    for each in found:
        assert winners(each) == ["0\n"], each
        assert "lock" not in "".join(err for _, _, _, err in each)


@needs_root
def test_another_users_junk_in_the_claims_directory_switches_no_claim_off(base: Path) -> None:
    """Four picks, of two users, race for one GPU in a directory another user filled with
    10,001 files: exactly one gets the GPU, and nobody is told about the junk."""
    (found,) = race(base, (ME, ME, NOBODY, NOBODY), "--wait", "1", prepare=fill_with_junk)
    assert winners(found) == ["0\n"], found
    for _, code, _, err in found:
        assert err == "" if code == 0 else err.startswith("gpumon pick: gave up after waiting")
        assert err.count("\n") <= 1 and "junk" not in err, err
