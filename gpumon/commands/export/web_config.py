"""``gpumon export --web-config-file FILE``: TLS and basic authentication in the web
configuration format of Prometheus' exporter-toolkit, so one file serves them all.

A key that would change security and cannot be honoured is refused with the reason, never
ignored; the file is read once, at start, as gpumon's own config is; a problem is one line
naming the key, never a value. What is read and refused: docs/prometheus.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpumon.config import SettingsError
from gpumon.config.files import read_guarded
from gpumon.data.format import safe_text

MAX_WEB_CONFIG_BYTES = 64 * 1024
MAX_PEM_BYTES = 1024 * 1024
#: A bcrypt hash, as htpasswd and Go's bcrypt write it: ``$2y$10$`` + 53 characters.
BCRYPT_HASH = re.compile(r"\$2[abxy]\$(\d\d)\$[./A-Za-z0-9]{53}")

_TOP = ("tls_server_config", "basic_auth_users", "http_server_config", "rate_limit")
_TLS_KEYS = (
    "cert_file", "key_file", "client_ca_file", "client_ca", "client_auth_type", "min_version",
    "max_version", "prefer_server_cipher_suites",
)  # fmt: skip
_NOT_SUPPORTED = {
    "cert": "an inline certificate is not supported: use cert_file",
    "key": "an inline key is not supported: use key_file",
    "cipher_suites": "not supported: gpumon uses OpenSSL's default cipher suites",
    "curve_preferences": "not supported: gpumon uses OpenSSL's default curves",
    "client_allowed_sans": "not supported: gpumon checks client certificates against "
    "client_ca_file only",
}
_VERIFY_MODES = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_UNVERIFIED = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}


class WebConfigError(ValueError):
    """The web config cannot be used; ``str()`` is one line: the key, then why."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}" if key else reason)


@dataclass(frozen=True)
class WebConfig:
    """What ``--web-config-file`` asks for."""

    #: The server's TLS, or ``None`` for plain HTTP.
    tls: ssl.SSLContext | None = None
    #: ``client_auth_type`` as written (for the start-up line).
    client_auth: str = "NoClientCert"
    #: User name -> bcrypt hash; none: no authentication. Never shown (``repr`` leaves it out).
    users: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    #: What the file asks for that gpumon does not apply: printed at start.
    warnings: tuple[str, ...] = ()


def load_web_config(path: str) -> WebConfig:
    """Read and check ``path`` and build its TLS context at once; raises :class:`WebConfigError`."""
    try:
        data = read_guarded(path, max_bytes=MAX_WEB_CONFIG_BYTES)
    except SettingsError as error:
        raise WebConfigError("", str(error).removeprefix(f"{path}: ")) from None
    assert data is not None
    document = _parse_yaml(data)
    if document is None:
        return WebConfig(warnings=(f"{path} is empty: serving plain HTTP without authentication",))
    table = _mapping(document, "")
    _check_keys(table, "", _TOP)
    warnings = [
        f"{key} is not applied by gpumon (ignored)" for key in ("http_server_config", "rate_limit")
        if table.get(key)
    ]  # fmt: skip
    base = os.path.dirname(os.path.abspath(path))
    tls, client_auth = _tls(table.get("tls_server_config"), base, warnings)
    users = _users(table.get("basic_auth_users"))
    if tls is None and not users:
        warnings.append(
            f"{path} sets no TLS and no users: serving plain HTTP without authentication"
        )
    return WebConfig(tls, client_auth, users, tuple(warnings))


def _parse_yaml(data: bytes) -> Any:
    import yaml

    class _Loader(yaml.SafeLoader):
        """yaml.safe_load's loader, refusing a key given twice (YAML says a key is unique;
        PyYAML would keep the last: a second user entry would win silently)."""

    def mapping(loader: _Loader, node: yaml.MappingNode) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise WebConfigError(_shown(str(key)), "given twice")
            seen.add(key if isinstance(key, (str, int, float, bool)) else id(key_node))
        return loader.construct_mapping(node)

    _Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        text = data.decode("utf-8")
        return yaml.load(text, Loader=_Loader)  # a SafeLoader: safe_load with one more check
    except UnicodeDecodeError:
        raise WebConfigError("", "not valid YAML: the file is not UTF-8") from None
    except yaml.MarkedYAMLError as error:
        # The problem and where, never the text around it (it may hold a hash).
        mark = error.problem_mark
        where = "" if mark is None else f" (line {mark.line + 1}, column {mark.column + 1})"
        raise WebConfigError("", f"not valid YAML: {_shown(error.problem or '')}{where}") from None
    except (yaml.YAMLError, RecursionError):
        raise WebConfigError("", "not valid YAML") from None


