"""Shell completions for bash, zsh and fish, generated from the parser (:func:`script`):
the subcommands, the options of the command being typed (as argparse reads them), the
values of options with choices, and paths for ``PATH``, ``FILE`` and ``DIR`` values.
"""

from __future__ import annotations

from collections.abc import Callable

from gpumon.cli_docs.model import Command, Option, short_help

SHELLS = ("bash", "zsh", "fish")


def script(shell: str, program: Command) -> str:
    """The completion script for ``shell`` (one of :data:`SHELLS`)."""
    writers: dict[str, Callable[[Command], str]] = {"bash": bash, "zsh": zsh, "fish": fish}
    return writers[shell](program)


def _header(shell: str, comment: str = "#") -> str:
    return (
        f"{comment} {shell} completion for gpumon: generated from its command line by\n"
        f"{comment} `gpumon --print-completion {shell}`; regenerate it after an upgrade.\n"
    )


def _words(options: tuple[Option, ...]) -> str:
    return " ".join(flag for option in options for flag in option.flags)


# --- bash -------------------------------------------------------------------------------


def bash(program: Command) -> str:
    """A ``complete -F`` function for bash (3.2 and newer; ``compopt`` where it exists)."""
    names = [command.name for command in program.subcommands]
    lines = [
        _header("bash"),
        "_gpumon() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    local command="" before i prefix=""',
        "    # --opt=value: one word where COMP_WORDBREAKS lacks '=', else '=' is a word.",
        '    if [[ "$cur" == = ]]; then',
        '        cur=""',
        '    elif [[ "$prev" == = ]]; then',
        '        prev="${COMP_WORDS[COMP_CWORD-2]}"',
        '    elif [[ "$cur" == --*=* ]]; then',
        '        prev="${cur%%=*}" prefix="${cur%%=*}=" cur="${cur#*=}"',
        "    fi",
        "    # The subcommand: the first word naming one that is not an option's value.",
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        before="${COMP_WORDS[i-1]}"',
        '        [[ "$before" == = ]] && before="${COMP_WORDS[i-2]}"',
        '        case "${COMP_WORDS[i]}" in',
        f"            {'|'.join(names)})",
        '                case "$before" in',
        f"                    {_bash_alternatives(program.value_options())}) ;;",
        '                    *) command="${COMP_WORDS[i]}"; break ;;',
        "                esac ;;",
        "        esac",
        "    done",
        '    local options=""',
        '    case "$command" in',
    ]
    for command in (program, *program.subcommands):
        label = '""' if command is program else command.name
        lines.append(f'        {label}) options="{_words(command.options)}" ;;')
    lines += ["    esac", '    case "$command $prev" in']
    for command in (program, *program.subcommands):
        lines += _bash_values(command, "" if command is program else command.name)
    lines += [
        "    esac",
        '    if [[ -z "$command" && "$cur" != -* ]]; then',
        f'        options="{" ".join(names)} $options"',
        "    fi",
        '    COMPREPLY=($(compgen -W "$options" -- "$cur"))',
        "}",
        "complete -F _gpumon gpumon",
        "",
    ]
    return "\n".join(lines)


def _bash_alternatives(options: tuple[Option, ...]) -> str:
    return "|".join(flag for option in options for flag in option.flags) or "''"


def _bash_values(command: Command, name: str) -> list[str]:
    """The ``case`` branches that complete the value after one of ``command``'s options."""
    patterns: dict[str, list[str]] = {}
    for option in command.value_options():
        if option.choices:
            words = " ".join(option.choices)
            action = f'COMPREPLY=($(compgen -P "$prefix" -W "{words}" -- "$cur"))'
        elif option.completes:
            kind = "-d" if option.completes == "directory" else "-f"
            action = (
                "compopt -o filenames 2>/dev/null; "
                f'COMPREPLY=($(compgen -P "$prefix" {kind} -- "$cur"))'
            )
        else:
            action = "COMPREPLY=()"  # a number or a name to type: nothing to offer
        patterns.setdefault(action, []).extend(f'"{name} {flag}"' for flag in option.flags)
    return [f"        {'|'.join(words)}) {action}; return ;;" for action, words in patterns.items()]


# --- zsh --------------------------------------------------------------------------------


