"""A small terminal for the benchmarks: a VT100/xterm screen emulator and query answers.

Used by ``bench_dashboard.py`` to decide when a monitor's first full frame is *on the
screen* (every marker string visible at once, whatever mix of cursor movement, curses
optimisation or Textual segments drew it) and to answer the terminal queries a real xterm
would answer (cursor position, device attributes, ...), so that no monitor stalls waiting
for a reply. Adapted from ``../shared/fakenvml/measure.py`` (same behaviour, kept here so the
benchmark does not import from outside the repository). Stdlib only.
"""

from __future__ import annotations

import codecs
import fcntl
import os
import re
import struct
import subprocess
import termios
from collections.abc import Callable

# One token of terminal output: CSI, OSC, DCS/PM/APC, charset selection, other ESC, a C0
# control, or printable text.
TOKEN = re.compile(
    r"(?P<csi>\x1b\[(?P<priv>[?>=!<]?)(?P<params>[0-9;:]*)[ -/]*(?P<final>[@-~]))"
    r"|(?P<osc>\x1b\][^\x07\x1b]*(?:\x07|\x1b\\))"
    r"|(?P<dcs>\x1b[P^_][^\x1b]*\x1b\\)"
    r"|(?P<charset>\x1b[()*+](?P<cs>[0-~]))"
    r"|(?P<esc>\x1b[ -/]*[0-~])"
    r"|(?P<ctl>[\x00-\x1a\x1c-\x1f\x7f])"
    r"|(?P<text>[^\x00-\x1f\x1b\x7f]+)"
)
DEC_GRAPHICS = str.maketrans("jklmnqtuvwx`afg~", "┘┐┌└┼─├┤┴┬│◆▒°±·")