def _tls(value: Any, base: str, warnings: list[str]) -> tuple[ssl.SSLContext | None, str]:
    """The server's TLS context and ``client_auth_type``; what is worth a warning goes into
    ``warnings``."""
    key = "tls_server_config"
    if value is None or value == {}:
        return None, "NoClientCert"
    table = _mapping(value, key)
    for name, reason in _NOT_SUPPORTED.items():
        if table.get(name) not in (None, "", []):
            raise WebConfigError(f"{key}.{name}", reason)
    _check_keys(table, key, (*_TLS_KEYS, *_NOT_SUPPORTED))
    mode = _text(table, key, "client_auth_type") or "NoClientCert"
    if mode in _UNVERIFIED:
        raise WebConfigError(
            f"{key}.client_auth_type",
            f"{mode} takes a client certificate without verifying it, which Python's ssl "
            "cannot do: use RequireAndVerifyClientCert (or VerifyClientCertIfGiven) with "
            "client_ca_file",
        )
    if mode not in _VERIFY_MODES:
        raise WebConfigError(
            f"{key}.client_auth_type", f"unknown: one of {', '.join(_VERIFY_MODES)}"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.options |= getattr(ssl, "OP_NO_RENEGOTIATION", 0)  # renegotiation: a DoS lever
    versions = _versions(context, table, key)
    warnings.extend(_certificate(context, table, key, base))
    _handshakes(context, key, *versions)  # before a client certificate is asked for
    ca = _client_ca(table, key, base)
    if ca is None and mode != "NoClientCert":
        raise WebConfigError(f"{key}.client_ca_file", f"required by {mode}")
    if ca is not None and mode == "NoClientCert":
        raise WebConfigError(
            f"{key}.client_auth_type",
            "a client CA is given but client certificates are not asked for: set "
            "RequireAndVerifyClientCert",
        )
    if ca is not None:
        try:
            context.load_verify_locations(cadata=ca)
        except (ssl.SSLError, ValueError) as error:
            raise WebConfigError(
                f"{key}.client_ca_file", f"no usable CA certificate ({_ssl(error)})"
            ) from None
    context.verify_mode = _VERIFY_MODES[mode]
    return context, mode


def _versions(context: ssl.SSLContext, table: Mapping[str, Any], key: str) -> tuple[str, str]:
    """Set the TLS versions asked for; returns their names (lowest, highest)."""
    names = []
    for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        names.append(_text(table, key, name) or default)
        if names[-1] not in _VERSIONS:
            raise WebConfigError(f"{key}.{name}", f"unknown: one of {', '.join(_VERSIONS)}")
    low, high = (_VERSIONS[text] for text in names)
    if low > high:
        raise WebConfigError(f"{key}.max_version", "is below min_version")
    try:
        context.minimum_version, context.maximum_version = low, high
    except (ValueError, ssl.SSLError) as error:
        raise WebConfigError(f"{key}.min_version", f"not available here ({_ssl(error)})") from None
    return names[0], names[1]


def _certificate(
    context: ssl.SSLContext, table: Mapping[str, Any], key: str, base: str
) -> list[str]:
    """Load ``cert_file`` and ``key_file``; a warning when the certificate is out of date."""
    paths = []
    for name in ("cert_file", "key_file"):
        text = _text(table, key, name)
        if not text:
            raise WebConfigError(f"{key}.{name}", "required for TLS")
        path = os.path.join(base, text)
        _guarded(path, f"{key}.{name}")  # a regular file no other user controls
        paths.append(path)
    try:  # an encrypted key is refused (no passphrase is asked for), never prompted for
        context.load_cert_chain(paths[0], paths[1], password=lambda: b"")
    except (ssl.SSLError, OSError) as error:
        raise WebConfigError(
            f"{key}.cert_file/key_file",
            f"cannot use them: {_ssl(error)} (PEM, an unencrypted key matching the certificate)",
        ) from None
    return _out_of_date(paths[0], f"{key}.cert_file")


def _out_of_date(path: str, key: str) -> list[str]:
    """A warning when the certificate in ``path`` has expired or is not valid yet: served
    anyway, as the toolkit does, but clients that check it refuse it."""
    # The ssl module's own decoder (used by its tests, present since Python 2.7): the
    # standard library has no public one, and the warning is not worth a dependency.
    decode = getattr(ssl._ssl, "_test_decode_cert", None)  # type: ignore[attr-defined]
    try:
        valid = decode(path) if decode is not None else {}
        after = ssl.cert_time_to_seconds(valid["notAfter"])
        before = ssl.cert_time_to_seconds(valid["notBefore"])
    except (ssl.SSLError, OSError, KeyError, ValueError, TypeError):
        return []  # not said rather than guessed
    now = time.time()
    if now > after:
        return [f"{key}: the certificate expired on {_utc(after)}: clients will refuse it"]
    if now < before:
        return [
            f"{key}: the certificate is not valid before {_utc(before)}: clients will refuse it"
        ]
    return []


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seconds))