def zsh(program: Command) -> str:
    """An ``_arguments`` function for zsh's completion system (``#compdef gpumon``)."""
    lines = ["#compdef gpumon", _header("zsh"), "_gpumon() {"]
    lines += [
        '    local curcontext="$curcontext" state line',
        "    typeset -A opt_args",
        "    _arguments -C \\",
        *(f"        {spec} \\" for spec in _zsh_specs(program.options)),
        "        '1: :_gpumon_commands' \\",
        "        '*:: :->command'",
        '    [[ "$state" == command ]] || return',
        '    curcontext="${curcontext%:*:*}:gpumon-$words[1]:"',
        '    case "$words[1]" in',
    ]
    for command in program.subcommands:
        specs = " \\\n                ".join(_zsh_specs(command.options))
        lines.append(f"        {command.name}) _arguments \\\n                {specs} ;;")
    lines += ["    esac", "}", "", "_gpumon_commands() {", "    local -a commands=("]
    for command in program.subcommands:
        lines.append(
            f"        {_zsh_quote(command.name + ':' + _zsh_text(short_help(command.summary)))}"
        )
    lines += [
        "    )",
        "    _describe -t commands 'gpumon command' commands",
        "}",
        "",
        '_gpumon "$@"',
        "",
    ]
    return "\n".join(lines)


def _zsh_specs(options: tuple[Option, ...]) -> list[str]:
    specs = []
    for option in options:
        described = f"[{_zsh_text(short_help(option.help))}]"
        value = ""
        if option.metavar is not None:
            if any(option.choice_help):
                action = "((" + " ".join(_zsh_described(option)) + "))"
            elif option.choices:
                action = "(" + " ".join(option.choices) + ")"
            elif option.completes == "directory":
                action = "_files -/"
            elif option.completes == "file":
                action = "_files"
            else:
                action = " "
            colons = "::" if option.value_optional else ":"
            value = f"{colons}{_zsh_text(option.metavar)}:{action}"
        repeat = "*" if option.repeatable else ""
        for flag in option.flags:
            # "--by=": the value in the next word or after an "=" in the same one.
            equals = "=" if value and flag.startswith("--") else ""
            specs.append(_zsh_quote(f"{repeat}{flag}{equals}{described}{value}"))
    return specs


def _zsh_described(option: Option) -> list[str]:
    """``value\\:meaning`` words for ``((...))``, which zsh evaluates: all but letters
    and digits escaped."""
    return [
        _zsh_word(choice) + "\\:" + _zsh_word(meaning)
        for choice, meaning in zip(option.choices, option.choice_help, strict=True)
    ]


def _zsh_word(text: str) -> str:
    return "".join(c if c.isalnum() else "\\" + c for c in text)


def _zsh_text(text: str) -> str:
    """Text inside an ``_arguments`` spec: brackets and colons escaped."""
    for character in "\\[]:":
        text = text.replace(character, "\\" + character)
    return text


def _zsh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# --- fish -------------------------------------------------------------------------------


def fish(program: Command) -> str:
    """``complete`` commands for fish."""
    names = " ".join(command.name for command in program.subcommands)
    top = f"not __fish_seen_subcommand_from {names}"
    lines = [_header("fish"), "complete -c gpumon -f"]
    for command in program.subcommands:
        lines.append(
            f"complete -c gpumon -n {_fish_quote(top)} -a {command.name} "
            f"-d {_fish_quote(short_help(command.summary))}"
        )
    for command in (program, *program.subcommands):
        condition = top if command is program else f"__fish_seen_subcommand_from {command.name}"
        lines += [_fish_line(option, condition) for option in command.options]
    return "\n".join(lines) + "\n"


def _fish_line(option: Option, condition: str) -> str:
    parts = ["complete -c gpumon", f"-n {_fish_quote(condition)}"]
    for flag in option.flags:
        parts.append(f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}")
    if option.takes_value:
        if option.choices:
            parts.append(f"-x -a {_fish_quote(_fish_choices(option))}")
        elif option.completes == "directory":
            parts.append("-x -a '(__fish_complete_directories)'")
        elif option.completes == "file":
            parts.append("-r -F")
        else:
            parts.append("-x")
    parts.append(f"-d {_fish_quote(short_help(option.help))}")
    return " ".join(parts)


def _fish_choices(option: Option) -> str:
    """``-a``'s words: each choice with its own description after a tab (fish expands the
    words again, so each is quoted once more); a choice without one shows the option's."""
    return " ".join(
        choice + (f"\\t{_fish_quote(meaning)}" if meaning else "")
        for choice, meaning in zip(option.choices, option.choice_help, strict=True)
    )


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
