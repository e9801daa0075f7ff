"""The config files' paths as another local user can bend them: a HOME kept from another
user (``su`` without ``-``, ``sudo -E``) is no file rather than an error, and a symbolic
link another user owns on the way to a config file (or a directory of theirs behind a link)
is refused, in one line naming them."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.config import SettingsError, load_settings
from tests.commands.test_pick_claims import as_user
from tests.config.test_system_config import write_config

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")


@pytest.fixture
def root_home(tmp_path: Path) -> Iterator[Path]:
    """A home of root's, 0700, holding no config: nobody cannot search it. Its parents are
    opened to nobody (pytest's are 0700), and closed again after."""
    home = tmp_path / "root-home"
    home.mkdir(mode=0o700)
    opened = [path for path in (tmp_path, *tmp_path.parents) if path != Path("/")]
    modes = {path: path.stat().st_mode & 0o7777 for path in opened}
    for path in opened:
        path.chmod(modes[path] | 0o011)
    yield home
    for path, mode in modes.items():
        path.chmod(mode)


@needs_root
def test_a_home_kept_from_another_user_reads_as_no_config_file(root_home: Path) -> None:
    """``su nobody`` without ``-``: HOME stays root's. The default file cannot be looked at
    there, which is no file, not "Permission denied" and exit 2; ``status`` prints its line."""
    empty = root_home.parent / "no-system-config"
    empty.mkdir(exist_ok=True)

    def as_nobody() -> None:
        os.environ["HOME"] = str(root_home)
        environ = {"HOME": str(root_home), "XDG_CONFIG_DIRS": str(empty)}
        settings = load_settings({}, environ=environ)
        assert settings.config_path is None
        os.environ["XDG_CONFIG_DIRS"] = str(empty)
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            status = main(["--demo", "status"])
        assert (status, err.getvalue()) == (0, ""), err.getvalue()
        assert out.getvalue().startswith("DEMO GPU 0:")
        # Named with --config, the same path is an error: the user asked for that file.
        named = str(root_home / ".config" / "gpumon" / "config.toml")
        with pytest.raises(SettingsError, match="cannot read it: Permission denied"):
            load_settings({}, environ=environ, config=named)

    assert as_user(NOBODY, as_nobody) == 0


@needs_root
@pytest.mark.parametrize("linked", ["directory", "file"])
def test_a_symbolic_link_another_user_owns_on_the_way_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    linked: str,
) -> None:
    """$XDG_CONFIG_DIRS through a link nobody owns: they could point it at another file
    whenever they like. Root's own link to the same place is followed."""
    site = tmp_path / "site"
    real = write_config(site, 'probe_python = "/tmp/evil"\n')
    if linked == "directory":
        link, config_dirs = tmp_path / "xdg", tmp_path / "xdg"
        link.symlink_to(site)
    else:
        config_dirs = tmp_path / "dirs"
        (config_dirs / "gpumon").mkdir(parents=True)
        link = config_dirs / "gpumon" / "config.toml"
        link.symlink_to(real)
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(config_dirs))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home"))
    assert main(["--print-config"]) == 0  # root's link: read
    assert "/tmp/evil" in capsys.readouterr().out
    os.lchown(link, NOBODY, NOBODY)
    assert main(["--print-config"]) == 2
    captured = capsys.readouterr()
    assert "/tmp/evil" not in captured.out
    assert captured.err.count("\n") == 1
    assert f"{link} is a symbolic link that nobody (uid {NOBODY}) owns" in captured.err


@needs_root
def test_a_directory_another_user_owns_behind_a_link_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Root's link to root's directory, inside a directory of nobody's: nobody can swap the
    directory the link leads to."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    write_config(theirs / "site", 'probe_python = "/tmp/evil"\n')
    os.chown(theirs, NOBODY, NOBODY)
    (tmp_path / "xdg").symlink_to(theirs / "site")
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home"))
    assert main(["--print-config"]) == 2
    err = capsys.readouterr().err
    assert f"its directory {theirs} belongs to another user, nobody (uid {NOBODY})" in err


def test_a_link_of_my_own_still_reads(tmp_path: Path) -> None:
    real = write_config(tmp_path / "site", "interval = 3\n")
    (tmp_path / "mine.toml").symlink_to(real)
    assert load_settings({}, environ={}, config=str(tmp_path / "mine.toml")).interval_s == 3
