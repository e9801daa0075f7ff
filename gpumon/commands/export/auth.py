"""Basic authentication for ``gpumon export`` (``basic_auth_users`` of ``--web-config-file``):
bcrypt, kept off the event loop and bounded.

bcrypt is slow on purpose (about 70 ms at cost 10), and Prometheus scrapes every few seconds;
anyone who can connect can send wrong passwords. So:

- **Never on the event loop.** Hashes are checked (``bcrypt.checkpw``, constant-time) by one
  worker thread; the connection waits for the answer, the loop serves everyone else.
- **Bounded.** At most :data:`QUEUE_SIZE` checks wait for the worker; a request beyond that
  is answered ``429`` at once, without a check. Requests with the same credentials while a
  check of them is under way share it. The server gives the whole wait
  :data:`~gpumon.commands.export.server.WRITE_TIMEOUT_S` (then ``503``).
- **Remembered.** A right password is remembered for :data:`REMEMBER_S` (at most
  :data:`REMEMBERED` pairs), under an HMAC with a key made at start, never the password:
  a scraper pays bcrypt once every few minutes, and a flood of wrong passwords, which fills
  the queue, does not lock out a scraper already known.
- **No user enumeration by timing.** An unknown user's password is checked against a decoy
  hash of the same cost as the configured ones, which all have one cost (the web config
  refuses mixed costs: a cheaper hash would answer faster than the decoy).

Refused requests get ``401`` with ``WWW-Authenticate: Basic``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import hashlib
import hmac
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

from gpumon.commands.export.messages import Request, Response, plain

#: Checks waiting for the worker at most (one more is being checked).
QUEUE_SIZE = 8
#: How long a right password is remembered.
REMEMBER_S = 300.0
#: Right (user, password) pairs remembered at most.
REMEMBERED = 256

UNAUTHORIZED = plain(401, "unauthorized\n", ("WWW-Authenticate", 'Basic realm="gpumon"'))
BUSY = plain(429, "too many password checks at once: try again\n", ("Retry-After", "1"))


class BasicAuth:
    """Checks requests' ``Authorization: Basic`` against ``users`` (user -> bcrypt hash).

    :meth:`gate` runs on the server's event loop (it is the server's gate); only the worker
    thread runs bcrypt. :meth:`stop` ends the worker.
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
        # On the loop's thread only: HMAC of a right (user, hash, password) -> when checked.
        self._remembered: OrderedDict[bytes, float] = OrderedDict()
        self._checking: dict[bytes, asyncio.Future[bool]] = {}
        costs = {int(hashed[4:6]) for hashed in self._users.values()}
        if len(costs) > 1:  # the web config refuses them: see its _same_cost
            raise ValueError("basic_auth_users: every bcrypt hash must have the same cost")
        self._worker = _Worker(queue_size, max(costs, default=10))

    @property
    def checks(self) -> int:
        """bcrypt checks made so far (for tests and benchmarks)."""
        return self._worker.checks

    def stop(self) -> None:
        self._worker.stop()

    async def gate(self, request: Request) -> Response | None:
        """``None`` when the request carries a right user and password; else its answer:
        ``401``, or ``429`` when too many checks wait already."""
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
            submitted = self._worker.submit(hashed, password)
            if submitted is None:
                return BUSY
            checking = asyncio.wrap_future(submitted)
            self._checking[key] = checking
            checking.add_done_callback(lambda _: self._checking.pop(key, None))
        right = await asyncio.shield(checking)  # a client that leaves cancels only its wait
        if not right or hashed is None:
            return UNAUTHORIZED
        self._remember(key)
        return None

    def _known(self, key: bytes) -> bool:
        checked = self._remembered.get(key)
        if checked is None:
            return False
        if not 0 <= self._clock() - checked < REMEMBER_S:
            del self._remembered[key]
            return False
        return True

    def _remember(self, key: bytes) -> None:
        self._remembered[key] = self._clock()
        self._remembered.move_to_end(key)
        while len(self._remembered) > REMEMBERED:
            self._remembered.popitem(last=False)


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


class _Worker:
    """One daemon thread running bcrypt for a bounded queue of checks."""

    def __init__(self, size: int, decoy_cost: int) -> None:
        self._queue: queue.Queue[tuple[bytes | None, bytes, concurrent.futures.Future[bool]]] = (
            queue.Queue(maxsize=size)
        )
        self._decoy_cost = decoy_cost
        self._decoy: bytes | None = None  # made by the worker when first needed
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self.checks = 0

    def submit(
        self, hashed: bytes | None, password: bytes
    ) -> concurrent.futures.Future[bool] | None:
        """A future of whether ``password`` matches ``hashed`` (``None``: an unknown user,
        checked against the decoy); ``None`` when the queue is full."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpumon-auth", daemon=True)
            self._thread.start()
        future: concurrent.futures.Future[bool] = concurrent.futures.Future()
        try:
            self._queue.put_nowait((hashed, password, future))
        except queue.Full:
            return None
        return future

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            while True:  # make room for the wake-up: what waits is dropped
                try:
                    self._queue.put_nowait((None, b"", concurrent.futures.Future()))
                    break
                except queue.Full:
                    try:
                        self._queue.get_nowait()[2].cancel()
                    except queue.Empty:
                        pass

    def _run(self) -> None:
        import bcrypt

        while not self._stopped.is_set():
            hashed, password, future = self._queue.get()
            if self._stopped.is_set() or not future.set_running_or_notify_cancel():
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
