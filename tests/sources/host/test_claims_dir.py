"""The claims directory is other users' input: hostile claim files are ignored (said once,
never followed, never read whole), other users' junk and locks change nothing, and a
directory pick cannot use fails closed: one line, nothing printed, exit 1 (--wait: it
waits; --no-claim: it picks unclaimed)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.data import claims as rules
from gpumon.sources.host.claims import ClaimsDir
from tests.commands.test_pick_claims import as_user
from tests.support.pick_helpers import gpu, job, sample, serve

KEY0 = rules.claim_key(gpu(0).uuid)
assert KEY0 is not None
TOKEN = "0123456789abcdef"


def pick(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    claims_dir: Path,
    *argv: str,
    busy_first: bool = False,
) -> tuple[int, str, str]:
    """``gpumon pick`` over one FREE GPU (``busy_first``: busy on the first look)."""
    busy = gpu(0)
    samples = [sample((busy,), (job(busy, 7),))] if busy_first else []
    serve(monkeypatch, *samples, sample((gpu(0),)))
    code = main(["pick", "--claims-dir", str(claims_dir), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def own_claim(directory: Path, key: str = KEY0, *, uid: int | None = None) -> Path:
    """A well-formed live claim file's path (of ``uid``'s name, owned by whoever writes it)."""
    now = time.time()
    path = directory / rules.file_name(key, os.geteuid() if uid is None else uid, TOKEN)
    path.write_bytes(rules.claim_text(key, now, now + 120, 1))
    return path


def symlink(directory: Path, elsewhere: Path) -> str:
    target = own_claim(elsewhere)
    name = rules.file_name(KEY0, os.geteuid(), TOKEN)
    (directory / name).symlink_to(target)
    return "a symbolic link"


def subdirectory(directory: Path, elsewhere: Path) -> str:
    (directory / rules.file_name(KEY0, os.geteuid(), TOKEN)).mkdir()
    return "a directory"


def huge(directory: Path, elsewhere: Path) -> str:
    path = own_claim(directory)
    with path.open("ab") as grown:
        grown.truncate(64 * 1024 * 1024)  # sparse: 64 MiB that are never read
    return "too large (67108864 bytes)"


def garbage(directory: Path, elsewhere: Path) -> str:
    (directory / rules.file_name(KEY0, os.geteuid(), TOKEN)).write_bytes(os.urandom(200))
    return "not "  # not text, or not a gpumon claim


def wrong_owner(directory: Path, elsewhere: Path) -> str:
    own_claim(directory, uid=os.geteuid() + 4242)
    return f"not the uid {os.geteuid() + 4242} its name says"


def fifo(directory: Path, elsewhere: Path) -> str:
    os.mkfifo(directory / rules.file_name(KEY0, os.geteuid(), TOKEN))
    return "not a regular file"  # and never opened: that would block


def future(directory: Path, elsewhere: Path) -> str:
    later = time.time() + 3600
    name = rules.file_name(KEY0, os.geteuid(), TOKEN)
    (directory / name).write_bytes(rules.claim_text(KEY0, later, later + 120, 1))
    return "dated in the future"


def another_gpu(directory: Path, elsewhere: Path) -> str:
    now = time.time()
    name = rules.file_name(KEY0, os.geteuid(), TOKEN)
    (directory / name).write_bytes(rules.claim_text("GPU-elsewhere", now, now + 120, 1))
    return "its text names another GPU"


def escapes(directory: Path, elsewhere: Path) -> str:
    """A field named with escape sequences for whoever is told why the file is ignored."""
    path = own_claim(directory)
    field = b"\x1b]0;title\x07\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J"
    path.write_bytes(path.read_bytes() + field + b" 1\n" + field + b" 2\n")
    return "a field is given twice"


HOSTILE = [
    *(symlink, subdirectory, huge, garbage, wrong_owner, fifo, future, another_gpu),
    escapes,
]


@pytest.mark.parametrize("plant", HOSTILE, ids=[plant.__name__ for plant in HOSTILE])
def test_a_hostile_claim_file_is_ignored_and_said_once(
    plant: Callable[[Path, Path], str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    claims_dir, elsewhere = tmp_path / "claims", tmp_path / "elsewhere"
    ClaimsDir.open(str(claims_dir), create=True).close()
    elsewhere.mkdir()
    why = plant(claims_dir, elsewhere)
    # Two looks (the GPU is busy on the first): the file is read twice, said once.
    code, out, err = pick(
        monkeypatch, capsys, claims_dir, "--wait", "--interval", "0.25", busy_first=True
    )
    assert (code, out) == (0, "0\n")  # the GPU is not claimed by it
    lines = err.splitlines()
    assert len(lines) == 2 and lines[1].startswith("gpumon pick: waited "), err
    name = rules.file_name(KEY0, os.geteuid() + (4242 if plant is wrong_owner else 0), TOKEN)
    assert lines[0].startswith(f"gpumon pick: ignored claim file {name} in {claims_dir}: ")
    assert why in lines[0]
    assert "\x1b" not in err and "\x07" not in err
    if plant is symlink:  # not followed: its target, a claim, was not tidied away either
        assert len(list(elsewhere.iterdir())) == 1


def unclaimed(err: str) -> bool:
    return err.endswith(
        "gpumon pick: note: not claimed (--no-claim): another pick may get them too\n"
    )


def test_a_claims_dir_that_cannot_be_made_fails_closed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("")
    code, out, err = pick(monkeypatch, capsys, tmp_path / "file" / "claims")
    assert (code, out) == (1, "")
    assert err == (
        f"gpumon pick: cannot claim: cannot create {tmp_path}/file/claims: Not a directory; "
        "nothing picked (--no-claim: pick unclaimed)\n"
    )
    code, out, err = pick(monkeypatch, capsys, tmp_path / "file" / "claims", "--no-claim")
    assert (code, out) == (0, "0\n") and unclaimed(err)
    assert err.startswith("gpumon pick: other picks' claims cannot be read: cannot create ")


def not_sticky(path: Path) -> str:
    path.mkdir()
    path.chmod(0o777)
    return "is not sticky and world-writable (mode 777; chmod 1777 "


def a_symlink(path: Path) -> str:
    real = path.with_name("real")
    real.mkdir()
    real.chmod(0o1777)
    path.symlink_to(real)
    return "is a symbolic link"


def a_file(path: Path) -> str:
    path.write_text("")
    return "is not a directory"


UNTRUSTED = [not_sticky, a_symlink, a_file]


@pytest.mark.parametrize("make", UNTRUSTED, ids=[make.__name__ for make in UNTRUSTED])
def test_a_claims_dir_pick_cannot_trust_fails_closed_in_one_line(
    make: Callable[[Path], str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    path = tmp_path / "claims"
    why = make(path)
    code, out, err = pick(monkeypatch, capsys, path)
    assert (code, out) == (1, "")
    assert err.startswith(f"gpumon pick: cannot claim: {path} {why}") and err.count("\n") == 1
    assert err.endswith("; nothing picked (--no-claim: pick unclaimed)\n")
    assert not list(Path(os.path.realpath(path)).glob("GPU-*")) if path.is_dir() else True


def test_waiting_for_a_claims_dir_that_cannot_be_used_says_why_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--wait waits until claims can be made (here: the file in the way is removed after a
    few looks), saying why once; it never prints an unclaimed GPU meanwhile."""
    from tests.support.pick_helpers import SampleSource

    path = tmp_path / "claims"
    path.write_text("")
    reads = SampleSource.sample

    def sample_and_clear_the_way(self: SampleSource) -> object:
        if self.reads == 3 and path.is_file():
            path.unlink()
        return reads(self)

    monkeypatch.setattr(SampleSource, "sample", sample_and_clear_the_way)
    code, out, err = pick(monkeypatch, capsys, path, "--wait", "--interval", "0.25")
    assert (code, out) == (0, "0\n")
    lines = err.splitlines()
    assert lines[0] == (
        f"gpumon pick: cannot claim: {path} is not a directory; waiting until it can "
        "(--no-claim: pick unclaimed)"
    )
    assert len(lines) == 2 and lines[1].startswith("gpumon pick: waited "), err
    assert len(list(path.glob("GPU-*"))) == 1
    path.chmod(0o1755)  # claims cannot be made again: the wait runs out
    code, out, err = pick(monkeypatch, capsys, path, "--wait", "0.6", "--interval", "0.25")
    assert (code, out) == (1, "") and err.count("\n") == 2
    assert err.splitlines()[1].startswith("gpumon pick: gave up after waiting ")


