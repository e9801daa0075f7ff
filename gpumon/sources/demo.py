"""A simulated GPU server for `--demo`, tests, screenshots and benchmarks.

Deterministic: the state depends only on the seed and the number of samples taken, never on
the wall clock (the sample's timestamp comes from an injected clock). Every sample it makes
has ``simulated=True``, which every view labels as DEMO.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from gpumon.data.model import DriverInfo, GpuProcess, GpuStats, HostStats, ProcessKind, Sample

GIB = 1024**3
MIB = 1024**2

_GPU_NAME = "NVIDIA RTX A6000"
_MEMORY_TOTAL = 48 * GIB - 469 * MIB  # what NVML reports for a 48 GB board
_POWER_LIMIT_W = 300.0
_MEMORY_RESERVED = 469 * MIB
# As the NVML source, PCIe throughput is read every 5 s and repeated in between.
_PCIE_REFRESH_S = 5.0
_OTHER_USERS = ("alice", "bob", "chen", "dana", "emre", "farah")
_COMMANDS = (
    "python train.py --config configs/llama-7b.yaml --bf16",
    "python -m torch.distributed.run --nproc_per_node 2 finetune.py --lr 2e-5",
    "python eval.py --checkpoint runs/0412/ckpt-1800.pt",
    "/opt/conda/bin/python -m ipykernel_launcher -f kernel-3f2a.json",
    "python infer_server.py --port 8080 --max-batch 32",
    "python sweep.py --trial 17 --seed 3",
    "accelerate launch pretrain.py --model gpt2-medium",
    "python -u diffusion/train.py --res 512",
)
# Who runs where: these users submit their work through Slurm; notebooks run in containers
# (a JupyterHub spawner: in a Slurm job too for those users); the inference server is a
# long-running container of its own, never a job.
_SLURM_USERS = frozenset(("alice", "bob", "chen", "dana", "emre"))
_NOTEBOOK, _INFERENCE_SERVER = _COMMANDS[3], _COMMANDS[4]
#: From this sample on (after the detail snapshots' 60), one busy GPU's jobs compute nothing
#: and keep their memory, as a finished run's notebook would: the demo's idle holder.
QUIET_FROM_TICK = 61


@dataclass(slots=True)
class _SimProcess:
    gpu: int
    pid: int
    user: str
    command: str
    memory_bytes: int
    age_s: float
    cpu_base: float
    rss_bytes: int
    kind: ProcessKind = ProcessKind.COMPUTE
    visible: bool = True
    job_id: str | None = None
    container_id: str | None = None


@dataclass(slots=True)
class _SimGpu:
    index: int
    uuid: str
    load: float  # 0..1, the job's typical utilisation
    temperature: float
    power: float
    util: float
    energy_j: float = 0.0  # since the (simulated) driver was loaded
    pcie_rx_bytes_per_s: int = 0  # the last (simulated) PCIe reading
    pcie_tx_bytes_per_s: int = 0


class DemoSource:
    """A shared server with ``gpu_count`` GPUs and about ``process_count`` processes."""

    simulated = True

    def __init__(
        self,
        gpu_count: int = 4,
        *,
        seed: int = 0,
        process_count: int | None = None,
        current_user: str | None = None,
        clock: Callable[[], float] = time.time,
        tick_s: float = 1.0,
        churn: float = 0.01,
    ) -> None:
        """``churn``: how many processes end (and as many new ones, with new PIDs, start)
        per tick, on average: below 1 it is the probability that one does; 2.5 means two,
        plus a third half the time. The default is a quiet server; soak tests use a high
        churn to put thousands of distinct PIDs through the views."""
        if gpu_count < 1:
            raise ValueError("a demo server needs at least one GPU")
        if process_count is not None and process_count < 0:
            raise ValueError("a demo server cannot have a negative number of processes")
        if not 0 <= churn < math.inf:  # also refuses NaN
            raise ValueError("churn is a number of processes per tick, 0 or more")
        self._churn = churn
        self._random = random.Random(seed)
        self._clock = clock
        self._tick_s = tick_s
        self._ticks = 0
        self._load: list[float] | None = None
        self._next_pid = 201_000 + self._random.randrange(1000)
        self._current_user = _login_name() if current_user is None else current_user
        self._users = (*_OTHER_USERS, self._current_user)
        self._gpus = [self._new_gpu(index) for index in range(gpu_count)]
        # The last busy GPU but the display's: derived, not drawn (a seed's server stays).
        self._quiet_gpu = max((g.index for g in self._gpus[1:] if g.load > 0), default=None)
        self._processes: list[_SimProcess] = []
        wanted = process_count if process_count is not None else max(1, gpu_count * 3 // 2)
        self._target_processes = wanted
        if wanted:
            # GPU 0 drives a display, as on a workstation: a graphics process.
            self._processes.append(
                _SimProcess(
                    0,
                    2113,
                    "root",
                    "/usr/lib/xorg/Xorg vt1 -displayfd 3",
                    186 * MIB,
                    864_000.0,
                    0.4,
                    120 * MIB,
                    ProcessKind.GRAPHICS,
                )
            )
        while len(self._processes) < wanted:
            self._processes.append(self._new_process())
        if gpu_count >= 2 and wanted >= 3:
            # A job in a container whose PID does not exist in our PID namespace.
            self._processes[-1].visible = False

    def _new_gpu(self, index: int) -> _SimGpu:
        uuid_hex = "".join(f"{self._random.randrange(16):x}" for _ in range(32))
        uuid = f"GPU-{UUID(uuid_hex)}"  # 8-4-4-4-12 hex digits
        # About a quarter of the GPUs are idle: "is this GPU free?" has an answer.
        load = (
            0.0 if self._random.random() < 0.25 and index > 0 else self._random.uniform(0.4, 0.98)
        )
        power = 25.0 + 250 * load
        # As if the driver had been loaded three days ago with this job running since.
        return _SimGpu(index, uuid, load, 34.0 + 40 * load, power, 100 * load, power * 3 * 86_400)

    def _new_process(self) -> _SimProcess:
        busy = [gpu for gpu in self._gpus if gpu.load > 0] or self._gpus
        # Fill every busy GPU once before doubling up, so no busy GPU shows no process;
        # then the one with the most free memory, as a scheduler (or a polite user) would.
        used = [0] * len(self._gpus)
        computing: set[int] = set()
        for process in self._processes:
            used[process.gpu] += process.memory_bytes
            if process.kind is ProcessKind.COMPUTE:
                computing.add(process.gpu)
        empty = [gpu for gpu in busy if gpu.index not in computing]
        gpu = empty[0] if empty else min(busy, key=lambda candidate: used[candidate.index])
        free = int(0.9 * _MEMORY_TOTAL) - used[gpu.index]
        memory = max(256 * MIB, min(self._process_memory(), free // MIB * MIB))
        pid = self._next_pid
        self._next_pid += self._random.randrange(3, 400)
        process = _SimProcess(
            gpu=gpu.index,
            pid=pid,
            user=self._random.choice(self._users),
            command=self._random.choice(_COMMANDS),
            memory_bytes=memory,
            age_s=self._random.uniform(60, 3 * 86_400),
            cpu_base=self._random.uniform(20, 140),
            rss_bytes=self._random.randrange(2, 12) * 512 * MIB,
        )
        process.job_id, process.container_id = _placement(process)
        return process

    def _process_memory(self) -> int:
        """Sized so a busy GPU ends up 30-90 % full, however many processes share it."""
        busy = max(1, sum(1 for gpu in self._gpus if gpu.load > 0))
        per_gpu = max(1.0, self._target_processes / busy)
        share = self._random.uniform(0.3, 0.8) / per_gpu
        return int(share * _MEMORY_TOTAL) // MIB * MIB

    def _advance(self) -> None:
        rng = self._random
        self._ticks += 1
        for gpu in self._gpus:
            # Jobs come and go, slowly: about one change per GPU every ten minutes.
            if rng.random() < 0.0015:
                gpu.load = 0.0 if gpu.load > 0 else rng.uniform(0.4, 0.98)
            target = 100 * gpu.load
            noise = rng.gauss(0, 6 if gpu.load else 0)  # drawn when quiet too: the same stream
            gpu.util = 0.0 if self._quiet(gpu) else min(100.0, max(0.0, target + noise))
            gpu.temperature += (34.0 + 0.42 * gpu.util - gpu.temperature) * 0.08
            gpu.power += (25.0 + 2.6 * gpu.util - gpu.power) * 0.3
            gpu.energy_j += gpu.power * self._tick_s
        used = [0] * len(self._gpus)
        for process in self._processes:
            used[process.gpu] += process.memory_bytes
        for process in self._processes:
            process.age_s += self._tick_s
            # Memory creeps up now and then, as caching allocators do, but a board never
            # holds more than it has: growth stops at 90 % of the GPU's memory.
            grow = 256 * MIB
            if rng.random() < 0.02 and used[process.gpu] + grow <= 0.9 * _MEMORY_TOTAL:
                process.memory_bytes += grow
                used[process.gpu] += grow
        # Churn (rare by default): a job ends and another starts, keeping the count steady.
        # The first process, the display server on GPU 0, never ends.
        if len(self._processes) > 1:
            replacements = int(self._churn)
            if rng.random() < self._churn - replacements:
                replacements += 1
            for _ in range(replacements):
                victim = rng.randrange(1, len(self._processes))
                self._processes.pop(victim)
                self._processes.append(self._new_process())

    def sample(self) -> Sample:
        """Advance the simulation one tick and snapshot it."""
        self._advance()
        # New readings derive from the simulation's state and draw no random numbers: the same
        # seed gives the same numbers as before they existed (screenshots stay identical).
        self._read_pcie()
        rng = self._random
        memory_by_gpu = [0] * len(self._gpus)
        computing_memory = [0] * len(self._gpus)
        for process in self._processes:
            if process.kind is ProcessKind.COMPUTE:
                computing_memory[process.gpu] += process.memory_bytes
        processes: list[GpuProcess] = []
        for process in self._processes:
            gpu = self._gpus[process.gpu]
            memory_by_gpu[gpu.index] += process.memory_bytes
            busy = gpu.load > 0 and process.kind is ProcessKind.COMPUTE
            cpu = process.cpu_base * (0.85 + 0.3 * rng.random()) if busy else 0.3
            cpu = 0.3 if self._quiet(gpu) else cpu
            processes.append(
                GpuProcess(
                    gpu_index=gpu.index,
                    gpu_uuid=gpu.uuid,
                    pid=process.pid,
                    kind=process.kind,
                    gpu_memory_bytes=process.memory_bytes,
                    user=process.user if process.visible else None,
                    command=process.command if process.visible else None,
                    cpu_pct=round(cpu, 1) if process.visible else None,
                    rss_bytes=process.rss_bytes if process.visible else None,
                    elapsed_s=process.age_s if process.visible else None,
                    visible=process.visible,
                    is_current_user=process.visible and process.user == self._current_user,
                    sm_utilization_pct=_process_sm_utilization(
                        gpu, process, computing_memory[gpu.index]
                    ),
                    # As from /proc/PID/cgroup: not readable for a PID that is not here.
                    job_id=process.job_id if process.visible else None,
                    container_id=process.container_id if process.visible else None,
                )
            )
        gpus = tuple(self._gpu_stats(gpu, memory_by_gpu[gpu.index]) for gpu in self._gpus)
        cores = 64
        busy_cpu = sum(p.cpu_pct or 0 for p in processes) / cores
        host = HostStats(
            hostname="demo-gpu-server",
            cpu_pct=round(min(100.0, 3.0 + busy_cpu + rng.uniform(0, 2)), 1),
            load_average=self._load_average(busy_cpu * cores / 100),
            memory_used_bytes=sum(p.rss_bytes for p in self._processes) + 23 * GIB,
            memory_total_bytes=512 * GIB,
            swap_used_bytes=0,
            swap_total_bytes=8 * GIB,
            cpu_count=cores,
        )
        return Sample(
            timestamp_s=self._clock(),
            host=host,
            driver=DriverInfo("550.54.15", "12.4", "12.550.54.15"),
            gpus=gpus,
            processes=tuple(processes),
            simulated=True,
        )

    def _quiet(self, gpu: _SimGpu) -> bool:
        """The demo's idle holder: its jobs keep their memory and compute nothing."""
        return gpu.index == self._quiet_gpu and self._ticks >= QUIET_FROM_TICK

    def _gpu_stats(self, gpu: _SimGpu, process_memory: int) -> GpuStats:
        busy = gpu.util > 5
        used = min(_MEMORY_TOTAL, process_memory + 4 * MIB)
        return GpuStats(
            index=gpu.index,
            uuid=gpu.uuid,
            name=_GPU_NAME,
            pci_bus_id=f"00000000:{0x17 + 0x14 * gpu.index:02X}:00.0",
            persistence_mode=True,
            display_active=gpu.index == 0,
            performance_state=2 if busy else 8,
            # Fan curves follow temperature, which moves slowly, not utilisation.
            fan_pct=int(30 + max(0.0, gpu.temperature - 34.0) * 1.1),
            temperature_c=round(gpu.temperature),
            temperature_slowdown_c=93,
            temperature_shutdown_c=98,
            power_draw_w=round(gpu.power, 1),
            power_limit_w=_POWER_LIMIT_W,
            energy_j=round(gpu.energy_j, 3),
            memory_used_bytes=used,
            memory_total_bytes=_MEMORY_TOTAL,
            memory_free_bytes=max(0, _MEMORY_TOTAL - _MEMORY_RESERVED - used),
            memory_reserved_bytes=_MEMORY_RESERVED,
            utilization_gpu_pct=round(gpu.util),
            utilization_memory_pct=round(gpu.util * 0.45),
            utilization_encoder_pct=0,
            # Every fourth GPU trains on video that NVDEC decodes.
            utilization_decoder_pct=round(gpu.util * 0.15) if gpu.index % 4 == 1 else 0,
            pcie_rx_bytes_per_s=gpu.pcie_rx_bytes_per_s,
            pcie_tx_bytes_per_s=gpu.pcie_tx_bytes_per_s,
            clock_graphics_mhz=1800 if busy else 210,
            clock_sm_mhz=1800 if busy else 210,
            clock_memory_mhz=8001 if busy else 405,
            clock_event_reasons=_clock_event_reasons(gpu),
            compute_mode="Default",
            ecc_errors_uncorrected_volatile=None,  # ECC off, as on most workstation boards
            pcie_replays=0,  # no memory temperature nor row remapping on a GDDR6 board
            xid_last=0,
            xid_count=0,
            mig_mode=None,  # not a MIG-capable board
        )

    def _read_pcie(self) -> None:
        """Take a new PCIe reading every 5 s, as the NVML source does: input batches go to
        the GPU (received) faster than results come back (transmitted)."""
        every = max(1, round(_PCIE_REFRESH_S / self._tick_s)) if self._tick_s > 0 else 1
        if (self._ticks - 1) % every:
            return
        for gpu in self._gpus:
            gpu.pcie_rx_bytes_per_s = (2_000 + round(gpu.util * 30_000)) * 1024
            gpu.pcie_tx_bytes_per_s = (1_000 + round(gpu.util * 4_000)) * 1024

    def _load_average(self, running: float) -> tuple[float, float, float]:
        """Like the kernel: exponential averages over 1, 5 and 15 min, updated every 5 s."""
        if self._load is None:
            self._load = [running * 0.98, running * 0.95, running * 0.9]
        elif self._ticks % 5 == 0:
            for index, minutes in enumerate((1, 5, 15)):
                decay = math.exp(-5 * self._tick_s / (60 * minutes))
                self._load[index] = self._load[index] * decay + running * (1 - decay)
        one, five, fifteen = self._load
        return (round(one, 2), round(five, 2), round(fifteen, 2))

    def close(self) -> None:
        pass


