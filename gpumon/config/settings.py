"""Every setting, declared once: each :class:`Settings` field carries its :class:`Setting`
(check, config key, variable, flag, help, the commands that take it). The parser, the file
and environment checks, ``--print-config``, the man page, the completions, the README's
sample config and the tests' clean environment are all made from :data:`SETTINGS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

from gpumon.config import checks
from gpumon.config.checks import Number
from gpumon.data.format import HOT_MARGIN_C, WARM_MARGIN_C
from gpumon.data.model import MAX_INTERVAL_S, MIN_INTERVAL_S

#: The subcommands that read a cluster (``--prometheus`` and its access options).
CLUSTER_COMMANDS = frozenset({"once", "pick", "report"})
_DEMO_COMMANDS = frozenset({"once", "status", "export", "probe", "pick", "record", "watch"})
_HISTORY_COMMANDS = frozenset({"once", "export", "record", "report"})
#: gpumon record's seconds between samples unless its --interval says otherwise (the config
#: file's ``interval`` is the dashboard's 1 s, for eyes).
RECORD_INTERVAL_S = 10.0
# NVML supports at most 64 GPUs per host; a demo of more would simulate no real server.
MAX_DEMO_GPUS = 64


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: what a user may give it, from where, and how it is checked.

    Attributes:
        attribute: its :class:`Settings` field, whose default is ``default``.
        check: turns a given value into the one to use, or raises ``SettingsError``.
        help: what it does, in ``--help``'s words.
        key, env, flag: its config-file key (``None``: none), ``GPUMON_*`` variable and
            option, if any; ``metavar``: the option's value's name (``None``: a switch).
        commands: the subcommands that take the flag, also after their name (the dashboard
            takes them all); ``None``: an option of the top level, for every mode.
        command_help: a subcommand's own ``--help`` text for the flag, in place of ``help``.
        repeatable: the flag may be given more than once (its values add up).
        secret: never printed (``repr``, ``--print-config``, errors).
    """

    attribute: str
    default: Any
    check: Callable[[Any], Any]
    help: str
    key: str | None
    env: str | None
    flag: str | None
    metavar: str | None
    commands: frozenset[str] | None
    repeatable: bool
    secret: bool
    command_help: Mapping[str, str]

    def value_of(self, given: Any) -> Any:
        """``given`` checked; a flag's or a variable's text is read as the check's number."""
        if isinstance(given, str) and isinstance(self.check, Number):
            given = self.check.from_text(given)
        return self.check(given)

    def takes(self, command: str | None) -> bool:
        """Whether ``command`` (``None``: the dashboard) has the option of setting it."""
        return command is None or self.commands is None or command in self.commands

    def described(self, *, flag: bool = False) -> str:
        """The help with the bounds, the default, the config key (with ``flag``: the flag)
        and the variable."""
        notes = [self.check.what] if isinstance(self.check, Number) else []
        if self.default not in (None, ()) and self.default is not False:
            notes.append(f"default: {self.default:g}" if notes else f"default: {self.default}")
        elsewhere = self.flag if flag else (self.key and f"config: {self.key}")
        notes += [name for name in (elsewhere, self.env) if name]
        if not notes:
            return self.help
        if self.help.endswith(")"):  # one parenthesis: the help's own notes, then these
            return f"{self.help[:-1]}; {'; '.join(notes)})"
        return f"{self.help} ({'; '.join(notes)})"


_SPEC = "gpumon.setting"
T = TypeVar("T")