def test_a_shared_directory_another_user_made_first_still_holds_claims(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Nobody set the directory up, so the first user to pick made it: everyone else's picks
    must still claim there (its owner could only take claims back to none)."""
    if os.geteuid() != 0:
        pytest.skip("a directory of another user needs a second uid: run as root")
    path = tmp_path / "claims"
    path.mkdir()
    path.chmod(0o1777)
    os.chown(path, 65534, 65534)
    code, out, err = pick(monkeypatch, capsys, path)
    assert (code, out, err) == (0, "0\n", "")
    assert len(list(path.glob("GPU-*"))) == 1


def test_the_directory_is_made_mode_1777_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o077)
    try:
        ClaimsDir.open(str(tmp_path / "claims"), create=True).close()
    finally:
        os.umask(previous)
    assert (tmp_path / "claims").stat().st_mode & 0o7777 == 0o1777


def test_claim_files_are_readable_by_everyone_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o077)
    try:
        with ClaimsDir.open(str(tmp_path / "claims"), create=True) as directory:
            name = directory.write(KEY0, time.time(), time.time() + 60)
    finally:
        os.umask(previous)
    assert (tmp_path / "claims" / name).stat().st_mode & 0o777 == 0o644


def test_a_claims_dir_that_cannot_be_written_fails_closed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A full /dev/shm: no claim can be written, so no GPU is printed (it would be printed
    to every racing pick alike)."""
    import errno

    def full(self: ClaimsDir, *args: object) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ClaimsDir, "write", full)
    code, out, err = pick(monkeypatch, capsys, tmp_path / "claims")
    assert (code, out) == (1, "")
    assert err == (
        f"gpumon pick: cannot claim: cannot write in {tmp_path}/claims: No space left on "
        "device; nothing picked (--no-claim: pick unclaimed)\n"
    )
    code, out, err = pick(monkeypatch, capsys, tmp_path / "claims", "--no-claim")
    assert (code, out) == (0, "0\n") and unclaimed(err) and err.count("\n") == 1