def _clock_event_reasons(gpu: _SimGpu) -> tuple[str, ...]:
    """Idle clocks when idle; the power cap when a busy GPU draws close to its limit."""
    if gpu.util <= 5:
        return ("gpu_idle",)
    if round(gpu.power, 1) >= 0.9 * _POWER_LIMIT_W:  # the power draw as shown
        return ("sw_power_cap",)
    return ()


def _placement(process: _SimProcess) -> tuple[str | None, str | None]:
    """The Slurm job and container a simulated process runs in: derived from its PID,
    user and command, never drawn from the random generator (so a seed's server is the
    same as before the ids existed). A job id is stable for the process's life."""
    job_id = container_id = None
    if process.user in _SLURM_USERS and process.command != _INFERENCE_SERVER:
        job_id = str(4_600_000 + process.pid)
    if process.command in (_NOTEBOOK, _INFERENCE_SERVER):
        container_id = hashlib.sha256(f"demo container {process.pid}".encode()).hexdigest()[:12]
    return job_id, container_id


def _process_sm_utilization(
    gpu: _SimGpu, process: _SimProcess, computing_memory: int
) -> int | None:
    """A busy GPU's utilisation shared by its compute processes in proportion to their memory;
    a little for the display server. On an idle GPU, as the NVML source reads it: 0 % for a
    compute process (no sample in the window), N/A for a graphics-only one."""
    if process.kind is not ProcessKind.COMPUTE:
        return 1 if gpu.util > 5 else None
    if gpu.util <= 5:
        return 0
    return round(gpu.util * process.memory_bytes / max(1, computing_memory))


def _login_name() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        # A container running under a uid with no passwd entry (and no $USER).
        return "you"