def _setting(
    default: T,
    check: Callable[[Any], Any],
    help: str,
    *,
    key: str | None = "",
    env: str | None = None,
    flag: str | None = None,
    commands: frozenset[str] | None = None,
    command_help: Mapping[str, str] | None = None,
    repeatable: bool = False,
    secret: bool = False,
) -> T:
    """A :class:`Settings` field and its :class:`Setting` (``key=""``: the field's name;
    ``flag``: the option and the name of its value, ``"--interval SECONDS"``)."""
    option, _, metavar = (flag or "").partition(" ")
    places = (key, env, option or None, metavar or None)
    own_help = command_help or {}
    spec = Setting("", default, check, help, *places, commands, repeatable, secret, own_help)
    return field(default=default, repr=not secret, metadata={_SPEC: spec})


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the user can set, one field per setting, and where each value came from:
    ``origins`` maps a field to a config file's path, a ``GPUMON_*`` variable or a ``--flag``
    (absent: the default); ``config_path`` and ``system_config_paths``: the files read."""

    interval_s: float = _setting(
        1.0,
        Number(float, MIN_INTERVAL_S, MAX_INTERVAL_S, "seconds from 0.25 to 60"),
        "refresh interval",
        key="interval",
        env="GPUMON_INTERVAL",
        flag="--interval SECONDS",
        commands=frozenset({"export", "record", "pick", "watch"}),
        command_help={
            "export": "seconds between samples (default: 1); scrapes read the latest sample",
            "record": f"seconds between samples (default: {RECORD_INTERVAL_S:g}); the database "
            "is --db, kept --history-days",
            "pick": "with --wait: look again this often (default: 1)",
            "watch": "look again this often (default: 1)",
        },
    )
    theme: str = _setting(
        "textual-dark",
        checks.theme,
        "the dashboard's colour theme (textual-light or ansi-light on a light terminal; a "
        "bad name lists them)",
        env="GPUMON_THEME",
        flag="--theme NAME",
    )
    time_seconds: bool = _setting(
        False,
        checks.boolean,
        "the process table's TIME to the second (5h17m04s; default 5h17m, <1m in the first "
        "minute, so cells change once a minute)",
        env="GPUMON_TIME_SECONDS",
        flag="--time-seconds",
    )
    probe_python: str | None = _setting(
        None,
        checks.interpreter,
        "Python interpreter for the torch probe (default: the one running gpumon)",
        env="GPUMON_PROBE_PYTHON",
        flag="--probe-python PATH",
    )
    temperature_hot_margin_c: int = _setting(
        HOT_MARGIN_C,
        Number(int, 0, 50, "degrees from 0 to 50"),
        "temperatures this close to the GPU's slowdown threshold are red, in every mode",
    )
    temperature_warm_margin_c: int = _setting(
        WARM_MARGIN_C, Number(int, 0, 80, "degrees from 0 to 80"), "and this close, yellow"
    )
    load_warn_pct: int = _setting(
        50, Number(int, 1, 100, "a percentage from 1 to 100"), "bars turn yellow from here"
    )
    load_hot_pct: int = _setting(
        80, Number(int, 1, 100, "a percentage from 1 to 100"), "and red from here"
    )
    # At most 2,400 points per reading are kept: 40 minutes at 1 s, 10 at 0.25 s.
    history_minutes: int = _setting(
        10,
        Number(int, 1, 40, "whole minutes from 1 to 40"),
        "how far back the dashboard's graphs and sparklines reach",
    )
    free_threshold_mib: int = _setting(
        1024,
        Number(int, 0, 1024 * 1024, "whole MiB from 0 to 1048576"),
        "a GPU with no process and less than this much memory in use is FREE",
        env="GPUMON_FREE_THRESHOLD_MIB",
        flag="--free-threshold MIB",
        commands=frozenset({"once", "status", "export", "pick", "watch"}),
    )
    readonly: bool = _setting(
        False,
        checks.boolean,
        "never signal a process: the dashboard's T, K and I keys are gone",
        flag="--readonly",
    )
    claims_dir: str = _setting(
        "/dev/shm/gpumon-claims",
        checks.directory,
        "the shared directory of pick's claims, an absolute path",
        env="GPUMON_CLAIMS_DIR",
        flag="--claims-dir DIR",
        commands=frozenset({"pick"}),
    )
    claim_seconds: int = _setting(
        120,
        Number(int, 1, 600, "whole seconds from 1 to 600"),
        "how long pick's claim on a GPU it printed lasts",
        env="GPUMON_CLAIM_SECONDS",
        flag="--claim-seconds SECONDS",
        commands=frozenset({"pick"}),
    )
    idle_min_memory_mib: int = _setting(
        1024,
        Number(int, 0, 1024 * 1024, "whole MiB from 0 to 1048576"),
        "only a process holding at least this much GPU memory can be idle",
        env="GPUMON_IDLE_MIN_MEMORY_MIB",
        flag="--idle-min-memory MIB",
        commands=frozenset({"export", "record", "report", "watch"}),
    )
    idle_below_pct: int = _setting(
        5,
        Number(int, 0, 100, "a whole percentage from 0 to 100"),
        "low utilisation: its SM utilisation at or below this",
        env="GPUMON_IDLE_BELOW_PCT",
        flag="--idle-below PCT",
        commands=frozenset({"once", "export", "record", "watch"}),
    )
    history_db: str | None = _setting(
        None,
        checks.file_path,
        "the history database (default: /var/lib/gpumon/history.db for root, else "
        "$XDG_STATE_HOME/gpumon/history.db, where readers use /var/lib/gpumon/history.db "
        "instead while that one is missing)",
        env="GPUMON_HISTORY_DB",
        flag="--db PATH",
        commands=_HISTORY_COMMANDS,
    )
    history_days: int = _setting(
        90,
        Number(int, 1, 3650, "whole days from 1 to 3650"),
        "keep per-minute history this long (hourly rows: a year)",
        env="GPUMON_HISTORY_DAYS",
        flag="--history-days DAYS",
        commands=frozenset({"export", "record"}),
    )
    # once shows how long a process has been idle from the history (export and record judge).
    idle_after_minutes: float = _setting(
        15.0,
        Number(float, 0.01, 10080, "minutes from 0.01 to 10080 (0.1 is 6 s)"),
        "a process is idle after this long at low utilisation",
        env="GPUMON_IDLE_AFTER_MINUTES",
        flag="--idle-after MINUTES",
        commands=frozenset({"export", "record", "watch"}),
    )
    prometheus_url: str | None = _setting(
        None,
        checks.url,
        "read a whole cluster from this Prometheus server (or Thanos, VictoriaMetrics, "
        "Mimir): http:// or https://, no credentials in it",
        env="GPUMON_PROMETHEUS_URL",
        flag="--prometheus URL",
        commands=CLUSTER_COMMANDS,
    )
    prometheus_headers: tuple[str, ...] = _setting(
        (),
        checks.headers,
        "an HTTP header for the Prometheus server, e.g. 'Authorization: Bearer TOKEN' "
        "(repeatable; never printed; other users can read a command line: the config "
        "file's prometheus_headers is safer)",
        flag="--prometheus-header 'NAME: VALUE'",
        commands=CLUSTER_COMMANDS,
        repeatable=True,
        secret=True,
    )
    prometheus_user: str | None = _setting(
        None,
        checks.user,
        "the Prometheus server's basic auth user (with prometheus_password)",
        env="GPUMON_PROMETHEUS_USER",
    )
    prometheus_password: str | None = _setting(
        None,
        checks.password,
        "and its password (never printed)",
        env="GPUMON_PROMETHEUS_PASSWORD",
        secret=True,
    )
    prometheus_ca_file: str | None = _setting(
        None,
        checks.file_path,
        "verify the Prometheus server's HTTPS certificate with the CA certificates in this "
        "PEM file (default: the system's)",
        env="GPUMON_PROMETHEUS_CA_FILE",
        flag="--prometheus-ca-file PATH",
        commands=CLUSTER_COMMANDS,
    )
    prometheus_timeout_s: float = _setting(
        5.0,
        Number(float, 0.5, 120, "seconds from 0.5 to 120"),
        "give up on a request to the Prometheus server after this long",
        env="GPUMON_PROMETHEUS_TIMEOUT",
        flag="--prometheus-timeout SECONDS",
        commands=CLUSTER_COMMANDS,
    )
    demo: bool = _setting(
        False,
        checks.boolean,
        "use a simulated GPU server (always labelled DEMO)",
        key=None,
        flag="--demo",
        commands=_DEMO_COMMANDS,
    )
    demo_gpus: int = _setting(
        4,
        Number(int, 1, MAX_DEMO_GPUS, f"a number of GPUs from 1 to {MAX_DEMO_GPUS}"),
        "number of simulated GPUs with --demo",
        key=None,
        flag="--demo-gpus N",
        commands=_DEMO_COMMANDS,
    )
    demo_processes: int | None = _setting(
        None,
        Number(int, 1, 4096, "a number of processes from 1 to 4096"),
        "number of simulated GPU processes with --demo (default: 1.5 per GPU)",
        key=None,
        flag="--demo-processes N",
        commands=_DEMO_COMMANDS,
    )
    only_gpus: tuple[str, ...] = _setting(
        (),
        checks.gpu_list,
        "only these GPUs at start: NVML indices, GPU-... or MIG-... UUIDs, comma-separated "
        "(e.g. 0,3)",
        key=None,
        flag="--only GPUS",
        commands=frozenset({"once", "pick"}),
    )
    only_visible: bool = _setting(
        False,
        checks.boolean,
        "only the GPUs CUDA_VISIBLE_DEVICES names (indices or UUIDs), as CUDA would see them",
        key=None,
        flag="--only-visible",
        commands=frozenset({"once", "pick"}),
    )
    # Not for pick: a process filter would make a busy GPU look free.
    user_filter: str | None = _setting(
        None,
        checks.user_name,
        "only this user's processes at start",
        key=None,
        flag="--user NAME",
        commands=frozenset({"once"}),
    )
    config_path: str | None = None
    system_config_paths: tuple[str, ...] = ()
    origins: Mapping[str, str] = field(default_factory=dict, compare=False)


#: Every setting, in the order of :class:`Settings` (``--help``'s and ``--print-config``'s).
SETTINGS: tuple[Setting, ...] = tuple(
    replace(
        item.metadata[_SPEC],
        attribute=item.name,
        key=item.name if item.metadata[_SPEC].key == "" else item.metadata[_SPEC].key,
    )
    for item in fields(Settings)
    if _SPEC in item.metadata
)
#: Config-file key -> its setting.
BY_KEY: dict[str, Setting] = {spec.key: spec for spec in SETTINGS if spec.key}
#: Settings field -> its setting.
BY_ATTRIBUTE: dict[str, Setting] = {spec.attribute: spec for spec in SETTINGS}
#: Every ``GPUMON_*`` variable gpumon names: the settings', ``GPUMON_ASCII`` (bars and
#: borders in ASCII, read where text is drawn) and ``GPUMON_GPUS`` (set for watch --exec).
VARIABLES = frozenset({spec.env for spec in SETTINGS if spec.env} | {"GPUMON_ASCII", "GPUMON_GPUS"})