def test_many_entries_of_one_user_that_are_not_claims_are_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """5,000 claim-like symlinks of another user: one line that counts them and names the
    user, not 5,000 lines; the pick claims all the same."""
    if os.geteuid() != 0:
        pytest.skip("entries of another user need a second uid: run as root")
    reachable = Path(tempfile.mkdtemp(prefix="gpumon-claims-test-", dir="/tmp"))
    reachable.chmod(0o755)  # the test's tmp_path is root's alone
    claims_dir = reachable / "claims"
    ClaimsDir.open(str(claims_dir), create=True).close()

    def plant() -> None:
        for number in range(5000):
            name = rules.file_name(KEY0, 65534, f"{number:08x}")
            os.symlink("/etc/passwd", claims_dir / name)

    try:
        assert as_user(65534, plant) == 0
        code, out, err = pick(monkeypatch, capsys, claims_dir)
    finally:
        shutil.rmtree(reachable)
    assert (code, out) == (0, "0\n")
    assert err == (
        f"gpumon pick: ignored 5000 entries of nobody (uid 65534) in {claims_dir} that are "
        "not claims\n"
    )


@pytest.mark.parametrize("given_by", ["flag", "config", "environment"])
def test_a_relative_claims_dir_is_refused_in_one_line(
    given_by: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """A relative claims_dir would make a world-writable directory wherever pick starts."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPUMON_CLAIMS_DIR")
    argv = ["--claims-dir", "claims"] if given_by == "flag" else []
    if given_by == "config":
        (tmp_path / "config" / "gpumon").mkdir(parents=True)
        (tmp_path / "config" / "gpumon" / "config.toml").write_text('claims_dir = "claims"\n')
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    if given_by == "environment":
        monkeypatch.setenv("GPUMON_CLAIMS_DIR", "claims")
    serve(monkeypatch, sample((gpu(0),)))
    try:
        code = main(["pick", *argv])
    except SystemExit as exit_:
        code = exit_.code  # type: ignore[assignment]
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "expected an absolute path, got 'claims'" in err, err
    assert not (tmp_path / "claims").exists()