class Screen:
    """Enough of CUP/ED/EL/scrolling/alternate screen for curses (nvitop) and Textual output."""

    def __init__(self, cols: int, rows: int) -> None:
        self.cols, self.rows = cols, rows
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.pending = ""
        self.main: tuple[list[list[str]], int, int] | None = None
        self.reset()

    def reset(self) -> None:
        self.buf = [[" "] * self.cols for _ in range(self.rows)]
        self.x = self.y = 0
        self.top, self.bot = 0, self.rows - 1
        self.saved = (0, 0)
        self.graphics = False

    def text(self) -> str:
        return "\n".join("".join(r).rstrip() for r in self.buf).rstrip("\n") + "\n"

    def feed(self, data: bytes) -> None:
        s = self.pending + self.decoder.decode(data)
        pos, n = 0, len(s)
        while pos < n:
            m = TOKEN.match(s, pos)
            if m is None or (
                m.lastgroup == "esc" and s[pos + 1 : pos + 2] in ("[", "]", "P", "^", "_")
            ):
                # An escape sequence that is not complete (yet): wait for more data when it
                # is near the end of the chunk, else drop the ESC and go on.
                if n - pos < 256:
                    break
                pos += 1
                continue
            pos = m.end()
            kind = m.lastgroup
            if kind == "text":
                self.put(m.group("text"))
            elif kind == "csi":
                self.csi(m.group("priv"), m.group("params"), m.group("final"))
            elif kind == "ctl":
                self.ctl(m.group("ctl"))
            elif kind == "charset":
                if m.group(0)[1] == "(":
                    self.graphics = m.group("cs") == "0"
            elif kind == "esc":
                self.esc(m.group(0)[-1])
        self.pending = s[pos:]

    def put(self, text: str) -> None:
        if self.graphics:
            text = text.translate(DEC_GRAPHICS)
        for ch in text:
            if self.x >= self.cols:  # deferred autowrap
                self.x = 0
                self.linefeed()
            self.buf[self.y][self.x] = ch
            self.x += 1

    def linefeed(self) -> None:
        if self.y == self.bot:
            self.scroll(1)
        elif self.y < self.rows - 1:
            self.y += 1

    def scroll(self, n: int, up: bool = True) -> None:
        region = self.buf[self.top : self.bot + 1]
        n = min(n, len(region))
        blank = [[" "] * self.cols for _ in range(n)]
        region = region[n:] + blank if up else blank + region[: len(region) - n]
        self.buf[self.top : self.bot + 1] = region

    def ctl(self, c: str) -> None:
        if c == "\r":
            self.x = 0
        elif c in "\n\x0b\x0c":
            self.linefeed()
        elif c == "\b":
            self.x = max(0, min(self.x, self.cols - 1) - 1)
        elif c == "\t":
            self.x = min(self.cols - 1, (self.x // 8 + 1) * 8)

    def esc(self, c: str) -> None:
        if c == "7":
            self.saved = (self.x, self.y)
        elif c == "8":
            self.x, self.y = self.saved
        elif c == "D":
            self.linefeed()
        elif c == "E":
            self.x = 0
            self.linefeed()
        elif c == "M":
            if self.y == self.top:
                self.scroll(1, up=False)
            elif self.y > 0:
                self.y -= 1
        elif c == "c":
            self.reset()

    def _blank_row(self) -> list[str]:
        return [" "] * self.cols

    def csi(self, priv: str, params: str, f: str) -> None:
        ps = [int(p) if p.isdigit() else 0 for p in params.replace(":", ";").split(";")]
        ps = ps if params else []
        a = ps[0] if ps else 0
        n = max(a, 1)
        if priv == "?":
            if f in "hl" and any(p in (47, 1047, 1049) for p in ps):
                if f == "h" and self.main is None:
                    self.main = (self.buf, self.x, self.y)
                    self.reset()
                elif f == "l" and self.main is not None:
                    self.buf, self.x, self.y = self.main
                    self.main = None
            return
        if priv:
            return
        row = self.buf[self.y]
        x = min(self.x, self.cols)
        if f in "Hf":
            self.y = min(max(a, 1), self.rows) - 1
            self.x = min(max(ps[1] if len(ps) > 1 else 1, 1), self.cols) - 1
        elif f == "A":
            self.y = max(self.top if self.y >= self.top else 0, self.y - n)
        elif f in "Be":
            self.y = min(self.bot if self.y <= self.bot else self.rows - 1, self.y + n)
        elif f in "Ca":
            self.x = min(self.cols - 1, self.x + n)
        elif f == "D":
            self.x = max(0, min(self.x, self.cols - 1) - n)
        elif f == "E":
            self.x, self.y = 0, min(self.rows - 1, self.y + n)
        elif f == "F":
            self.x, self.y = 0, max(0, self.y - n)
        elif f in "G`":
            self.x = min(n, self.cols) - 1
        elif f == "d":
            self.y = min(n, self.rows) - 1
        elif f == "J":
            if a == 0:
                row[x:] = [" "] * (self.cols - x)
                for r in range(self.y + 1, self.rows):
                    self.buf[r] = self._blank_row()
            elif a == 1:
                row[: x + 1] = [" "] * min(x + 1, self.cols)
                for r in range(self.y):
                    self.buf[r] = self._blank_row()
            else:
                self.buf = [self._blank_row() for _ in range(self.rows)]
        elif f == "K":
            if a == 0:
                row[x:] = [" "] * (self.cols - x)
            elif a == 1:
                row[: x + 1] = [" "] * min(x + 1, self.cols)
            else:
                self.buf[self.y] = self._blank_row()
        elif f == "X":
            row[x : x + n] = [" "] * len(row[x : x + n])
        elif f == "@":
            row[x:x] = [" "] * n
            del row[self.cols :]
        elif f == "P":
            del row[x : x + n]
            row.extend([" "] * (self.cols - len(row)))
        elif f in "LM" and self.top <= self.y <= self.bot:
            saved_top, self.top = self.top, self.y
            self.scroll(n, up=(f == "M"))
            self.top = saved_top
        elif f == "S":
            self.scroll(n)
        elif f == "T":
            self.scroll(n, up=False)
        elif f == "r":
            top = max(a, 1) - 1
            bot = (ps[1] if len(ps) > 1 and ps[1] else self.rows) - 1
            if top < bot < self.rows:
                self.top, self.bot = top, bot
            self.x = self.y = 0
        elif f == "s":
            self.saved = (self.x, self.y)
        elif f == "u":
            self.x, self.y = self.saved


# Terminal queries that xterm answers. DECRQM (mode queries, what Textual sends) is left to
# the caller: the dashboard benchmark answers it only when asked to (--answer-queries).
QUERY = re.compile(
    rb"\x1b\[(?P<dsr>\??[56])n"  # DSR status / cursor position report (CPR)
    rb"|\x1b\[(?P<da>[>=]?)0?c"  # primary / secondary / tertiary device attributes
    rb"|\x1b\[>0?q"  # XTVERSION
    rb"|\x1b\[(?P<winop>1[48])t"  # text area size in pixels / characters
    rb"|\x1b\](?P<osc>1[01]);\?(?:\x07|\x1b\\)"  # foreground / background colour
    rb"|\x1bP\+q(?P<tcap>[0-9a-fA-F;]*)\x1b\\"  # XTGETTCAP
)


class Responder:
    """Finds queries in the output stream (also across chunk boundaries) and builds the
    replies xterm would send. ``cursor`` gives the (x, y) for cursor position reports."""

    def __init__(self, cols: int, rows: int, cursor: Callable[[], tuple[int, int]]) -> None:
        self.cols, self.rows, self.cursor = cols, rows, cursor
        self.tail = b""
        self.count = 0

    def feed(self, data: bytes) -> bytes:
        buf = self.tail + data
        out = []
        last = 0
        for m in QUERY.finditer(buf):
            last = m.end()
            if m.end() <= len(self.tail):
                continue  # answered with the previous chunk
            self.count += 1
            if m.group("dsr"):
                if m.group("dsr").endswith(b"5"):
                    out.append(b"\x1b[0n")
                else:
                    x, y = self.cursor()
                    out.append(f"\x1b[{y + 1};{x + 1}R".encode())
            elif m.group("da") is not None:
                secondary = m.group("da") == b">"
                out.append(b"\x1b[>41;390;0c" if secondary else b"\x1b[?64;1;2;6;9;15;18;21;22c")
            elif m.group("winop"):
                if m.group("winop") == b"18":
                    out.append(f"\x1b[8;{self.rows};{self.cols}t".encode())
                else:
                    out.append(f"\x1b[4;{self.rows * 16};{self.cols * 8}t".encode())
            elif m.group("osc"):
                color = "ffff/ffff/ffff" if m.group("osc") == b"10" else "0000/0000/0000"
                out.append(f"\x1b]{m.group('osc').decode()};rgb:{color}\x1b\\".encode())
            elif m.group("tcap") is not None:
                out.append(b"\x1bP0+r" + m.group("tcap") + b"\x1b\\")  # "not known"
            else:
                out.append(b"\x1bP>|xterm(390)\x1b\\")
        rest = buf[last:]
        self.tail = rest[-64:] if b"\x1b" in rest[-64:] else b""
        return b"".join(out)


def spawn_in_pty(
    command: list[str], *, columns: int, rows: int, env: dict[str, str], cwd: str | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``command`` as a session leader whose controlling terminal is a new
    ``columns``x``rows`` pty, as a terminal emulator would; returns it and the master side."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    def controlling_tty() -> None:  # in the child, after setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        child = subprocess.Popen(
            command,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env=env,
            close_fds=True,
            start_new_session=True,
            preexec_fn=controlling_tty,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return child, master
