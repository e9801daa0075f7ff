"""The command line as data, read off the argparse parser (:func:`read_parser`), so that the
completions and the man page never disagree with ``--help``. argparse's private attributes
(``_actions``, ``_choices_actions``, stable since Python 3.2) are read here only.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass

#: Metavars whose values are paths: what the completions offer for them.
_FILE_METAVARS = frozenset({"PATH", "FILE"})
_DIRECTORY_METAVARS = frozenset({"DIR"})


@dataclass(frozen=True, slots=True)
class Option:
    """One option of a command: its spellings, its help as ``--help`` shows it, its value's
    name (``None``: a switch), the values argparse lists and what each means (``""``: not
    said; declared as ``choices={value: meaning}``), what a shell completes for it
    (``"file"``, ``"directory"`` or ``""``), whether the value may be left out (``--wait``)
    and whether it may be given more than once."""

    flags: tuple[str, ...]
    help: str
    metavar: str | None
    choices: tuple[str, ...] = ()
    choice_help: tuple[str, ...] = ()
    completes: str = ""
    value_optional: bool = False
    repeatable: bool = False

    @property
    def takes_value(self) -> bool:
        return self.metavar is not None and not self.value_optional


@dataclass(frozen=True, slots=True)
class Command:
    """The program or one of its subcommands: ``summary`` is the line ``gpumon --help``
    gives it, ``description`` and ``epilog`` its own ``--help``'s text above and below the
    options; options and subcommands in ``--help``'s order."""

    name: str
    summary: str
    description: str
    epilog: str
    options: tuple[Option, ...]
    subcommands: tuple[Command, ...] = ()

    def value_options(self) -> tuple[Option, ...]:
        return tuple(option for option in self.options if option.takes_value)


def read_parser(parser: argparse.ArgumentParser, name: str = "", summary: str = "") -> Command:
    """The command ``parser`` parses, with its subcommands (options with a suppressed help
    are left out, as ``--help`` leaves them out)."""
    formatter = parser._get_formatter()
    options: list[Option] = []
    subcommands: list[Command] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for sub_name, sub_parser in action.choices.items():
                subcommands.append(read_parser(sub_parser, sub_name, _unescape(helps[sub_name])))
        elif action.option_strings and action.help != argparse.SUPPRESS:
            options.append(_option(action, formatter._expand_help(action)))
    description = parser.description or ""
    return Command(
        name=name or parser.prog,
        summary=summary or description,
        description=description,
        epilog=parser.epilog or "",
        options=tuple(options),
        subcommands=tuple(subcommands),
    )


def _option(action: argparse.Action, help_text: str) -> Option:
    choices = tuple(str(choice) for choice in action.choices or ())
    meanings = action.choices if isinstance(action.choices, Mapping) else {}
    choice_help = tuple(" ".join(str(meanings.get(choice, "")).split()) for choice in choices)
    if action.nargs == 0:
        metavar = None
    elif isinstance(action.metavar, str):
        metavar = action.metavar
    elif choices:
        metavar = "{" + ",".join(choices) + "}"
    else:
        metavar = action.dest.upper()
    completes = ""
    if metavar in _FILE_METAVARS:
        completes = "file"
    elif metavar in _DIRECTORY_METAVARS:
        completes = "directory"
    return Option(
        flags=tuple(action.option_strings),
        help=" ".join(help_text.split()),
        metavar=metavar,
        choices=choices,
        choice_help=choice_help,
        completes=completes,
        value_optional=action.nargs == argparse.OPTIONAL,
        repeatable=isinstance(action, argparse._AppendAction),
    )


def _unescape(help_text: str) -> str:
    """A subparser's help as argparse shows it (``%%`` is a literal ``%``)."""
    return help_text.replace("%%", "%")


_ASIDE = re.compile(r"\s\([^()]*\)")
_CLAUSE_END = re.compile(r";\s|\s\(")


def short_help(text: str, limit: int = 72) -> str:
    """The first clause of a help text without its asides in parentheses, at most ``limit``
    characters (cut at the last comma that fits, else at a word): a completion menu's
    description."""
    clause = _CLAUSE_END.split(_ASIDE.sub("", text), maxsplit=1)[0].strip()
    if len(clause) <= limit:
        return clause
    if ", " in clause[:limit]:
        return clause[:limit].rsplit(", ", 1)[0]
    cut = clause[: limit - 3].rsplit(" ", 1)[0]
    return cut.rstrip(",;:") + "..."
