"""Puts terminal escapes (clear the screen, set the window title, OSC 52: write the
clipboard) and a bidi override into every text it sends and onto stderr, then crashes."""

import os
import signal
import sys

from _fake import send, step

ESC = "\x1b[2J\x1b[H\x1b]52;c;cm0gLXJmIH4K\x07"  # OSC 52: the clipboard gets "rm -rf ~"

send(event="hello", pid=os.getpid(), python="/opt/\x1b[8mtrain/bin/python",
     python_version="3.11.0\x1b]0;owned\x07", protocol=1)  # fmt: skip
step(1, "pass", f"Python 3.11.0, torch 2.13.0{ESC}", detail=f"first{ESC}\nsecond \u202elive")
step(2, "running")
sys.stderr.write(f"warning: {ESC} \u202eevil\nTraceback line two\n")
sys.stderr.flush()
os.kill(os.getpid(), signal.SIGSEGV)
