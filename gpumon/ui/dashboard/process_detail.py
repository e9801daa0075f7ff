"""``Enter`` on a process: who and what it is, where it came from, and how it behaved.

The full command line (wrapped, never cut below 64k characters), user, PID, the Slurm job and
container it runs in (from the sample: read once per process), start time, the parent chain up
to the launcher, GPU memory, host CPU and per-process SM utilisation over time (from the
store), and for the user's own processes the ``CUDA_VISIBLE_DEVICES`` / ``CUDA_DEVICE_ORDER``
it runs with. The host reads happen once, in a thread, when the screen opens
(:mod:`gpumon.sources.host.details`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from gpumon.data import format as fmt
from gpumon.data.model import GpuProcess, Sample
from gpumon.sampling.store import Store
from gpumon.sources.host.details import CUDA_VARIABLES, ProcessDetails
from gpumon.ui.dashboard.store_screen import StoreScreen
from gpumon.ui.widgets.gpu_fields import Piece, append_chart, chart_width, fitted_line
from gpumon.ui.widgets.graphs import bucketed, chart
from gpumon.ui.widgets.keys_footer import KeysFooter
from gpumon.ui.widgets.text_lines import TextLines

ProcessKey = tuple[int, int]


def find(sample: Sample | None, key: ProcessKey) -> GpuProcess | None:
    if sample is None:
        return None
    return next((process for process in sample.processes if process.key == key), None)


def wrap_cells(text: str, width: int) -> list[str]:
    """``text`` in pieces of at most ``width`` terminal cells, breaking at spaces where it
    can and inside a word where it must: every character is kept, in order."""
    pieces: list[str] = []
    line = ""
    for word in text.split(" "):
        candidate = word if not line else f"{line} {word}"
        if fmt.cell_len(candidate) <= width:
            line = candidate
            continue
        if line:
            pieces.append(line)
        line = word
        while fmt.cell_len(line) > width:  # a word longer than the line: break inside it
            cut = width
            while cut > 1 and fmt.cell_len(line[:cut]) > width:
                cut -= 1
            pieces.append(line[:cut])
            line = line[cut:]
    pieces.append(line)
    return pieces


def _notice(
    pid: int, process: GpuProcess | None, details: ProcessDetails | None, simulated: bool
) -> str | None:
    """What the identity says first, when the host cannot tell about the PID."""
    if details is None:
        return "Reading /proc ..."
    if simulated:
        return "A simulated process (DEMO): there is no host process to read."
    if process is not None and process.exited:
        return (
            f"PID {pid} has exited: NVML still lists it (its list lags, or the driver is "
            "still freeing its memory)."
        )
    if not details.visible:
        reason = "not visible here" if process is not None and not process.visible else "gone"
        return (
            f"PID {pid} is {reason}: NVML reports it, but this PID namespace has no such "
            "process (gpumon in a container without --pid=host), or it has ended."
        )
    return None


def render_identity(
    key: ProcessKey,
    process: GpuProcess | None,
    details: ProcessDetails | None,
    now_s: float,
    simulated: bool = False,
    width: int = 80,
) -> Text:
    """Command, user, start time, parents, CUDA variables: what the host says of the PID.
    The command line is wrapped at ``width`` cells, never cut."""
    gpu_index, pid = key
    text = Text()
    notice = _notice(pid, process, details, simulated)
    if notice is not None:
        for part in wrap_cells(notice, max(10, width)):
            text.append(part + "\n", "dim" if details is None else "bold")
    command = (details.command if details and details.visible else None) or (
        process.command if process else None
    )
    text.append("Command\n", "bold")
    for part in wrap_cells(command or fmt.NA, max(10, width - 2)):
        text.append(f"  {part}\n")
    user = (details.user if details and details.visible else None) or (
        process.user if process else None
    )
    _append_fields(
        text, [("User     ", user or fmt.NA), ("PID ", str(pid)), ("GPU ", str(gpu_index))], width
    )
    _append_fields(text, _placement(process), width)
    if details is not None and details.visible and details.started_at_s is not None:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(details.started_at_s))
        ago = f"({fmt.duration(now_s - details.started_at_s, precise=True)} ago)"
        _append_fields(text, [("Started  ", started), ("", ago)], width, gap="  ")
    if details is not None and details.visible:
        text.append("Launched by\n", "bold")
        if not details.ancestors:
            text.append("  (no parent but init)\n", "dim")
        for depth, ancestor in enumerate(reversed(details.ancestors)):
            who = ancestor.user or fmt.NA
            text.append(f"  {'  ' * depth}{ancestor.pid} ({who}) {ancestor.command or fmt.NA}\n")
        text.append(f"  {'  ' * len(details.ancestors)}{pid}: this process\n", "dim")
        text.append("CUDA     ", "bold")
        if details.cuda_environment is None:
            what = "environment not readable" if details.own else "another user's process"
            text.append(f"not shown ({what})\n", "dim")
        else:
            parts: list[tuple[str, str | Text]] = [
                ("", f"{name}={value if value is not None else '(not set)'}")
                for name, value in details.cuda_environment.items()
                if name in CUDA_VARIABLES
            ]
            _append_fields(text, parts, width - 9, gap="  ")
    return text


def _append_fields(
    text: Text, fields: list[tuple[str, str | Text]], width: int, gap: str = "    "
) -> None:
    """``label value`` fields on one line, ``gap`` apart; a field that would pass ``width``
    starts the next line instead (a field is never cut). Labels are bold."""
    used = 0
    for number, (label, value) in enumerate(fields):
        cells = fmt.cell_len(label) + fmt.cell_len(value if isinstance(value, str) else value.plain)
        if number and used + len(gap) + cells > width:
            text.append("\n")
            used = 0
        elif number:
            text.append(gap)
            used += len(gap)
        text.append(label, "bold")
        if isinstance(value, str):
            text.append(value)
        else:
            text.append_text(value)
        used += cells
    text.append("\n")


def _placement(process: GpuProcess | None) -> list[tuple[str, str | Text]]:
    """``Slurm job 4812345    Container 3f2a9c1b7d4e``: ``none`` when the process is in
    none, N/A when its ``/proc/PID/cgroup`` is not here to read (not visible, or unknown)."""
    fields: list[tuple[str, str | Text]] = []
    for label, value in (
        ("Slurm job ", process.job_id if process else None),
        ("Container ", process.container_id if process else None),
    ):
        if process is None or not process.visible:
            fields.append((label, fmt.NA))
        elif value is None:
            fields.append((label, Text("none", "dim")))
        else:
            fields.append((label, value))
    return fields


def render_history(
    store: Store, key: ProcessKey, width: int, ascii_only: bool = False, color: str = "green"
) -> Text:
    """GPU memory, SM utilisation and host CPU over the time the process has been seen
    (``color``: the charts', the theme's success colour)."""
    text = Text(no_wrap=True, overflow="crop")  # a chart row never wraps
    width_cells = chart_width(width)
    graphs: tuple[tuple[str, str, Callable[[float], str], float | None], ...] = (
        ("GPU memory", "gpu_memory_bytes", lambda v: fmt.bytes_short(int(v)), None),
        ("SM utilisation", "sm_utilization_pct", lambda v: f"{v:.0f}%", 100.0),
        ("Host CPU", "cpu_pct", lambda v: f"{v:.0f}%", None),  # may pass 100 % (cores)
    )
    for title, field, show, fixed_top in graphs:
        values = store.process_history(key, field)
        known = [value for value in values if value is not None]
        now = fmt.NA if not values or values[-1] is None else show(values[-1])
        pieces: list[Piece] = [(f"{title}  ", "bold", 0), (now, "", 0)]
        if known:  # on a narrow screen the count goes first, then max: whole
            pieces.append((f"   max {show(max(known))}", "dim", 1))
            pieces.append((f"   ({len(values)} samples)", "dim", 2))
        text.append_text(fitted_line(pieces, width)).append("\n")
        top = fixed_top if fixed_top is not None else (max(known, default=0.0) or 1.0)
        if field == "cpu_pct":
            top = max(top, 100.0)
        # Whole buckets of samples, fixed to the sample numbers (see the GPU detail).
        per_column = max(1, -(-store.capacity // width_cells))
        columns = bucketed(values, store.sequence, per_column, width_cells)
        rows = chart(columns, width_cells, 2, 0.0, top, ascii_only=ascii_only)
        append_chart(text, rows, show(top), color, ascii_only)
    return text


class ProcessDetailScreen(StoreScreen):
    """One GPU process. ``Escape`` goes back."""

    TITLE_ID = "process-detail-title"

    def __init__(
        self,
        store: Store,
        key: ProcessKey,
        *,
        ascii_only: bool = False,
        read_details: Callable[[int, float | None], ProcessDetails] | None = None,
        chosen: GpuProcess | None = None,
    ) -> None:
        """``chosen``: the row Enter was pressed on: its start tells it from a later process
        on the same PID, and it is shown as it was listed should its PID already be another's."""
        super().__init__(store)
        self.key = key
        self.ascii_only = ascii_only
        self.details: ProcessDetails | None = None
        # The process as last listed: what the identity shows once it has left the GPU.
        self._last_seen: GpuProcess | None = chosen
        self._read_details = read_details
        self.ended = False
        #: The process's start (psutil's create time) once known (from the row chosen, else
        #: the first sample that lists it): a later process on the same PID and GPU is
        #: another process, not this one.
        self.created_s = None if chosen is None else chosen.create_time_s

    def compose(self) -> ComposeResult:
        yield Static(id="process-detail-title", markup=False)
        with VerticalScroll():
            yield TextLines(id="process-detail-identity")
            yield TextLines(id="process-detail-history")
        yield KeysFooter()

    def before_first_draw(self) -> None:
        latest = self.store.latest
        if latest is not None and latest.simulated:
            # A simulated PID is not a process here: never show a real one's details for it.
            self.details = ProcessDetails(self.key[1], visible=False)
            return
        process = find(latest, self.key)
        if process is not None and self._another_process(process):
            process = None  # the PID was reused since the row was drawn: read nothing of it
        if process is not None and self.created_s is None:
            self.created_s = process.create_time_s
        # Its start as the table knew it: a process now on that PID reads as gone.
        started = self.created_s
        elapsed_s = None if process is None else process.elapsed_s
        if started is None and latest is not None and elapsed_s is not None:
            started = latest.timestamp_s - elapsed_s
        self.run_worker(
            lambda: self._reader()(self.key[1], started), thread=True, group="process-details"
        )

    def _another_process(self, process: GpuProcess) -> bool:
        """Whether ``process``, listed under this screen's PID and GPU, started at another
        time than the process this screen shows: the PID was reused."""
        started = process.create_time_s
        return self.created_s is not None and started is not None and started != self.created_s

    def _reader(self) -> Callable[[int, float | None], ProcessDetails]:
        if self._read_details is not None:
            return self._read_details
        from gpumon.sources.host.details import read_process_details

        return read_process_details

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "process-details" and event.state is WorkerState.SUCCESS:
            self.details = event.worker.result
            self.refresh_from_store()

    def refresh_from_store(self) -> None:
        sample = self.store.latest
        process = find(sample, self.key)
        reused = process is not None and self._another_process(process)
        if reused:
            process = None
        # Gone from this sample (the last data is kept); NVML may list it again later.
        self.ended = sample is not None and process is None
        if process is not None:
            self._last_seen = process
            if self.created_s is None:
                self.created_s = process.create_time_s
        gpu_index, pid = self.key
        state = ""
        if reused:
            state = "  (ended: its PID is another process's now; last data kept)"
        elif self.ended:
            state = "  (no longer on the GPU: last data kept)"
        demo = "  DEMO (simulated)" if sample is not None and sample.simulated else ""
        self.show_title(f" Process {pid} on GPU {gpu_index}{demo}{state}")
        now_s = sample.timestamp_s if sample is not None else time.time()
        width = self.content_width()
        self.query_one("#process-detail-identity", TextLines).update(
            render_identity(
                self.key,
                self._last_seen,
                self.details,
                now_s,
                sample is not None and sample.simulated,
                width,
            )
        )
        if not self.ended:
            self.query_one("#process-detail-history", TextLines).update(
                render_history(
                    self.store,
                    self.key,
                    width,
                    self.ascii_only,
                    self.app.get_css_variables().get("success", "green"),
                )
            )
