"""`gpumon export --web-config-file`: the exporter-toolkit's format read strictly. A file that
cannot be used is one line naming the key and exit code 2, before anything listens, and
never shows a secret (a hash, a key, the text around a YAML error)."""

from __future__ import annotations

import datetime
import os
import ssl
import sys
from pathlib import Path

import bcrypt
import pytest
from cryptography import x509

from gpumon.cli import main
from gpumon.commands.export.web_config import WebConfigError, load_web_config
from tests.commands.export.test_export_cli import start_process
from tests.support.tls_certs import TEST_COST, Authority, write_config

#: A hash that must never be printed (its salt and digest are the secret part).
HASH = bcrypt.hashpw(b"hunter2", bcrypt.gensalt(TEST_COST)).decode()
SECRET = HASH[7:]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("web")
    ca = Authority(directory)
    server = ca.issue("server", server=True)
    other = ca.issue("other", server=True)
    locked = ca.issue("locked", server=True, password=b"passphrase")
    expired = ca.issue("expired", server=True, valid_from=datetime.timedelta(days=-10))
    future = ca.issue("future", server=True, valid_from=datetime.timedelta(days=2))
    return {
        "dir": directory,
        "ca": ca.cert,
        "cert": server.cert,
        "key": server.key,
        "other_key": other.key,
        "locked_cert": locked.cert,
        "locked_key": locked.key,
        "expired_cert": expired.cert,
        "expired_key": expired.key,
        "future_cert": future.cert,
        "future_key": future.key,
    }


def tls(files: dict[str, Path], extra: str = "", cert: str = "cert", key: str = "key") -> str:
    return f"tls_server_config:\n  cert_file: {files[cert]}\n  key_file: {files[key]}\n{extra}"


def export(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["export", "--demo", "--listen", "127.0.0.1:0", "--web-config-file", str(path)])
    return code, capsys.readouterr().err


