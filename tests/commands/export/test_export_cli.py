"""`gpumon export` from the command line: --listen, start-up, no driver, signals, slow driver."""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.commands.export import listen
from tests.commands.export.test_export import FakeSource, fetch, no_driver_sample, scrape

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9402", ("127.0.0.1", 9402)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("[::1]:80", ("::1", 80)),
        ("[::]:9402", ("::", 9402)),
        ("[fe80::1%eth0]:9402", ("fe80::1%eth0", 9402)),
        ("host:0", ("host", 0)),
        ("gpu-node-1.example.com:9402", ("gpu-node-1.example.com", 9402)),
        ("a" * 63 + "." + "b" * 63 + ":1", ("a" * 63 + "." + "b" * 63, 1)),
        ("1.2.3.x:65535", ("1.2.3.x", 65535)),
    ],
)
def test_listen_address_parses(text: str, expected: tuple[str, int]) -> None:
    assert listen.listen_address(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "9402",
        ":9402",
        "host:",
        "host:port",
        "host:70000",
        "",
        # Hosts that cannot be encoded used to end in a UnicodeError
        # traceback, and Unicode digits were a port.
        "\u00fc\u00d770:0",  # u-umlaut, multiplication sign
        "x" * 300 + ":0",
        "\u202e127.0.0.1:0",
        "127.0.0.1:\u0663\u0663",  # Arabic-Indic 33: was port 33
        "127.0.0.1:\uff13\uff13",  # fullwidth 33
        "127.0.0.1:+80",
        "127.0.0.1: 80",
        "127.0.0.1:000080",
        "host\n:80",
        "a" * 64 + ".example.com:80",
        ".".join(["a" * 60] * 5) + ":80",  # 304 characters
        "a..b:80",
        "-a.b:80",
        "a-.b:80",
        "under_score:80",
        "::1:80",  # IPv6 without brackets
        "[::1:80",
        "[not-ipv6]:80",
        "[127.0.0.1]:80",
        "1.2.3.999:80",
        "127.1:80",  # inet_aton would take it as 127.0.0.1
        "2130706433:80",
    ],
)
def test_malformed_listen_is_one_line_and_exit_2(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        listen.listen_address(text)
    with pytest.raises(SystemExit) as exited:
        main(["export", "--demo", "--listen", text])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.isprintable() or err[:-1].isprintable()  # controls in the value are escaped
    assert len(err) < 300


def test_a_name_that_does_not_resolve_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Well-formed (so not exit 2), but resolving is the state of the name service, known only
    # when binding: exit 1 as for an address in use. No non-loopback warning first.
    assert main(["export", "--demo", "--listen", "nosuch.invalid:0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpumon export: error: cannot listen on nosuch.invalid:0: ")
    assert err.count("\n") == 1


def test_an_address_in_use_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["export", "--demo", "--listen", f"127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"gpumon export: error: cannot listen on 127.0.0.1:{port}: ")
    assert err.count("\n") == 1


def test_loopback_detection() -> None:
    assert listen.is_loopback("127.0.0.1") and listen.is_loopback("::1")
    assert listen.is_loopback("localhost")
    assert not listen.is_loopback("0.0.0.0")


def test_missing_prometheus_client_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    assert main(["export", "--demo", "--listen", "127.0.0.1:0"]) == 1
    assert "pip install 'gpumon-tui[export]'" in capsys.readouterr().err


def test_no_driver_exits_1_at_start_up_with_only_the_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = FakeSource(no_driver_sample())
    monkeypatch.setattr("gpumon.sources.base.source_for", lambda settings, **kwargs: source)
    started = time.monotonic()
    assert main(["export", "--listen", "127.0.0.1:0"]) == 1
    assert time.monotonic() - started < 2.0
    assert capsys.readouterr().err == (
        "gpumon: no NVIDIA GPU data: No NVIDIA driver. (NVML: not found)\ngpumon: hint: hint\n"
    )
    assert source.closed


def start_process(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpumon", "export", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ},
    )


def test_no_driver_on_this_machine_exits_1() -> None:
    from gpumon.sources.nvml.source import NvmlSource

    probe = NvmlSource()
    has_driver = probe.unavailable is None
    probe.close()
    if has_driver:
        pytest.skip("this machine has a working NVIDIA driver")
    result = subprocess.run(
        [sys.executable, "-m", "gpumon", "export", "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("gpumon: no NVIDIA GPU data: ")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_demo_exporter_process_serves_and_exits_0_on_signal(signum: int) -> None:
    process = start_process("--demo", "--demo-gpus", "2", "--listen", "127.0.0.1:0")
    try:
        assert process.stderr is not None
        banner = process.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics \(DEMO", banner)
        assert match, banner
        series = scrape(int(match.group(1)))
        assert series["gpumon_simulated"] == {(): 1.0}
        assert len(series["gpumon_gpu_up"]) == 2
        process.send_signal(signum)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_non_loopback_listen_warns() -> None:
    process = start_process("--demo", "--listen", "0.0.0.0:0")
    try:
        assert process.stderr is not None
        warning = process.stderr.readline()
        assert "warning: listening on 0.0.0.0, not loopback" in warning
        assert "serving" in process.stderr.readline()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


_STUCK_DRIVER = textwrap.dedent(
    """
    import sys, threading
    import gpumon.sources.base

    class StuckDriver:  # the first NVML call never returns
        simulated = False
        def sample(self):
            threading.Event().wait()
        def close(self):
            print("closed under a running call", file=sys.stderr)

    gpumon.sources.base.source_for = lambda settings, **kwargs: StuckDriver()
    from gpumon.cli import main
    sys.exit(main(["export", "--listen", "127.0.0.1:0"]))
    """
)


@pytest.mark.slow
def test_a_stuck_driver_listens_at_once_answers_503_and_stops_within_a_second() -> None:
    """It listened only after the first sample (21 s with a slow driver)
    and took 6-7 s to stop while a sample was stuck."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-c", _STUCK_DRIVER], stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert process.stderr is not None
        banner = process.stderr.readline()  # after a second without a sample
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", banner)
        assert match, banner
        assert time.monotonic() - started < 5.0
        status, _, body = fetch(int(match.group(1)))
        assert (status, body) == (503, b"waiting for the first sample\n")
        stopping = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert time.monotonic() - stopping < 1.5
        rest = process.stderr.read()
        assert "closed" not in rest and "Traceback" not in rest, rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