def _handshakes(context: ssl.SSLContext, key: str, low: str, high: str) -> None:
    """Refuse a context with which no TLS handshake succeeds here, tried in memory with a
    client that takes any version and cipher OpenSSL has (OpenSSL's security level disables
    TLS 1.0 and 1.1 on most systems: a server limited to them fails every handshake)."""
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    client.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    client.set_ciphers("ALL:@SECLEVEL=0")
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    pending = [
        client.wrap_bio(to_client, to_server),
        context.wrap_bio(to_server, to_client, server_side=True),
    ]
    try:
        for _ in range(8):  # TLS 1.2 takes two round trips
            for end in list(pending):
                with contextlib.suppress(ssl.SSLWantReadError):
                    end.do_handshake()
                    pending.remove(end)
            if not pending:
                return
    except ssl.SSLError as error:
        reason = _ssl(error)
    else:
        reason = "it does not end"
    raise WebConfigError(
        f"{key}.min_version/max_version",
        f"no TLS handshake succeeds here with {low} to {high} ({reason}): use TLS12 or TLS13",
    )


def _client_ca(table: Mapping[str, Any], key: str, base: str) -> str | None:
    inline, name = _text(table, key, "client_ca"), _text(table, key, "client_ca_file")
    if inline and name:
        raise WebConfigError(f"{key}.client_ca", "give client_ca or client_ca_file, not both")
    if inline:
        return inline
    if not name:
        return None
    data = _guarded(os.path.join(base, name), f"{key}.client_ca_file")
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise WebConfigError(f"{key}.client_ca_file", "not PEM (not ASCII)") from None


def _users(value: Any) -> dict[str, bytes]:
    key = "basic_auth_users"
    if value is None:
        return {}
    users: dict[str, bytes] = {}
    for user, hashed in _mapping(value, key).items():
        if not isinstance(user, str) or not user:
            raise WebConfigError(key, f"a user name must be a string ({_shown(str(user))})")
        where = f"{key}.{_shown(user)}"
        if ":" in user:
            raise WebConfigError(where, "a user name cannot hold ':' (basic auth splits there)")
        match = BCRYPT_HASH.fullmatch(hashed) if isinstance(hashed, str) else None
        if match is None or not 4 <= int(match.group(1)) <= 31:
            raise WebConfigError(
                where, "not a bcrypt hash (make one with: htpasswd -nBC 10 \"\" | tr -d ':\\n')"
            )
        users[user] = hashed.encode("ascii")
        _same_cost(users, user, where)
    return users


def _same_cost(users: Mapping[str, bytes], user: str, where: str) -> None:
    """Refuse a hash whose bcrypt cost differs from the first user's: an unknown user is
    checked against a decoy of the highest cost, so a user with a cheaper hash would answer
    faster, telling which user names exist."""
    first, cost = next(iter(users.items()))
    other = users[user]
    if other[4:6] != cost[4:6]:
        raise WebConfigError(
            where,
            f"its bcrypt cost {int(other[4:6])} differs from {_shown(first)}'s "
            f"{int(cost[4:6])}: give every user the same cost (a cheaper hash answers "
            "faster, which would tell the names that exist)",
        )


def _guarded(path: str, key: str) -> bytes:
    try:
        data = read_guarded(path, max_bytes=MAX_PEM_BYTES)
    except SettingsError as error:
        raise WebConfigError(key, str(error)) from None
    except ValueError:  # a NUL byte, or a character no file name can hold
        raise WebConfigError(
            key, "not a usable file name (a NUL or an invalid character)"
        ) from None
    assert data is not None
    return data


def _mapping(value: Any, key: str) -> Mapping[Any, Any]:
    if not isinstance(value, dict):
        raise WebConfigError(key, "expected a mapping (key: value lines)")
    return value


def _check_keys(table: Mapping[Any, Any], key: str, known: tuple[str, ...]) -> None:
    for name in table:
        if name not in known:
            where = f"{key}.{_shown(str(name))}" if key else _shown(str(name))
            raise WebConfigError(where, f"unknown key (known: {', '.join(known)})")


def _text(table: Mapping[str, Any], key: str, name: str) -> str:
    value = table.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise WebConfigError(f"{key}.{name}", "expected a string")
    return value


def _shown(text: str) -> str:
    return safe_text(text, 64)


def _ssl(error: BaseException) -> str:
    reason = getattr(error, "reason", None) or getattr(error, "strerror", None) or str(error)
    return safe_text(str(reason), 120)
