"""Basic authentication for ``gpumon export`` (``basic_auth_users`` of ``--web-config-file``):
bcrypt, kept off the event loop and bounded.

One worker thread checks hashes, taking one check from each client's lane in turn (a flood
fills only its own lane: ``429``); a right password is remembered under an HMAC; an unknown
user is checked against a decoy hash of the same cost. Refused requests get ``401``.
Details: docs/prometheus.md, "Basic authentication".
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import hashlib
import hmac
import ipaddress
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping

from gpumon.commands.export.messages import Request, Response, plain

#: Checks waiting for the worker at most per client address.
QUEUE_SIZE = 8
#: Client addresses with checks waiting at most: at about 70 ms a check, a check waits at
#: most some 5 s, well within the server's limit.
LANES = 64
#: How long a right password is remembered after its last use.
REMEMBER_S = 300.0
#: How long ``stop()`` waits for a check under way: exiting under a check would abort the
#: process (bcrypt's Rust code cannot unwind the thread's end at interpreter exit).
STOP_WAIT_S = 5.0
#: Right (user, password) pairs remembered at most.
REMEMBERED = 256

UNAUTHORIZED = plain(401, "unauthorized\n", ("WWW-Authenticate", 'Basic realm="gpumon"'))
BUSY = plain(429, "too many password checks at once: try again\n", ("Retry-After", "1"))


class BasicAuth:
    """Checks requests' ``Authorization: Basic`` against ``users`` (user -> bcrypt hash):
    :meth:`gate` on the server's loop, bcrypt on the worker thread; :meth:`stop` ends it.
    """

    def __init__(
        self,
        users: Mapping[str, bytes],
        *,
        queue_size: int = QUEUE_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._users = dict(users)
        self._clock = clock
        self._secret = os.urandom(32)
        # On the loop's thread only: HMAC of a right (user, hash, password) -> when last used.
        self._remembered: OrderedDict[bytes, float] = OrderedDict()
        self._checking: dict[bytes, asyncio.Future[bool]] = {}
        costs = {int(hashed[4:6]) for hashed in self._users.values()}
        if len(costs) > 1:  # the web config refuses them: see its _same_cost
            raise ValueError("basic_auth_users: every bcrypt hash must have the same cost")
        self._worker = _Worker(queue_size, LANES, max(costs, default=10))

    @property
    def checks(self) -> int:
        """bcrypt checks made so far (for tests and benchmarks)."""
        return self._worker.checks

    def stop(self) -> None:
        self._worker.stop()

    async def gate(self, request: Request, client: str) -> Response | None:
        """``None`` when the request carries a right user and password; else its answer:
        ``401``, or ``429`` when too many checks of ``client`` (its address) wait already."""
        credentials = _credentials(request.headers.get("authorization", ""))
        if credentials is None:
            return UNAUTHORIZED
        user, password = credentials
        hashed = self._users.get(user)
        key = hmac.new(
            self._secret,
            b"\0".join((user.encode(errors="surrogateescape"), hashed or b"", password)),
            hashlib.sha256,
        ).digest()
        if hashed is not None and self._known(key):
            return None
        checking = self._checking.get(key)
        if checking is None:
            submitted = self._worker.submit(client_lane(client), hashed, password)
            if submitted is None:
                return BUSY
            checking = asyncio.wrap_future(submitted)
            self._checking[key] = checking
            checking.add_done_callback(lambda _: self._checking.pop(key, None))
        right = await asyncio.shield(checking)  # a client that leaves cancels only its wait
        if not right or hashed is None:
            return UNAUTHORIZED
        self._remember(key, self._clock())
        return None

    def _known(self, key: bytes) -> bool:
        checked = self._remembered.get(key)
        if checked is None:
            return False
        now = self._clock()
        if not 0 <= now - checked < REMEMBER_S:
            del self._remembered[key]
            return False
        self._remember(key, now)  # from its last use: a steady scraper is never checked again
        return True

    def _remember(self, key: bytes, now: float) -> None:
        self._remembered[key] = now
        self._remembered.move_to_end(key)
        while len(self._remembered) > REMEMBERED:
            self._remembered.popitem(last=False)


def client_lane(address: str) -> str:
    """The lane of the client at ``address``: its /64 for IPv6 (one host holds a whole /64,
    and could otherwise take every lane), the IPv4 address itself (an IPv4-mapped IPv6 one
    too); text that is not an address is its own lane."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    if isinstance(ip, ipaddress.IPv6Address) and not ip.is_loopback:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _credentials(header: str) -> tuple[str, bytes] | None:
    """(user, password) of a Basic ``Authorization`` header, or ``None``."""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        # The header was read as latin-1: these are its bytes again.
        decoded = base64.b64decode(encoded.strip().encode("latin-1"), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(b":")
    if not colon:
        return None
    return user.decode(errors="surrogateescape"), password


_Check = tuple[bytes | None, bytes, concurrent.futures.Future[bool]]


class _Worker:
    """One daemon thread running bcrypt for bounded lanes of checks, one lane per client,
    taking one check from each lane in turn."""

    def __init__(self, size: int, lanes: int, decoy_cost: int) -> None:
        self._size = size
        self._most_lanes = lanes
        # Clients with checks waiting, the next to be served first.
        self._lanes: OrderedDict[str, deque[_Check]] = OrderedDict()
        self._ready = threading.Condition()
        self._decoy_cost = decoy_cost
        self._decoy: bytes | None = None  # made by the worker when first needed
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.checks = 0

    def submit(
        self, client: str, hashed: bytes | None, password: bytes
    ) -> concurrent.futures.Future[bool] | None:
        """A future of whether ``password`` matches ``hashed`` (``None``: an unknown user,
        checked against the decoy); ``None`` when ``client``'s lane (or every lane) is full."""
        with self._ready:
            if self._stopped:
                return None
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gpumon-auth", daemon=True)
                self._thread.start()
            lane = self._lanes.get(client)
            if lane is None and len(self._lanes) >= self._most_lanes:
                return None
            if lane is None:
                lane = self._lanes[client] = deque()
            if len(lane) >= self._size:
                return None
            future: concurrent.futures.Future[bool] = concurrent.futures.Future()
            lane.append((hashed, password, future))
            self._ready.notify()
        return future

    def stop(self, timeout_s: float = STOP_WAIT_S) -> None:
        """Drop the waiting checks and end the thread, waiting for a check under way."""
        with self._ready:
            self._stopped = True
            for lane in self._lanes.values():
                for _, _, future in lane:
                    future.cancel()
            self._lanes.clear()
            self._ready.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _next(self) -> _Check | None:
        """The next check, round robin over the lanes; ``None`` once stopped."""
        with self._ready:
            while not self._lanes and not self._stopped:
                self._ready.wait()
            if self._stopped:
                return None
            client, lane = self._lanes.popitem(last=False)
            check = lane.popleft()
            if lane:
                self._lanes[client] = lane  # last in turn
            return check

    def _run(self) -> None:
        import bcrypt

        while (check := self._next()) is not None:
            hashed, password, future = check
            if not future.set_running_or_notify_cancel():
                continue
            if hashed is None:
                if self._decoy is None:
                    self._decoy = bcrypt.hashpw(os.urandom(16), bcrypt.gensalt(self._decoy_cost))
                hashed = self._decoy
            try:
                right = bcrypt.checkpw(password, hashed)
            except ValueError:  # longer than bcrypt's 72 bytes, as Go's bcrypt refuses too
                right = False
            self.checks += 1
            future.set_result(right)
