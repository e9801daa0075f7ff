"""`gpumon pick` claims the GPUs it prints: another user's pick skips them and says who has
them, the claimer's own later pick may take it again (not under --wait), and a claim lasts
as long as the time written in it allows (races: tests/commands/test_pick_races.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.commands.pick_claims import PickClaims
from gpumon.data import claims as rules
from gpumon.data.ranking import qualify
from gpumon.sources.host.claims import ClaimsDir, user_name
from tests.support.pick_helpers import gpu, job, sample, serve

ROOT = Path(__file__).resolve().parents[2]
OTHER_UID = 65534  # nobody
UUID0 = gpu(0).uuid
KEY0 = rules.claim_key(UUID0)
assert KEY0 is not None
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="a claim of another user needs a second uid: run as root"
)


def pick(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    claims_dir: Path,
    *argv: str,
    samples: tuple[object, ...] | None = None,
) -> tuple[int, str, str]:
    """``gpumon pick ARGV --claims-dir DIR`` over two FREE GPUs (or ``samples``)."""
    serve(monkeypatch, *(samples or (sample((gpu(0), gpu(1))),)))  # type: ignore[arg-type]
    code = main(["pick", *argv, "--claims-dir", str(claims_dir)])
    out, err = capsys.readouterr()
    return code, out, err


def claims_in(claims_dir: Path) -> list[rules.Claim]:
    with ClaimsDir.open(str(claims_dir), create=False) as directory:
        return list(directory.scan().claims)


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """A place another uid can reach (the test's tmp_path is root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="gpumon-claims-test-", dir="/tmp"))
    base.chmod(0o755)
    yield base / "claims"
    shutil.rmtree(base, ignore_errors=True)


def as_user(uid: int, work: Callable[[], object]) -> int:
    """Run ``work`` in a forked child that became ``uid``; its exit status."""
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            os.setgid(uid)
            os.setuid(uid)
            work()
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


def claim_as(uid: int, claims_dir: Path, key: str, *, age_s: float = 0, ttl_s: float = 120) -> None:
    def write() -> None:
        now = time.time() - age_s
        with ClaimsDir.open(str(claims_dir), create=True) as directory:
            name = directory.write(key, now, now + ttl_s)
            os.utime(name, (now, now), dir_fd=directory.fd)

    ClaimsDir.open(str(claims_dir), create=True).close()  # root's, mode 1777, as /tmp
    assert as_user(uid, write) == 0


# --- what a user sees ---------------------------------------------------------------------


def test_a_pick_claims_what_it_prints_for_claim_seconds(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    claims_dir = tmp_path / "claims"
    before = time.time()
    assert pick(monkeypatch, capsys, claims_dir, "--claim-seconds", "30") == (0, "0\n", "")
    (claim,) = claims_in(claims_dir)
    assert (claim.key, claim.uid, claim.owner) == (KEY0, os.geteuid(), user_name(os.geteuid()))
    assert before + 30 <= claim.expires_s <= time.time() + 30
    assert os.stat(claims_dir).st_mode & 0o7777 == 0o1777  # made as /tmp is


@needs_root
def test_another_users_claim_is_skipped_and_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], shared: Path
) -> None:
    claim_as(OTHER_UID, shared, KEY0, age_s=40)
    code, out, err = pick(monkeypatch, capsys, shared)
    assert (code, out, err) == (0, "1\n", "")  # GPU 0 is the freer, but nobody's claim is on it
    code, out, err = pick(monkeypatch, capsys, shared, "-n", "2")
    assert (code, out) == (1, "")
    assert err.startswith("gpumon pick: only 1 of 2 GPUs qualifies (need 2): GPU 0: claimed by ")
    failure, helps = err.splitlines()
    assert f"claimed by {user_name(OTHER_UID)} 4" in failure and failure.endswith(" s ago")
    # The claimed GPU is not offered: --busy-ok or --min-free-memory would not get it either.
    assert helps == "gpumon pick: would help: --wait (until 2 are free)"


