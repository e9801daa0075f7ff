"""Passes two steps, starts the third, says something on stderr and dies of SIGSEGV."""

import os
import signal
import sys

from _fake import hello, step

hello()
step(1, "pass", "Python 3.11.0, torch 2.13.0")
step(2, "pass", "CUDA 12.4 build")
step(3, "running")
sys.stderr.write("Fatal: simulated driver crash in cuInit\n")
sys.stderr.flush()
os.kill(os.getpid(), signal.SIGSEGV)