BAD = {
    "unknown key": ("tls_server_confg: null\n", "tls_server_confg: unknown key"),
    "not a mapping": ("- a\n- b\n", "expected a mapping"),
    "not YAML": (f"basic_auth_users:\n  alice: {HASH}\n   bob: [\n", "not valid YAML"),
    "not UTF-8": ("\udcff: x\n", "not UTF-8"),
    "duplicate user": (
        f"basic_auth_users:\n  alice: {HASH}\n  alice: {HASH}\n",
        "alice: given twice",
    ),
    "bad hash": (
        f"basic_auth_users:\n  alice: {SECRET}\n",
        "basic_auth_users.alice: not a bcrypt hash",
    ),
    "mixed bcrypt costs": (
        f"basic_auth_users:\n  alice: {HASH}\n  bob: {HASH.replace(f'$0{TEST_COST}$', '$12$')}\n",
        f"basic_auth_users.bob: its bcrypt cost 12 differs from alice's {TEST_COST}: give "
        "every user the same cost",
    ),
    "colon in user": (
        f"basic_auth_users:\n  'a:b': {HASH}\n",
        "basic_auth_users.a:b: a user name cannot hold ':'",
    ),
    "users not a mapping": ("basic_auth_users: alice\n", "basic_auth_users: expected a mapping"),
    "no cert_file": (
        "tls_server_config:\n  key_file: k.pem\n",
        "tls_server_config.cert_file: required",
    ),
    "missing cert file": (
        "tls_server_config:\n  cert_file: nosuch.pem\n  key_file: nosuch.key\n",
        "tls_server_config.cert_file: ",
    ),
    "key of another cert": (
        "{tls_other}",
        "tls_server_config.cert_file/key_file: cannot use them",
    ),
    "encrypted key": ("{tls_locked}", "tls_server_config.cert_file/key_file: cannot use them"),
    "unknown client_auth_type": (
        "{tls}  client_auth_type: Sometimes\n",
        "tls_server_config.client_auth_type: unknown",
    ),
    "unverified client certs": (
        "{tls}  client_auth_type: RequireAnyClientCert\n  client_ca_file: {ca}\n",
        "tls_server_config.client_auth_type: RequireAnyClientCert takes a client certificate "
        "without verifying it",
    ),
    "mutual TLS without a CA": (
        "{tls}  client_auth_type: RequireAndVerifyClientCert\n",
        "tls_server_config.client_ca_file: required by RequireAndVerifyClientCert",
    ),
    "a CA nobody asks for": (
        "{tls}  client_ca_file: {ca}\n",
        "tls_server_config.client_auth_type: a client CA is given",
    ),
    "a CA that is not one": (
        "{tls}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {key}\n",
        "tls_server_config.client_ca_file: no usable CA certificate",
    ),
    "bad min_version": ("{tls}  min_version: TLS14\n", "tls_server_config.min_version: unknown"),
    "max below min": (
        "{tls}  min_version: TLS13\n  max_version: TLS12\n",
        "tls_server_config.max_version: is below min_version",
    ),
    "cipher_suites": (
        "{tls}  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
        "tls_server_config.cipher_suites: not supported",
    ),
    "client_allowed_sans": (
        "{tls}  client_allowed_sans: [a]\n",
        "tls_server_config.client_allowed_sans: not supported",
    ),
    "NUL in a file name": (
        'tls_server_config:\n  cert_file: "server\\0.crt"\n  key_file: server.key\n',
        "tls_server_config.cert_file: not a usable file name",
    ),
    "inline key": ("tls_server_config:\n  key: secret\n", "tls_server_config.key: an inline key"),
    "a number for a file": (
        "tls_server_config:\n  cert_file: 12\n",
        "tls_server_config.cert_file: expected a string",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_file_is_one_line_naming_the_key_and_exit_2_without_secrets(
    case: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    text, expected = BAD[case]
    text = text.format(
        tls=tls(files),
        tls_other=tls(files, key="other_key"),
        tls_locked=tls(files, cert="locked_cert", key="locked_key"),
        ca=files["ca"],
        key=files["key"],
    )
    path = files["dir"] / f"bad-{case.replace(' ', '-')}.yml"
    path.write_bytes(text.encode(errors="surrogateescape"))
    path.chmod(0o600)
    code, err = export(path, capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(
        f"gpumon export: error: --web-config-file {path}: "
    )
    assert expected in err, err
    assert SECRET not in err and "PRIVATE KEY" not in err and "Traceback" not in err


def test_files_no_other_user_controls_and_of_a_sane_size(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    writable = write_config(files["dir"], "{}\n", "writable.yml")
    writable.chmod(0o666)
    assert export(writable, capsys) == (
        2,
        f"gpumon export: error: --web-config-file {writable}: refused: the file is writable "
        "by other users (chmod go-w fixes it)\n",
    )
    huge = write_config(files["dir"], "#" * 100_000 + "\n", "huge.yml")
    code, err = export(huge, capsys)
    assert code == 2 and "too large" in err
    code, err = export(files["dir"], capsys)  # a directory
    assert code == 2 and err.endswith(": not a regular file\n")
    fifo = files["dir"] / "fifo.yml"
    os.mkfifo(fifo, 0o600)
    code, err = export(fifo, capsys)  # refused without waiting for a writer
    assert code == 2 and err.endswith(": not a regular file\n")
    missing = files["dir"] / "nosuch.yml"
    assert export(missing, capsys)[1].endswith(f"{missing}: no such file\n")
    key_file = files["dir"] / "shared.key"
    key_file.write_bytes(files["key"].read_bytes())
    key_file.chmod(0o646)
    shared = write_config(files["dir"], tls({**files, "key": key_file}), "shared.yml")
    code, err = export(shared, capsys)
    assert code == 2 and "tls_server_config.key_file: " in err and "writable by other" in err


def test_what_is_read_and_what_is_only_warned_about(files: dict[str, Path]) -> None:
    assert load_web_config(str(write_config(files["dir"], "", "empty.yml"))).tls is None
    relative = write_config(
        files["dir"],
        f"tls_server_config:\n  cert_file: {files['cert'].name}\n  key_file: "
        f"{files['key'].name}\n  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: "
        f"{files['ca'].name}\n  min_version: TLS13\n  prefer_server_cipher_suites: true\n"
        f"http_server_config:\n  http2: false\nbasic_auth_users:\n  alice: {HASH}\n",
        "relative.yml",
    )
    config = load_web_config(str(relative))  # file names relative to the config's directory
    assert config.tls is not None and config.client_auth == "VerifyClientCertIfGiven"
    assert config.users == {"alice": HASH.encode()}
    assert SECRET not in repr(config)
    assert config.warnings == ("http_server_config is not applied by gpumon (ignored)",)


def test_versions_no_handshake_succeeds_with_are_refused_at_start(files: dict[str, Path]) -> None:
    """TLS 1.0 only: OpenSSL's security level refuses every handshake, so the exporter
    refuses to start rather than announce an https:// no client can reach."""
    versions = "  min_version: TLS10\n  max_version: TLS10\n"
    if _tls10_handshakes_succeed(files):
        pytest.skip("this OpenSSL still completes TLS 1.0 handshakes")
    path = write_config(files["dir"], tls(files, versions), "tls10.yml")
    process = start_process("--demo", "--listen", "127.0.0.1:0", "--web-config-file", str(path))
    try:
        _, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:  # serving
            process.kill()
            process.communicate()
    assert process.returncode == 2, err
    assert err.count("\n") == 1 and err.startswith(
        f"gpumon export: error: --web-config-file {path}: tls_server_config.min_version/"
        "max_version: no TLS handshake succeeds here with TLS10 to TLS10 ("
    ), err
    assert err.endswith("): use TLS12 or TLS13\n")


def _tls10_handshakes_succeed(files: dict[str, Path]) -> bool:
    """Whether a TLS 1.0 handshake with the test certificate completes here, in memory."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(files["cert"], files["key"])
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
    for context in (server, client):
        context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    ends = [
        server.wrap_bio(server_in, server_out, server_side=True),
        client.wrap_bio(client_in, client_out),
    ]
    try:
        for _ in range(10):
            for end in ends:
                try:
                    end.do_handshake()
                except ssl.SSLWantReadError:
                    pass
            server_in.write(client_out.read())
            client_in.write(server_out.read())
        return all(end.version() is not None for end in ends)
    except ssl.SSLError:
        return False


def _expected_warning(files: dict[str, Path], case: str, path: Path) -> str:
    if case == "empty":
        return f"{path} is empty: serving plain HTTP without authentication"
    certificate = x509.load_pem_x509_certificate(files[f"{case}_cert"].read_bytes())
    if case == "expired":
        when = certificate.not_valid_after_utc.strftime("%Y-%m-%d %H:%M UTC")
        return f"tls_server_config.cert_file: the certificate expired on {when}: clients will "
    when = certificate.not_valid_before_utc.strftime("%Y-%m-%d %H:%M UTC")
    return f"tls_server_config.cert_file: the certificate is not valid before {when}: clients "


@pytest.mark.parametrize("case", ["empty", "expired", "future"])
def test_what_is_served_anyway_is_said_in_one_line_at_start(
    case: str, files: dict[str, Path]
) -> None:
    """An empty file serves plain HTTP without authentication, as the toolkit does; a
    certificate out of date is served; both are said before the banner."""
    text = "" if case == "empty" else tls(files, cert=f"{case}_cert", key=f"{case}_key")
    path = write_config(files["dir"], text, f"said-{case}.yml")
    process = start_process("--demo", "--listen", "127.0.0.1:0", "--web-config-file", str(path))
    lines: list[str] = []
    try:
        assert process.stderr is not None
        while len(lines) < 3 and "/metrics" not in "".join(lines[-1:]):  # up to the banner
            lines.append(process.stderr.readline())
    finally:
        process.terminate()
        _, rest = process.communicate(timeout=10)
    scheme = "http" if case == "empty" else "https"
    assert len(lines) == 2 and f"serving {scheme}://127.0.0.1:" in lines[1], lines
    assert lines[0].startswith(
        "gpumon export: warning: --web-config-file: " + _expected_warning(files, case, path)
    ), lines
    assert process.returncode == 0 and "Traceback" not in rest


def test_missing_packages_say_how_to_install(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)
    code, err = export(write_config(files["dir"], "{}\n", "any.yml"), capsys)
    assert code == 1 and "pip install 'gpumon-tui[export]'" in err


def test_the_error_type_is_one_line() -> None:
    assert str(WebConfigError("a.b", "why")) == "a.b: why"


def test_the_documented_example_is_a_file_gpumon_reads(files: dict[str, Path]) -> None:
    """docs/prometheus.md's example, with its certificate files put where it names them."""
    docs = (Path(__file__).resolve().parents[3] / "docs" / "prometheus.md").read_text()
    start = docs.index("## TLS and authentication")
    example = docs[
        docs.index("```yaml\n", start) + 8 : docs.index("```", docs.index("```yaml\n", start) + 8)
    ]
    directory = files["dir"] / "documented"
    directory.mkdir()
    for name, source in (("server.crt", "cert"), ("server.key", "key"), ("clients-ca.crt", "ca")):
        (directory / name).write_bytes(files[source].read_bytes())
        (directory / name).chmod(0o600)
    config = load_web_config(str(write_config(directory, example)))
    assert config.client_auth == "RequireAndVerifyClientCert" and config.tls is not None
    assert bcrypt.checkpw(b"change-me", config.users["prometheus"])


def test_basic_auth_itself_refuses_mixed_costs() -> None:
    """The promise of no user enumeration holds for any caller, not only the config file."""
    from gpumon.commands.export.auth import BasicAuth

    cheaper = HASH.replace(f"$0{TEST_COST}$", "$05$")
    with pytest.raises(ValueError, match="same cost"):
        BasicAuth({"alice": HASH.encode(), "bob": cheaper.encode()})