def test_the_claimers_own_later_pick_takes_its_gpu_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A second job gets another GPU while there is one; then the user's own claims do not
    keep the user out: taken again, and claimed anew."""
    claims_dir = tmp_path / "claims"
    assert pick(monkeypatch, capsys, claims_dir) == (0, "0\n", "")
    assert pick(monkeypatch, capsys, claims_dir) == (0, "1\n", "")
    before = {claim.file_name for claim in claims_in(claims_dir)}
    code, out, err = pick(monkeypatch, capsys, claims_dir, "-n", "2")
    assert (code, out) == (0, "0,1\n")
    # Taken again, but said: the first two jobs may not have started yet.
    assert err.count("your own earlier pick claimed it") == 2
    renewed = claims_in(claims_dir)
    assert sorted(claim.key for claim in renewed) == sorted([KEY0, rules.claim_key(gpu(1).uuid)])
    assert not before & {claim.file_name for claim in renewed}  # the earlier claims are gone


def test_a_claim_made_while_a_pick_runs_blocks_it_even_if_it_is_the_same_users(
    tmp_path: Path,
) -> None:
    """Two jobs of one user started at once must not share a GPU either."""
    started = time.time()
    with ClaimsDir.open(str(tmp_path / "claims"), create=True) as directory:
        directory.write(KEY0, started + 0.5, started + 120)  # the other pick, beside this one
    one_gpu = sample((gpu(0),))
    qualifying, _ = qualify(one_gpu, free_below_bytes=1024**3)
    claims = PickClaims(str(tmp_path / "claims"), claim_seconds=120, started_s=started,
                        stderr=sys.stderr)  # fmt: skip
    picked, reasons, holders = claims.take(qualifying, 1, one_gpu)
    claims.close()
    assert picked == [] and holders == {0: user_name(os.geteuid())}
    assert reasons[0].endswith("s ago (by another pick of yours)")


def test_an_expired_claim_does_not_block(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    claims_dir = tmp_path / "claims"
    with ClaimsDir.open(str(claims_dir), create=True) as directory:
        now = time.time()
        stale = directory.write(KEY0, now - 300, now - 180)  # expired three minutes ago
    assert pick(monkeypatch, capsys, claims_dir, "--no-claim", "-n", "2")[:2] == (0, "0,1\n")
    assert [claim.file_name for claim in claims_in(claims_dir)] == [stale]  # --no-claim: none
    assert pick(monkeypatch, capsys, claims_dir)[:2] == (0, "0\n")
    assert stale not in [claim.file_name for claim in claims_in(claims_dir)]  # mine: tidied


def test_no_claim_outlives_the_time_written_in_it_by_ten_minutes_whatever_it_says() -> None:
    text = rules.claim_text(KEY0, 1000.0, 9e11, 1)
    claimed, stated = rules.parse_claim_text(text, KEY0)
    assert (claimed, stated) == (1000.0, 9e11)
    assert rules.expiry(stated, claimed_s=claimed) == 1600.0


@needs_root
def test_a_claim_kept_fresh_with_touch_ends_all_the_same(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], shared: Path
) -> None:
    """Another user's claim file, touched every few minutes, is as old as the time written
    in it: one written 20 minutes ago holds no GPU, --busy-ok or not; one written 40 s ago
    is named as 40 s old, not as new as its mtime."""
    claim_as(OTHER_UID, shared, KEY0, age_s=1200, ttl_s=86400)  # written by hand
    claim_as(OTHER_UID, shared, rules.claim_key(gpu(1).uuid), age_s=40)

    def touch() -> None:
        for name in os.listdir(shared):
            os.utime(shared / name)

    assert as_user(OTHER_UID, touch) == 0
    for argv in ((), ("--busy-ok",)):
        code, out, err = pick(monkeypatch, capsys, shared, "-n", "2", "--no-claim", *argv)
        assert (code, out) == (1, ""), err
        assert f"GPU 1: claimed by {user_name(OTHER_UID)} 4" in err and "GPU 0" not in err


@needs_root
def test_a_claim_ends_once_its_gpu_runs_the_claimers_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], shared: Path
) -> None:
    claim_as(OTHER_UID, shared, KEY0)
    owner = user_name(OTHER_UID)
    gpus = (gpu(0), gpu(1))
    # A process the claimer already ran there (a notebook) does not end the claim: with
    # --busy-ok, another user's pick would take the GPU the claimer's job is about to get.
    notebook = sample(gpus, (job(gpus[0], 41, user=owner),))  # an hour old
    code, out, _ = pick(monkeypatch, capsys, shared, "--busy-ok", "-n", "2", samples=(notebook,))
    assert (code, out) == (1, "")
    running = sample(gpus, (job(gpus[0], 42, user=owner, elapsed_s=1.0),))
    # GPU 0 now runs the claimer's new job: not FREE, and not claimed any more either.
    code, out, _ = pick(monkeypatch, capsys, shared, "--busy-ok", "-n", "2", samples=(running,))
    assert (code, out) == (0, "1,0\n")


@needs_root
def test_no_claim_leaves_none_and_still_skips_what_others_hold(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], shared: Path
) -> None:
    claim_as(OTHER_UID, shared, KEY0)
    code, out, err = pick(monkeypatch, capsys, shared, "--no-claim")
    assert (code, out) == (0, "1\n")
    assert err == "gpumon pick: note: not claimed (--no-claim): another pick may get them too\n"
    assert [claim.uid for claim in claims_in(shared)] == [OTHER_UID]


def test_the_claims_dir_setting_is_where_pick_claims(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("GPUMON_CLAIMS_DIR", str(tmp_path / "from-env"))
    serve(monkeypatch, sample((gpu(0),)))
    assert main(["pick"]) == 0
    assert [claim.key for claim in claims_in(tmp_path / "from-env")] == [KEY0]


def test_a_mig_instance_is_claimed_by_its_own_uuid(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from gpumon.data.model import MigInstance

    instance = MigInstance(0, 0, 1, 0, "3g.40gb", "MIG-0000aaaa-1111-2222-3333-444444444444",
                           0, 40 * 1024**3)  # fmt: skip
    mig = gpu(0, mig_mode=True, mig_instances=(instance,), utilization_gpu_pct=None)
    code, out, _ = pick(monkeypatch, capsys, tmp_path / "c", "--format", "uuid",
                        samples=(sample((mig,)),))  # fmt: skip
    assert (code, out) == (0, f"{instance.uuid}\n")
    assert [claim.key for claim in claims_in(tmp_path / "c")] == [instance.uuid]


def test_gpus_that_never_reach_the_user_are_not_left_claimed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`gpumon pick | true`: stdout is gone before the value is written."""

    class Gone:
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    serve(monkeypatch, sample((gpu(0),)))
    monkeypatch.setattr(sys, "stdout", Gone())
    monkeypatch.setattr("gpumon.cli._silence_stdout", lambda: None)
    assert main(["pick", "--claims-dir", str(tmp_path / "claims")]) == 141
    assert claims_in(tmp_path / "claims") == []


