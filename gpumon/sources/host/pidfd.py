"""Process file descriptors (Linux >= 5.3): a handle on one process, not on its number.

A pidfd stays bound to the process it was opened on: once that process has been reaped and
its number reused, a signal through the pidfd fails with ESRCH instead of reaching the new
process. Used for the dashboard's signals (:mod:`gpumon.sources.host.signals`) and for the
probe child's process group (:mod:`gpumon.probe.child_process`).
"""

from __future__ import annotations

import errno
import os
import signal


def open_pidfd(pid: int) -> int | None:
    """A close-on-exec pidfd for ``pid``, or ``None`` where the system has none (not Linux, a
    kernel before 5.3, seccomp); raises :class:`ProcessLookupError` when no process has the PID.
    """
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None or not hasattr(signal, "pidfd_send_signal"):
        return None
    try:
        return int(pidfd_open(pid))
    except OSError as error:
        # ENOSYS: a kernel before 5.3. EPERM: a seccomp filter (older container runtimes)
        # that blocks the call; pidfd_open itself checks no permission.
        if error.errno in (errno.ENOSYS, errno.EPERM):
            return None
        raise
