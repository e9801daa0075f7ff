"""The probe panel: runs the torch probe on one GPU and shows its nine steps as they stream in.

The probe runs in a child process (:mod:`gpumon.probe.runner`); this widget owns it through a
Textual worker. Removing the panel, pressing ``r`` (rerun) or quitting the app cancels the
worker, which kills the child. Nothing here imports torch.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Input, Static
from textual.worker import Worker

from gpumon.data.format import short_uuid
from gpumon.probe import steps as S
from gpumon.probe.confirm import NextSample
from gpumon.probe.protocol import Done, Event, Hello, Holding, Request, StepEvent
from gpumon.probe.runner import ProbeOutcome, run_probe


class StepRow(Horizontal):
    """One step: status, number and title, value (and detail), duration."""

    def __init__(self, step: S.Step) -> None:
        super().__init__(id=f"probe-step-{step.id}", classes="probe-step -pending")
        self.step = step
        self.event: StepEvent | None = None
        self._composed = False

    def compose(self) -> ComposeResult:
        # markup=False everywhere: values such as "[PASS]" or a path with brackets are text.
        yield Static(f"[{S.PENDING_LABEL}]", classes="probe-status", markup=False)
        yield Static(f"{self.step.id}. {self.step.title}", classes="probe-title", markup=False)
        yield Static("", classes="probe-value", markup=False)
        yield Static("", classes="probe-duration", markup=False)

    def on_mount(self) -> None:
        # On a loaded machine the panel may report before this row's own children exist.
        self._composed = True
        self.show(self.event)

    def show(self, event: StepEvent | None) -> None:
        """Show an event for this step; ``None`` resets the row to pending."""
        self.event = event
        if not self._composed:
            return
        status = "pending" if event is None else event.status
        for name in ("pending", *S.STATUSES):
            self.set_class(name == status, f"-{name}")
        label = S.PENDING_LABEL if event is None else S.STATUS_LABELS[event.status]
        self.query_one(".probe-status", Static).update(f"[{label}]")
        value = Text("" if event is None else event.value)
        if event is not None and event.detail and event.status != S.SKIP:
            value.append("\n" + event.detail, style="dim")
        self.query_one(".probe-value", Static).update(value)
        timed = event is not None and event.final and event.status != S.SKIP
        duration = S.duration_text(event.duration_ms) if timed and event else ""
        self.query_one(".probe-duration", Static).update(duration)


class ProbePanel(Vertical, can_focus=True):
    """Runs the torch probe on one GPU and shows each step live.

    Messages: :class:`Closed` (Escape; the app removes the panel), :class:`ProbeHolding` (the
    child holds its tensors: highlight its PID), :class:`Finished` (the verdict).
    """

    DEFAULT_CSS = """
    ProbePanel {
        height: auto;
        max-height: 100%;
        border: round $accent;
        border-title-color: $accent;
        background: $surface;
        padding: 0 1;
        overflow-y: auto;
    }
    ProbePanel:focus { border: round $accent-lighten-1; }
    ProbePanel { border-subtitle-color: $warning; border-subtitle-style: bold; }
    ProbePanel.-passed { border-subtitle-color: $success; }
    ProbePanel.-failed { border-subtitle-color: $error; }
    ProbePanel #probe-header { height: auto; text-style: bold; }
    ProbePanel #probe-python-row { height: 1; }
    ProbePanel #probe-python-label { width: 8; color: $text-muted; }
    ProbePanel #probe-python { width: 1fr; height: 1; border: none; padding: 0; }
    ProbePanel #probe-info { height: auto; color: $text-muted; }
    ProbePanel .probe-step { height: auto; }
    ProbePanel .probe-status { width: 7; }
    ProbePanel .probe-title { width: 31; }
    ProbePanel.-narrow .probe-title { width: 16; }
    ProbePanel .probe-value { width: 1fr; }
    ProbePanel .probe-duration { width: 8; text-align: right; color: $text-muted; }
    ProbePanel .-pass > .probe-status { color: $success; }
    ProbePanel .-fail > .probe-status { color: $error; text-style: bold; }
    ProbePanel .-fail > .probe-value { color: $error; }
    ProbePanel .-running > .probe-status { color: $warning; }
    ProbePanel .-skip, ProbePanel .-pending { color: $text-muted; }
    ProbePanel #probe-verdict { height: auto; margin-top: 1; text-style: bold; }
    ProbePanel #probe-verdict.-pass { color: $success; }
    ProbePanel #probe-verdict.-fail { color: $error; }
    ProbePanel #probe-keys { height: 1; color: $text-muted; }
    """

    BINDINGS = [
        Binding("escape", "close", "Close probe", tooltip="close the probe panel"),
        Binding("r", "rerun", "Rerun probe", tooltip="run the probe again"),
        Binding(
            "c",
            "copy_report",
            "Copy",
            tooltip="copy every step, with its paths, commands and URLs whole, to the clipboard",
        ),
        Binding(
            "i",
            "edit_python",
            "Interpreter",
            tooltip="choose the Python interpreter the probe runs in (e.g. your venv's)",
        ),
        # A short terminal cannot show all nine steps: the keyboard scrolls, not only the wheel.
        Binding("up,k", "scroll_up", "Up", show=False, tooltip="scroll up"),
        Binding("down,j", "scroll_down", "Down", show=False, tooltip="scroll down"),
        Binding("pageup", "page_up", "Page up", show=False, tooltip="a page up"),
        Binding("pagedown", "page_down", "Page down", show=False, tooltip="a page down"),
        Binding("home,g", "scroll_home", "Top", show=False, tooltip="to the top"),
        Binding("end,G", "scroll_end", "Bottom", show=False, tooltip="to the bottom"),
    ]

    class Closed(Message):
        """The user closed the panel; the app should remove it."""

        def __init__(self, panel: ProbePanel) -> None:
            super().__init__()
            self.panel = panel

    class ProbeHolding(Message):
        """The probe child holds its tensors on the GPU: the dashboard may highlight its PID."""

        def __init__(self, pid: int, gpu_uuid: str, cuda_index: int, allocated_bytes: int):
            super().__init__()
            self.pid = pid
            self.gpu_uuid = gpu_uuid
            self.cuda_index = cuda_index
            self.allocated_bytes = allocated_bytes

    class Finished(Message):
        """The probe ended (the child is gone): ``ok`` is the verdict."""

        def __init__(self, ok: bool, summary: str, pid: int | None) -> None:
            super().__init__()
            self.ok = ok
            self.summary = summary
            self.pid = pid

    def __init__(
        self,
        gpu_index: int | None,
        gpu_uuid: str | None,
        gpu_name: str | None,
        gpus: Sequence[tuple[int, str]] = (),
        python: str = sys.executable,
        size_mib: int = S.DEFAULT_SIZE_MIB,
        timeout_s: float = S.DEFAULT_TIMEOUT_S,
        next_sample: NextSample | None = None,
        child_command: Sequence[str] | None = None,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        """Args:
        gpu_index: NVML index of the GPU to probe.
        gpu_uuid: Its NVML UUID (the child finds the ``cuda:N`` with this UUID).
        gpu_name: Shown in the title.
        gpus: Every NVML GPU as ``(index, uuid)``, to name the others in the mapping step.
        python: Interpreter to probe; the user can change it in the panel.
        size_mib: GPU memory to allocate (capped at 10 % of the free memory by the child).
        timeout_s: The child is killed after this long.
        next_sample: Awaits the dashboard's next sample (for step 6); None skips step 6.
        child_command: Replaces the child's argv (tests run fake children).
        """
        super().__init__(name=name, id=id, classes=classes)
        self.gpu_index = gpu_index
        self.gpu_uuid = gpu_uuid
        self.gpu_name = gpu_name
        self.gpus = tuple((int(index), str(uuid)) for index, uuid in gpus)
        self.python = python
        self.size_mib = size_mib
        self.timeout_s = timeout_s
        self.next_sample = next_sample
        self.child_command = list(child_command) if child_command is not None else None
        self.child_pid: int | None = None
        self.outcome: ProbeOutcome | None = None
        self.events: list[Event] = []
        self._worker: Worker[ProbeOutcome] | None = None

    @property
    def running(self) -> bool:
        """True while a probe child may be alive."""
        return self._worker is not None and not self._worker.is_finished

    def compose(self) -> ComposeResult:
        yield Static(self._header(), id="probe-header", markup=False)
        with Horizontal(id="probe-python-row"):
            yield Static("Python", id="probe-python-label")
            yield Input(self.python, id="probe-python", compact=True)
        yield Static("", id="probe-info", markup=False)
        for step in S.STEPS:
            yield StepRow(step)
        yield Static("", id="probe-verdict", markup=False)
        yield Static("r rerun  i interpreter  c copy  Esc close", id="probe-keys", markup=False)

    def _header(self) -> str:
        parts = ["Torch probe"]
        if self.gpu_index is not None:
            parts.append(f"GPU {self.gpu_index}")
        if self.gpu_name:
            parts.append(self.gpu_name)
        if self.gpu_uuid:
            parts.append(short_uuid(self.gpu_uuid))
        return " - ".join(parts)

    def on_resize(self) -> None:
        # Below 80 columns the titles wrap, leaving the values room to be read.
        self.set_class(self.size.width < 80, "-narrow")

    def on_mount(self) -> None:
        self.border_title = "Probe"
        self.focus()
        self.start()

    def start(self) -> None:
        """(Re)start the probe; a probe still running is cancelled and its child killed."""
        self.outcome = None
        self.child_pid = None
        self.events = []
        for row in self.query(StepRow):
            row.show(None)
        self._set_info(f"starting {self.python} ...")
        self._set_verdict("Running ...", None)
        self._worker = self.run_worker(
            self._probe(), name="probe", group="probe", exclusive=True, exit_on_error=False
        )

    async def _probe(self) -> ProbeOutcome:
        request = Request(
            gpu_uuid=self.gpu_uuid,
            gpu_index=self.gpu_index,
            cuda_index=0 if self.gpu_uuid is None and self.gpu_index is None else None,
            gpus=self.gpus,
            size_mib=self.size_mib,
        )
        outcome = await run_probe(
            request,
            python=self.python,
            timeout_s=self.timeout_s,
            next_sample=self.next_sample,
            on_event=self._on_event,
            command=self.child_command,
        )
        self.outcome = outcome
        self.post_message(self.Finished(outcome.ok, outcome.summary, outcome.pid))
        return outcome

    def _on_event(self, event: Event) -> None:
        # The worker runs on the app's event loop, so touching widgets here is safe.
        self.events.append(event)
        if isinstance(event, Hello):
            self.child_pid = event.pid
            self._set_info(
                f"child PID {event.pid}, Python {event.python_version}; "
                f"{self.size_mib} MiB, timeout {self.timeout_s:g} s"
            )
        elif isinstance(event, StepEvent):
            row = self.query_one(f"#probe-step-{event.step}", StepRow)
            row.show(event)
            if event.status == S.RUNNING:
                self._set_verdict(f"Running step {event.step}: {event.title} ...", None)
                # Follow the probe in a short panel, once the new text is laid out.
                self.call_after_refresh(self.scroll_to_widget, row, animate=False)
        elif isinstance(event, Holding):
            self._set_info(
                f"child PID {event.pid} holds {event.allocated_bytes / 2**20:.0f} MiB "
                f"on cuda:{event.cuda_index}"
            )
            self.post_message(
                self.ProbeHolding(
                    event.pid, event.gpu_uuid, event.cuda_index, event.allocated_bytes
                )
            )
        elif isinstance(event, Done):
            self._set_verdict(f"{'PASS' if event.ok else 'FAIL'}: {event.summary}", event.ok)
            self.call_after_refresh(self.scroll_end, animate=False)
            if self.child_pid is not None:
                self._set_info(f"child PID {self.child_pid} has exited")

    def _set_info(self, text: str) -> None:
        self.query_one("#probe-info", Static).update(text)

    def _set_verdict(self, text: str, ok: bool | None) -> None:
        verdict = self.query_one("#probe-verdict", Static)
        verdict.update(text)
        verdict.set_class(ok is True, "-pass")
        verdict.set_class(ok is False, "-fail")
        # Also on the border, where it shows however the panel is scrolled.
        self.border_subtitle = "running" if ok is None else ("PASS" if ok else "FAIL")
        self.set_class(ok is True, "-passed")
        self.set_class(ok is False, "-failed")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker is self._worker and event.worker.error is not None:
            error = event.worker.error
            self._set_verdict(f"FAIL: the probe runner failed: {error!r}", False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.python = event.value.strip() or sys.executable
        self.focus()
        self.start()

    def action_close(self) -> None:
        """Escape: leave the interpreter field, else ask the app to close the panel."""
        if self.query_one("#probe-python", Input).has_focus:
            self.focus()
            return
        self.cancel()
        self.post_message(self.Closed(self))

    def action_rerun(self) -> None:
        self.start()

    def action_copy_report(self) -> None:
        """``c``: every step as plain text on the clipboard (OSC 52: also over SSH and in
        tmux with set-clipboard), since a narrow panel folds a long path or URL."""
        self.app.copy_to_clipboard(self.report())
        self.app.notify("Probe steps copied to the clipboard", timeout=3)

    def report(self) -> str:
        """The probe's steps as plain text: one line per step, its detail indented below."""
        lines = [self._header()]
        for row in self.query(StepRow):
            event = row.event
            label = S.PENDING_LABEL if event is None else S.STATUS_LABELS[event.status]
            value = "" if event is None else event.value
            lines.append(f"[{label}] {row.step.id}. {row.step.title}: {value}".rstrip(": "))
            if event is not None and event.detail:
                lines.extend(f"    {line}" for line in event.detail.splitlines())
        return "\n".join(lines) + "\n"

    def action_edit_python(self) -> None:
        self.query_one("#probe-python", Input).focus()

    def cancel(self) -> None:
        """Stop the probe; the runner kills the child as the worker is cancelled."""
        if self._worker is not None:
            self._worker.cancel()

    def on_unmount(self) -> None:
        self.cancel()
