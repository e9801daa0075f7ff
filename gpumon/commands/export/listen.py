"""Where ``gpumon export`` listens: ``--listen HOST:PORT`` parsed and checked, and whether an
address is loopback only (the exporter warns when it is not).

What lives here: :data:`DEFAULT_LISTEN`, :func:`listen_address` (the ``--listen`` type) and
:func:`is_loopback`. Standard library only: building the parser imports no exporter
dependency.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import socket

DEFAULT_LISTEN = "127.0.0.1:9402"


def listen_address(text: str) -> tuple[str, int]:
    """Parse ``HOST:PORT`` (``[::1]:9402`` for IPv6; port 0: a free one). The host is an IP
    address or an ASCII host name (253 characters, labels of 63); anything else is an
    ``ArgumentTypeError`` (exit 2). Whether a name resolves is known only at bind (exit 1).
    """
    host, sep, port_text = text.rpartition(":")
    if not sep or not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5):
        raise _bad_listen(text, "expected HOST:PORT with a port of ASCII digits")
    if int(port_text) > 65535:
        raise _bad_listen(text, "the port must be from 0 to 65535")
    return _listen_host(text, host), int(port_text)


_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def _listen_host(text: str, host: str) -> str:
    if not host:
        raise _bad_listen(text, "expected HOST:PORT; the host is missing")
    if not (host.isascii() and host.isprintable()):
        raise _bad_listen(text, "the host must be ASCII (an IP address or a host name)")
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise _bad_listen(text, "not an IPv6 address in the brackets") from None
        return host[1:-1]
    if ":" in host:
        raise _bad_listen(text, "an IPv6 address goes in brackets, as in [::1]:9402")
    labels = host.split(".")
    if labels[-1].isdigit():  # no top-level domain is all digits: this is meant as IPv4
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            raise _bad_listen(text, "not an IPv4 address (four numbers 0-255)") from None
    if len(host) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise _bad_listen(
            text,
            "a host name is letters, digits and hyphens in labels of at most 63 characters "
            "joined by dots, at most 253 characters in all",
        )
    return host


def _bad_listen(text: str, reason: str) -> argparse.ArgumentTypeError:
    shown = repr(text if len(text) <= 60 else text[:60] + "…")  # one line, controls escaped
    return argparse.ArgumentTypeError(f"{shown}: {reason} (e.g. {DEFAULT_LISTEN} or [::1]:9402)")


def is_loopback(host: str) -> bool:
    """True when every address ``host`` resolves to is a loopback address."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(
        ipaddress.ip_address(str(address).split("%")[0]).is_loopback for address in addresses
    )
