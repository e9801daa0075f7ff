"""Whether the pieces of Textual that gpumon replaces are still the code it was written against.

Each of :data:`REPLACEMENTS` is on only where every Textual function it relies on has a
:func:`source_digest` its table accepts; otherwise Textual's own code runs. ``gpumon
--version`` says which are on (:func:`status_lines`), the help screen which are off
(:func:`off_line`). Textual's files are read, never imported. docs/textual-replacements.md.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path


@dataclass(frozen=True)
class Replacement:
    """One replaced piece of Textual: its name in ``gpumon --version``, and each Textual
    function or class it relies on (``"module:Qualified.name"``) to the
    :func:`source_digest` values it was tested with."""

    name: str
    follows: Mapping[str, frozenset[str]]


#: ``ChopsUpdate.render_segments`` (:mod:`gpumon.ui.exact_updates`): the spans and chops the
#: compositor hands it, and how a strip crops and renders its styles. Each table holds what
#: every Textual release from 8.0.0 to 8.2.8 has.
EXACT_UPDATES = Replacement(
    "exact updates",
    {
        "textual._compositor:ChopsUpdate.__init__": frozenset({"7a39f0282e962bd1"}),
        "textual._compositor:ChopsUpdate.render_segments": frozenset({"d9aada5116362f70"}),
        "textual._compositor:Compositor._regions_to_spans": frozenset({"9e2396c77483add4"}),
        "textual._compositor:Compositor.cuts": frozenset({"47fa04869d9d3c90"}),
        "textual._compositor:Compositor.render_partial_update": frozenset({"cd25a2bce076224a"}),
        "textual._compositor:Compositor._render_chops": frozenset({"991c016f779341e1"}),
        "textual.strip:Strip.crop": frozenset({"07e2f2e5262718f0"}),
        "textual.strip:Strip.render_ansi": frozenset({"656638af4d79cdce"}),
        "textual.strip:Strip.render": frozenset({"2cc9eb8f6b8477af"}),
    },
)

#: ``LinuxDriver.run_input_thread`` (:mod:`gpumon.ui.input_driver`): how the driver starts,
#: stops and closes its input thread, and the key parser's one timeout (the escape delay).
QUIET_INPUT = Replacement(
    "quiet input driver",
    {
        "textual.drivers.linux_driver:LinuxDriver.__init__": frozenset({"94a1fd675b7d8d3b"}),
        # 8.0.0-8.2.1; 8.2.2 sends the first size event sooner; 8.2.7 asks for more of
        # the kitty keyboard protocol. Neither touches the input thread.
        "textual.drivers.linux_driver:LinuxDriver.start_application_mode": frozenset(
            {"b3c3dfe0e64e2a0c", "8d7e3930db9a4286", "34643d9c433c2e5c"}
        ),
        "textual.drivers.linux_driver:LinuxDriver.disable_input": frozenset({"bfe8c2c41b7d462e"}),
        "textual.drivers.linux_driver:LinuxDriver.close": frozenset({"1da41337e33ce4e4"}),
        "textual.drivers.linux_driver:LinuxDriver._run_input_thread": frozenset(
            {"cf8d3e4724d8b354"}
        ),
        "textual.drivers.linux_driver:LinuxDriver.run_input_thread": frozenset(
            {"d4601095f1da1d91"}
        ),
        "textual._parser:Parser.feed": frozenset({"6b504c67f35e36be"}),
        "textual._parser:Parser.tick": frozenset({"c9cbb27844e80361"}),
        "textual._xterm_parser:XTermParser.__init__": frozenset({"ddd23d8294de4daf"}),
        "textual._xterm_parser:XTermParser.parse": frozenset({"b4a3dba8f2f2b97e"}),
    },
)

#: How ``Footer`` rebuilds (:mod:`gpumon.ui.widgets.keys_footer`): what it composes from
#: and when it recomposes.
KEYS_FOOTER = Replacement(
    "quiet footer",
    {
        "textual.widgets._footer:Footer.__init__": frozenset({"ed369571be1953d6"}),
        "textual.widgets._footer:Footer.compose": frozenset({"4043b01c32871a06"}),
        "textual.widgets._footer:Footer.bindings_changed": frozenset({"ffce901968586d84"}),
        "textual.widgets._footer:Footer.on_mount": frozenset({"fb96b45fc4a23680"}),
    },
)

#: ``CommandPalette._action_command_list`` (:class:`gpumon.ui.app.CommandPaletteTypedAhead`):
#: the ``KeyError`` a page key typed ahead of the list's first layout raises.
PALETTE_TYPED_AHEAD = Replacement(
    "palette type-ahead",
    {
        "textual.command:CommandPalette._action_command_list": frozenset({"175ef9cb1d78b3d2"}),
        "textual.widgets._option_list:OptionList._move_page": frozenset({"6f02d3a191c8e4fb"}),
    },
)

#: With ``NO_COLOR``, ``App._filters``' ``Monochrome`` (which still writes greys) swapped for
#: Textual's ``NoColor`` (:class:`gpumon.ui.app.MonitorApp`): where the list is built and read.
NO_COLOR_FILTER = Replacement(
    "NO_COLOR without greys",
    {
        "textual.app:App.__init__": frozenset({"e86181fcd11d409f", "b122413b733a3812"}),
        "textual.app:App.get_line_filters": frozenset({"62c8ee8f12bb9812"}),
    },
)

REPLACEMENTS = (EXACT_UPDATES, QUIET_INPUT, KEYS_FOOTER, PALETTE_TYPED_AHEAD, NO_COLOR_FILTER)


def textual_directory() -> Path | None:
    """Where the installed Textual package is, found without importing it."""
    module = sys.modules.get("textual")
    if module is not None and getattr(module, "__path__", None):
        return Path(next(iter(module.__path__)))
    try:
        spec = importlib.util.find_spec("textual")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def changed(replacement: Replacement) -> list[str]:
    """The functions ``replacement`` follows whose installed source it was not tested with
    (``"has no X"`` where one is missing or Textual has no source to read)."""
    directory = textual_directory()
    found = []
    for where, accepted in replacement.follows.items():
        module, qualname = where.split(":")
        digest = _installed_digest(directory, module, qualname)
        if digest is None:
            found.append(f"has no {qualname}")
        elif digest not in accepted:
            found.append(f"changed {qualname}")
    return found


def is_on(replacement: Replacement) -> bool:
    """Whether ``replacement`` is used: Textual's code is a version it was tested with."""
    return not changed(replacement)