@pytest.mark.parametrize("rival_after_s", [-0.001, 0.001], ids=["earlier", "later"])
def test_a_claim_that_lands_beside_this_picks_own_is_never_shared(
    rival_after_s: float,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """Another pick's claim on the GPU lands just as this pick writes its own: one claimed
    earlier wins at once, and one claimed later that stays (its pick did not see this one)
    is kept to after SETTLE_S; either way this pick withdraws and prints nothing."""
    claims_dir = tmp_path / "claims"
    write = ClaimsDir.write
    rival = "f" * 16

    def write_beside_a_rival(
        self: ClaimsDir, key: str, claimed_s: float, expires_s: float, token: str | None = None
    ) -> str:
        name = write(self, key, claimed_s, expires_s, token)
        write(self, key, claimed_s + rival_after_s, expires_s, rival)
        return name

    monkeypatch.setattr(ClaimsDir, "write", write_beside_a_rival)
    # --wait: the rival blocks however soon after this pick began it was claimed.
    code, out, err = pick(monkeypatch, capsys, claims_dir, "--wait", "1",
                          samples=(sample((gpu(0),)),))  # fmt: skip
    assert (code, out) == (1, "")
    assert err.startswith("gpumon pick: gave up after waiting ")
    assert err.endswith("s ago (by another pick of yours)\n")
    assert [claim.file_name.endswith(rival) for claim in claims_in(claims_dir)] == [True]


# --- what another user can do to a pick ----------------------------------------------------


@needs_root
def test_another_user_who_reads_one_claims_name_cannot_make_the_picks_others_fail(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], shared: Path
) -> None:
    """Once a pick's first claim is in place, another user reads its name and takes, for
    every GPU, the name (and the temporary name) a claim with the same token would have:
    the pick's other claims are named otherwise, so it still claims both GPUs."""
    write = ClaimsDir.write
    me = os.geteuid()
    keys = [rules.claim_key(gpu(index).uuid) for index in (0, 1)]

    def squat() -> None:
        for name in os.listdir(shared):
            parsed = rules.parse_file_name(name)
            if parsed is None or parsed[1] != me:
                continue
            for key in keys:
                assert key is not None
                taken = rules.file_name(key, me, parsed[2])
                for squatted in (taken, f".{taken}.tmp"):
                    with contextlib.suppress(FileExistsError):
                        os.close(os.open(shared / squatted, os.O_CREAT | os.O_EXCL, 0o644))

    def write_then_squat(
        self: ClaimsDir, key: str, claimed_s: float, expires_s: float, token: str | None = None
    ) -> str:
        name = write(self, key, claimed_s, expires_s, token)
        assert as_user(OTHER_UID, squat) == 0
        return name

    monkeypatch.setattr(ClaimsDir, "write", write_then_squat)
    code, out, err = pick(monkeypatch, capsys, shared, "-n", "2")
    assert (code, out) == (0, "0,1\n"), err
    assert sorted(claim.key for claim in claims_in(shared)) == sorted(keys)  # type: ignore[type-var]


