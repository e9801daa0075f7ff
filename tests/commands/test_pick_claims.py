"""`gpumon pick` claims the GPUs it prints: another user's pick skips them and says who has
them, the claimer's own later pick may take it again (not under --wait), and a claim lasts
as long as the time written in it allows (races: tests/commands/test_pick_races.py)."""

from __future__ import annotations

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
    assert f"claimed by {user_name(OTHER_UID)} 4" in err and err.endswith(" s ago\n")


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
