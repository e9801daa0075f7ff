"""Telling a user who is looking elsewhere: the terminal's bell and a desktop notification.

:func:`alert_sequence` is what the dashboard's alerts and ``gpumon watch`` write: BEL, then
OSC 9 and OSC 777, wrapped for tmux inside it: pure text, so both layers use it. Text from
other users loses every character that is not printable, so nothing can end an escape early.
More: docs/process-and-terminal.md.
"""

from __future__ import annotations

from gpumon.data.format import safe_text

ESC = "\x1b"
BEL = "\a"
#: A desktop notification is a line or two: longer text is cut.
MAX_TEXT_CHARS = 200


def notification_text(text: str) -> str:
    """``text`` as it may go into an escape: safe, printable, at most about 200 characters."""
    return "".join(char for char in safe_text(text, MAX_TEXT_CHARS) if char.isprintable())


def tmux_passthrough(sequence: str) -> str:
    """``sequence`` wrapped for tmux to hand to the terminal outside it: ``ESC P tmux;``, the
    sequence with every ESC doubled, ``ESC \\``."""
    return f"{ESC}Ptmux;{sequence.replace(ESC, ESC + ESC)}{ESC}\\"


def alert_sequence(title: str, body: str, *, tmux: bool = False) -> str:
    """The bell, then OSC 9 (``ESC ] 9 ; body BEL``) and OSC 777 (``ESC ] 777 ; notify ;
    title ; body BEL``), each wrapped for tmux with ``tmux``."""
    title = notification_text(title).replace(";", ",")  # OSC 777's fields end at ";"
    body = notification_text(body)
    escapes = [f"{ESC}]9;{body}{BEL}", f"{ESC}]777;notify;{title};{body}{BEL}"]
    if tmux:
        escapes = [tmux_passthrough(escape) for escape in escapes]
    return BEL + "".join(escapes)