@needs_root
def test_a_user_whose_claims_make_every_pick_withdraw_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], shared: Path
) -> None:
    """Another user answers each of the pick's claims with one dated just before it, and
    removes it once the pick withdrew (or lets it expire at once): that user is never seen
    holding the GPU when the pick chooses, yet the pick gives up, and says who blocked it."""
    write, remove = ClaimsDir.write, ClaimsDir.remove

    def answer(
        self: ClaimsDir, key: str, claimed_s: float, expires_s: float, token: str | None = None
    ) -> str:
        name = write(self, key, claimed_s, expires_s, token)

        def rival() -> None:
            with ClaimsDir.open(str(shared), create=False) as directory:
                write(directory, key, claimed_s - 1, claimed_s + 599)  # not answer()

        assert as_user(OTHER_UID, rival) == 0
        return name

    def withdraw(self: ClaimsDir, name: str) -> None:
        remove(self, name)

        def gone() -> None:
            for entry in os.listdir(shared):
                parsed = rules.parse_file_name(entry)
                if parsed is not None and parsed[1] == OTHER_UID:
                    os.unlink(shared / entry)

        assert as_user(OTHER_UID, gone) == 0

    monkeypatch.setattr(ClaimsDir, "write", answer)
    monkeypatch.setattr(ClaimsDir, "remove", withdraw)
    code, out, err = pick(monkeypatch, capsys, shared, samples=(sample((gpu(0),)),))
    assert (code, out) == (1, "")
    assert err.startswith("gpumon pick: the only GPU does not qualify (need 1): GPU 0: "), err
    assert f"GPU 0: claimed by {user_name(OTHER_UID)} " in err
    assert [claim.uid for claim in claims_in(shared)] == []


@needs_root
def test_a_hard_link_to_a_live_claim_does_not_hide_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], shared: Path
) -> None:
    """A hard link to another user's claim under a second name (root makes it here, as any
    user may where fs.protected_hardlinks is 0): both names are that user's claim, and the
    GPU stays claimed."""
    claim_as(OTHER_UID, shared, KEY0, age_s=40)
    (original,) = shared.iterdir()
    os.link(original, shared / rules.file_name(KEY0, OTHER_UID, "0123456789abcdef"))
    code, out, err = pick(monkeypatch, capsys, shared, samples=(sample((gpu(0),)),))
    assert (code, out) == (1, "")
    assert err.startswith("gpumon pick: the only GPU does not qualify (need 1): GPU 0: "), err
    assert f"claimed by {user_name(OTHER_UID)} 4" in err
    assert "ignored" not in err


def test_picks_claiming_at_the_same_moment_are_ordered_alike_on_every_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each claim has its own token, yet of two picks whose claims bear the same time, the
    same one comes first on each of their GPUs (ties are settled by the file name)."""
    two = sample((gpu(0), gpu(1)))
    qualifying, _ = qualify(two, n=2)
    keys = [rules.claim_key(candidate.uuid) for candidate in qualifying]
    monkeypatch.setattr(PickClaims, "_settle", lambda self, mine, running: None)
    for attempt in range(20):
        claims_dir = tmp_path / f"claims-{attempt}"
        for _ in range(2):
            claims = PickClaims(str(claims_dir), claim_seconds=120, started_s=0.0,
                                stderr=sys.stderr)  # fmt: skip
            claims.dir = ClaimsDir.open(str(claims_dir), create=True)
            with monkeypatch.context() as frozen:
                frozen.setattr(time, "time", lambda: 1_700_000_000.0)
                assert claims._claim(qualifying, {}, {}) is None
            claims.close()
        found = claims_in(claims_dir)
        firsts = []
        for key in keys:
            first, second = sorted((c for c in found if c.key == key), key=lambda c: c.file_name)
            assert first.claimed_s == second.claimed_s and rules.precedes(first, second)
            firsts.append(first.file_name.rsplit(".", 1)[1][:8])  # the pick's prefix
        assert firsts[0] == firsts[1]