def status_lines() -> list[str]:
    """One line per replacement: ``"exact updates: on"``, or off and why."""
    lines = []
    for replacement in REPLACEMENTS:
        differences = ", ".join(changed(replacement))
        why = differences and f"off (Textual {textual_version()} {differences})"
        lines.append(f"{replacement.name}: {why or 'on'}")
    return lines


def off_line(width: int) -> str | None:
    """The help screen's line, at most ``width`` characters, when a replacement is off; None
    when all are on."""
    off = [replacement.name for replacement in REPLACEMENTS if not is_on(replacement)]
    if not off:
        return None
    line = f"Textual {textual_version()}: {', '.join(off)} off; `gpumon --version` says why"
    if len(line) > width:
        line = f"Textual {textual_version()}: {len(off)} of gpumon's changes off; see --version"
    return line


def textual_version() -> str:
    """The installed Textual's version, from its package metadata (~10 ms: only on demand)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("textual")
    except PackageNotFoundError:
        return "(unknown version)"


@cache
def _installed_digest(directory: Path | None, module: str, qualname: str) -> str | None:
    if directory is None:
        return None
    path = directory.joinpath(*module.split(".")[1:]).with_suffix(".py")
    try:
        text = _read(path)
    except (OSError, UnicodeDecodeError):
        return None  # installed without its source
    return source_digest(text, qualname)


@cache
def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def source_digest(text: str, qualname: str) -> str | None:
    """The first 16 hex digits of the SHA-256 of ``qualname``'s source in the module source
    ``text``: its decorators and its lines, without comments, docstring, blank lines or the
    indentation of the whole; None where ``text`` has no such function or class."""
    headers = _headers(text)
    start, stop, indent = 0, len(text), 0
    names = qualname.split(".")
    for depth, name in enumerate(names):
        found = next(
            (
                header
                for header in headers
                if start <= header[2] < stop and header[0] == indent and header[1] == name
            ),
            None,
        )
        if found is None:
            return None
        _, _, first, after = found
        end = _block_end(text, after, indent)
        if depth < len(names) - 1:
            body = _BODY.search(text, after, end)
            if body is None:
                return None
            start, stop, indent = after, end, len(body.group(1))
            continue
        while True:  # its decorators
            previous = text.rfind("\n", 0, max(first - 1, 0)) + 1
            if first == 0 or not text.startswith(" " * indent + "@", previous):
                break
            first = previous
        lines = _without_docstring(text[first:end].splitlines())
        kept = (_without_comment(line).rstrip() for line in lines)
        margin = " " * indent
        normal = "\n".join(line.removeprefix(margin) for line in kept if line)
        return hashlib.sha256(normal.encode()).hexdigest()[:16]
    return None


_HEADER = re.compile(r"^( *)(?:async\s+def|def|class)\s+(\w+)[^\n]*\n?", re.M)
_BODY = re.compile(r"^( +)[^\s#]", re.M)


@cache
def _headers(text: str) -> list[tuple[int, str, int, int]]:
    """(indentation, name, start, end of its first line) of each ``def`` and ``class``."""
    return [
        (len(found.group(1)), found.group(2), found.start(), found.end())
        for found in _HEADER.finditer(text)
    ]


@cache
def _block_end_pattern(indent: int) -> re.Pattern[str]:
    return re.compile(rf"^ {{0,{indent}}}[^\s#)\]}}]", re.M)


def _block_end(text: str, start: int, indent: int) -> int:
    """Where the block whose body starts at ``start`` ends: the first line at ``indent`` or
    less that is not blank, a comment or a header's closing bracket."""
    end = _block_end_pattern(indent).search(text, start)
    return len(text) if end is None else end.start()


_DOCSTRING = re.compile("[rRbBuU]?('''|\"\"\")")


def _without_docstring(lines: list[str]) -> list[str]:
    """``lines`` of a definition without its docstring (the body's first line, if a string)."""
    header_end = next(
        (
            index
            for index, line in enumerate(lines)
            if _without_comment(line).rstrip().endswith(":")
        ),
        None,
    )
    if header_end is None:
        return lines
    first = next(
        (index for index in range(header_end + 1, len(lines)) if lines[index].strip()), None
    )
    if first is None:
        return lines
    opening = _DOCSTRING.match(lines[first].strip())
    if opening is None:
        return lines
    quote = opening.group(1)
    last = first
    rest = lines[first].strip()[opening.end() :]
    while quote not in rest and last + 1 < len(lines):
        last += 1
        rest = lines[last]
    return lines[:first] + lines[last + 1 :]


def _without_comment(line: str) -> str:
    """``line`` without a ``#`` comment: one after which no quote is left open."""
    position = line.find("#")
    while position >= 0:
        before = line[:position].replace("\\\\", "").replace("\\'", "").replace('\\"', "")
        if before.count("'") % 2 == 0 and before.count('"') % 2 == 0:
            return line[:position]
        position = line.find("#", position + 1)
    return line
