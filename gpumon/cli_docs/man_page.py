"""The man page, gpumon(1): the options from the parser, the config keys and variables from
:data:`gpumon.config.SETTINGS`, the rest written here. Its date is the release's
(:data:`RELEASE_DATE`), or ``SOURCE_DATE_EPOCH``'s where a reproducible build sets it: the same
gpumon, the same page. Text lines are filled to 80 bytes, so that ``mandoc -Tlint`` is quiet.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping
from datetime import datetime, timezone

from gpumon.cli_docs.model import Command, Option
from gpumon.config import SETTINGS
from gpumon.config.files import DEFAULT_CONFIG_DIRS

#: The day (ISO 8601) of the release of the version pyproject.toml names: set with the version
#: (RELEASING.md), which is written nowhere else.
RELEASE_DATE = "2026-11-28"

#: The repository's address: pyproject.toml's [project.urls] Repository.
HOMEPAGE = "https://github.com/gpumon-tui/gpumon-tui"

#: Variables that are not settings, and what gpumon does with them.
_ENVIRONMENT = (
    ("NO_COLOR", "set and not empty: no colours in the text output, whatever FORCE_COLOR "
     "says (the dashboard draws in monochrome)"),
    ("FORCE_COLOR", "set and not empty (any value): colours in the text output also into a "
     "pipe; --color never still wins"),
    ("COLUMNS", "on a terminal, the width the text output of once fits (default: the "
     "terminal's; piped, nothing is cut)"),
    ("TERM", "dumb: the dashboard refuses to start (use once or status)"),
    ("GPUMON_ASCII", "1: bars and borders in ASCII, as without a UTF-8 locale"),
    ("CUDA_VISIBLE_DEVICES", "the GPUs --only-visible shows, read as CUDA reads it"),
    ("XDG_CONFIG_HOME", "where the user's config file is (default ~/.config; a relative "
     "path is ignored)"),
    ("XDG_CONFIG_DIRS", f"where the system-wide config files are (default "
     f"{DEFAULT_CONFIG_DIRS}; the first directory wins, relative entries are ignored)"),
)  # fmt: skip


def man_page(program: Command, version: str, environ: Mapping[str, str] = os.environ) -> str:
    """gpumon(1) in roff (``man -l`` shows it), dated :func:`page_date`."""
    lines = [
        f'.TH GPUMON 1 "{page_date(environ)}" "gpumon {_escape(version)}" "User Commands"',
        ".SH NAME",
        f"gpumon \\- {_escape(_sentence(program.description))}",
        ".SH SYNOPSIS",
        ".B gpumon",
        "[\\fIOPTIONS\\fR]",
        ".br",
        ".B gpumon",
        "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fICOMMAND OPTIONS\\fR]",
        ".SH DESCRIPTION",
        _escape(program.description),
        ".PP",
        _escape(program.epilog),
        ".SH OPTIONS",
        *_options(program.options),
        ".SH COMMANDS",
    ]
    shared = set(program.options)
    for command in program.subcommands:
        own = tuple(option for option in command.options if option not in shared)
        also = [
            option.flags[-1]
            for option in command.options
            if option in shared and "--help" not in option.flags
        ]
        lines += [f'.SS "gpumon {command.name}"', _escape(command.description)]
        if also:
            lines += [".PP", _escape("Also takes " + ", ".join(also) + ", as above.")]
        lines += _options(own)
    lines += [".SH CONFIGURATION", *_configuration(), ".SH ENVIRONMENT", *_environment()]
    lines += [
        ".SH FILES",
        ".TP",
        "\\fI$XDG_CONFIG_HOME/gpumon/config.toml\\fR, \\fI~/.config/gpumon/config.toml\\fR",
        _escape(
            "The user's settings (or the file --config names): TOML, one key per setting; "
            "gpumon --print-config prints them all. Read only when it belongs to the user "
            "or root and no one else may write it or a directory above it."
        ),
        ".TP",
        f"\\fI{DEFAULT_CONFIG_DIRS}/gpumon/config.toml\\fR",
        _escape(
            "System-wide settings, one file in each directory of XDG_CONFIG_DIRS, under "
            "the user's file (the user's wins); the same checks."
        ),
        ".SH EXIT STATUS",
        _escape(
            "0 on success; 1 when there is no NVIDIA driver to read (once, status, export), "
            "a probe step failed, or too few GPUs qualified (pick); 2 for bad options or "
            "settings, each one line on stderr naming the file, variable or option."
        ),
        ".SH SEE ALSO",
        "\\fBnvidia\\-smi\\fR(1), " + _escape(f"{HOMEPAGE}#readme"),
        "",
    ]
    return "\n".join(_filled(lines))


def page_date(environ: Mapping[str, str]) -> str:
    """``SOURCE_DATE_EPOCH``'s day in UTC where it is a number (reproducible-builds.org),
    else the release's day."""
    epoch = environ.get("SOURCE_DATE_EPOCH", "")
    if epoch.isdigit():
        return datetime.fromtimestamp(int(epoch), timezone.utc).date().isoformat()
    return RELEASE_DATE


def _filled(lines: list[str]) -> list[str]:
    """Text lines broken at spaces to at most 80 bytes (a word longer stays whole); requests
    and the tag line after ``.TP`` are left as they are."""
    filled: list[str] = []
    for line in lines:
        if line.startswith(".") or (filled and filled[-1] == ".TP") or len(line) <= 80:
            filled.append(line)
            continue
        # 78: room for the "\&" that a piece starting with "." or "'" gets.
        pieces = textwrap.wrap(line, 78, break_long_words=False, break_on_hyphens=False)
        filled += [_escape_start(piece) for piece in pieces]
    return filled


def _options(options: tuple[Option, ...]) -> list[str]:
    lines = []
    for option in options:
        flags = ", ".join(f"\\fB{_escape(flag)}\\fR" for flag in option.flags)
        if option.metavar is not None:
            value = f"\\fI{_escape(option.metavar)}\\fR"
            flags += f" [{value}]" if option.value_optional else f" {value}"
        lines += [".TP", flags, _escape(option.help)]
    return lines


def _configuration() -> list[str]:
    lines = []
    for spec in SETTINGS:
        if spec.key is not None:
            lines += [".TP", f"\\fB{_escape(spec.key)}\\fR", _escape(spec.described(flag=True))]
    return lines


def _environment() -> list[str]:
    lines = []
    for spec in SETTINGS:
        if spec.env is not None:
            meaning = f"as {spec.key} in the config file, and wins over it"
            if spec.flag:
                meaning += f"; {spec.flag} wins over it"
            lines += [".TP", f"\\fB{_escape(spec.env)}\\fR", _escape(meaning)]
    for name, meaning in _ENVIRONMENT:
        lines += [".TP", f"\\fB{_escape(name)}\\fR", _escape(meaning)]
    return lines


def _sentence(text: str) -> str:
    return text.split(". ")[0].rstrip(".")


def _escape(text: str) -> str:
    """Text for roff: backslashes and hyphens escaped, no line taken for a request."""
    return _escape_start(text.replace("\\", "\\e").replace("-", "\\-"))


def _escape_start(line: str) -> str:
    """A text line that roff would take for a request (a leading ``.`` or ``'``) made text."""
    return "\\&" + line if line.startswith((".", "'")) else line
