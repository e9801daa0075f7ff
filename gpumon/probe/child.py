"""The probe child: ``python -m gpumon.probe.child --request '<JSON>'`` (``--standalone``
probes ``cuda:0`` without a parent).

The only module that imports torch, inside :func:`main` after its ``hello`` line, so a
missing or broken torch is a step result. Never imports pynvml: it matches torch's UUIDs
against the NVML list the parent sent. Runs in the user's interpreter: Python 3.8 syntax and
the standard library only, apart from torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from gpumon.probe import child_io
from gpumon.probe import steps as S
from gpumon.probe.child_io import (
    EXIT_BAD_REQUEST,
    Channel,
    ParentWatch,
    StepRunner,
    error_text,
    mib,
)
from gpumon.probe.protocol import Done, Hello, Holding, ProtocolError, Request, decode_request
from gpumon.probe.steps import Outcome, uuid_key


def _is_device_mismatch(text: str) -> bool:
    """torch's "Expected all tensors to be on the same device" (and its older wording)."""
    lowered = text.lower()
    return "same device" in lowered or "expected device" in lowered


class Probe:
    """The steps, in order, sharing the state they build up (torch, the device, tensors)."""

    def __init__(self, request: Request, runner: StepRunner, channel: Channel) -> None:
        self.request = request
        self.runner = runner
        self.channel = channel
        self.torch: Any = None
        self.count = 0
        self.cuda_index = -1
        self.gpu_uuid = ""
        self.tensors: dict[str, Any] = {}

    # Step 1 --------------------------------------------------------------------------------
    def step_python(self) -> Outcome:
        python = sys.executable or "python"
        version = sys.version.split()[0]
        try:
            import torch
        except ImportError as error:
            if getattr(error, "name", None) == "torch":
                value = f"torch is not installed for {python} (Python {version})"
            else:
                value = f"import torch failed: {error_text(error)}"
            return Outcome(S.FAIL, value, child_io.install_advice(python))
        self.torch = torch
        return Outcome(S.PASS, f"Python {version} ({python}), torch {torch.__version__}")

    # Step 2 --------------------------------------------------------------------------------
    def step_build(self) -> Outcome:
        torch = self.torch
        build = getattr(torch.version, "cuda", None)
        driver, driver_problem = child_io.driver_cuda_version()
        driver_text = f"driver supports CUDA {driver}" if driver else driver_problem
        help_url = "https://pytorch.org/get-started/locally/"
        if getattr(torch.version, "hip", None):
            return Outcome(S.FAIL, f"ROCm build (HIP {torch.version.hip}), not CUDA", "")
        if build is None:
            return Outcome(
                S.FAIL,
                f"CPU-only build (torch.version.cuda is None); {driver_text}",
                f"This torch cannot use a GPU. Install a CUDA build of torch for "
                f"{sys.executable}: pick the command for your CUDA version at {help_url}",
            )
        if driver is None:
            return Outcome(S.FAIL, f"CUDA {build} build, but {driver_text}", "")
        if child_io.major_version(build) > child_io.major_version(driver):
            return Outcome(
                S.FAIL,
                f"CUDA {build} build, but the driver only supports CUDA {driver}",
                f"Update the NVIDIA driver, or install a torch built for CUDA {driver} "
                f"or older ({help_url}).",
            )
        return Outcome(S.PASS, f"CUDA {build} build; {driver_text}")

    # Step 3 --------------------------------------------------------------------------------
    def step_cuda(self) -> Outcome:
        import warnings

        torch = self.torch
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            available = bool(torch.cuda.is_available())
            self.count = int(torch.cuda.device_count()) if available else 0
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        order = os.environ.get("CUDA_DEVICE_ORDER")
        value = (
            f"is_available()={available}, device_count()={self.count}; "
            f"CUDA_VISIBLE_DEVICES={'(unset)' if visible is None else repr(visible)}, "
            f"CUDA_DEVICE_ORDER={order or '(unset)'}"
        )
        notes = [str(warning.message) for warning in caught]
        if self.count > 1 and order != "PCI_BUS_ID":
            notes.append(
                "CUDA_DEVICE_ORDER is not PCI_BUS_ID: torch numbers the GPUs fastest first, "
                "so cuda:N need not be nvidia-smi's GPU N (step 4 shows the mapping)."
            )
        detail = "\n".join(notes)
        if available and self.count > 0:
            return Outcome(S.PASS, value, detail)
        if getattr(torch.version, "cuda", None) is None:
            reason = "CUDA not available: CPU-only build"
        elif visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
            reason = f"CUDA not available: CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
        else:
            reason = "CUDA not available"
        return Outcome(S.FAIL, f"{reason}; {value}", detail)

    # Step 4 --------------------------------------------------------------------------------
    def step_mapping(self) -> Outcome:
        torch = self.torch
        request = self.request
        nvml = {uuid_key(uuid): (index, uuid) for index, uuid in request.gpus}
        keys: list[str] = []
        lines = []
        for cuda_index in range(self.count):
            raw = getattr(torch.cuda.get_device_properties(cuda_index), "uuid", None)
            key = uuid_key(raw) if raw is not None else ""
            keys.append(key)
            if key in nvml:
                index, uuid = nvml[key]
                lines.append(f"cuda:{cuda_index} = GPU {index} ({uuid})")
            elif key:
                lines.append(f"cuda:{cuda_index} = GPU-{key} (not in NVML's list)")
            else:
                lines.append(f"cuda:{cuda_index}: this torch reports no UUID")
        listing = "\n".join(lines)

        if request.gpu_uuid is None and request.gpu_index is None:
            wanted = 0 if request.cuda_index is None else request.cuda_index
            if not 0 <= wanted < self.count:
                return Outcome(
                    S.FAIL, f"cuda:{wanted} does not exist: torch sees {self.count} GPU(s)", listing
                )
            self.cuda_index = wanted
            key = keys[wanted]
            self.gpu_uuid = nvml[key][1] if key in nvml else (f"GPU-{key}" if key else "")
            name = f"GPU {nvml[key][0]} ({nvml[key][1]})" if key in nvml else self.gpu_uuid
            return Outcome(S.PASS, f"cuda:{wanted} is {name or 'an unidentified GPU'}", listing)

        nvml_index: int | None
        if request.gpu_uuid is not None:
            target_key = uuid_key(request.gpu_uuid)
            nvml_index = next(
                (i for i, u in request.gpus if uuid_key(u) == target_key), request.gpu_index
            )
        else:
            nvml_index = request.gpu_index
            found = [uuid for i, uuid in request.gpus if i == nvml_index]
            if not found:
                return Outcome(
                    S.FAIL,
                    f"NVML lists no GPU {nvml_index}: cannot tell which cuda:N it is",
                    listing,
                )
            target_key = uuid_key(found[0])
        label = f"GPU {nvml_index}" if nvml_index is not None else f"GPU-{target_key}"
        matches = [i for i, key in enumerate(keys) if key and key.startswith(target_key)]
        if len(matches) != 1:
            text = self._not_visible(label, nvml_index, target_key)
            if any(key and key not in nvml for key in keys):
                # A MIG instance has its own UUID (MIG-...), which no NVML GPU has.
                text += (
                    "; torch's devices include UUIDs NVML does not list as GPUs: with MIG on, "
                    "torch sees MIG instances (`nvidia-smi -L` lists their MIG- UUIDs)"
                )
            return Outcome(S.FAIL, text, listing)
        self.cuda_index = matches[0]
        key = keys[self.cuda_index]
        self.gpu_uuid = nvml[key][1] if key in nvml else f"GPU-{key}"
        value = f"{label} is cuda:{self.cuda_index} in this environment"
        if nvml_index is not None and nvml_index != self.cuda_index:
            value += f" (not cuda:{nvml_index}: use cuda:{self.cuda_index})"
        return Outcome(S.PASS, value, listing)

    def _not_visible(self, label: str, index: int | None, key: str) -> str:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        text = f"{label} is not visible to torch in this environment"
        if visible is not None:
            how = f"its UUID GPU-{key}"
            if index is not None:
                how += f" (or index {index} with CUDA_DEVICE_ORDER=PCI_BUS_ID)"
            return f"{text}: CUDA_VISIBLE_DEVICES={visible!r} hides it; to use it, add {how}"
        return f"{text}: none of torch's {self.count} GPU(s) has its UUID"

    # Step 5 --------------------------------------------------------------------------------
    def step_tensors(self) -> Outcome:
        torch = self.torch
        n = self.cuda_index
        free, total = torch.cuda.mem_get_info(n)
        wanted = self.request.size_mib * 2**20
        fraction = self.request.max_free_fraction
        cap = int(free * fraction) // 2**20 * 2**20
        size = min(wanted, cap)
        if size < min(wanted, S.MIN_SIZE_MIB * 2**20):
            return Outcome(
                S.FAIL,
                f"too little free memory on cuda:{n}: {mib(free)} free of {mib(total)}; "
                f"nothing allocated",
                f"The probe uses at most {fraction:.0%} of the free memory and needs at least "
                f"{S.MIN_SIZE_MIB} MiB.",
            )
        note = f" (capped at {fraction:.0%} of free memory)" if size < wanted else ""

        created = torch.randn(3, 2, device=f"cuda:{n}")
        device = torch.device("cuda", n)
        on_cpu = torch.randn(3, 2)
        moved = on_cpu.to(device)  # .to() returns a new tensor; on_cpu stays where it was
        for label, tensor in (("randn(device=...)", created), (".to(device)", moved)):
            if tensor.get_device() != n:
                return Outcome(S.FAIL, f"{label}: get_device() is {tensor.get_device()}, not {n}")
        left, right = torch.randn(64, 64), torch.randn(64, 64)
        on_gpu = (left.to(device) @ right.to(device)).cpu()
        if not torch.allclose(on_gpu, left @ right, rtol=1e-2, atol=1e-2):
            error = float((on_gpu - left @ right).abs().max())
            return Outcome(S.FAIL, f"matmul on cuda:{n} differs from the CPU's (max error {error})")
        self.tensors["block"] = torch.empty(size // 4, dtype=torch.float32, device=device)
        self.tensors["block"].normal_()
        self.tensors["created"], self.tensors["moved"] = created, moved
        torch.cuda.synchronize(n)
        return Outcome(
            S.PASS,
            f"randn on cuda:{n}, .to(device), get_device()=={n}, matmul matches the CPU; "
            f"holding {mib(size)}{note}",
            f"{mib(free)} free of {mib(total)} before. on_cpu.to(device) returned a new tensor "
            f"on {moved.device}; on_cpu itself is still on {on_cpu.device}.",
        )

    def hold(self, watch: ParentWatch) -> None:
        """Tell the parent what is held, and wait for it to look (or for the hold timeout)."""
        torch = self.torch
        self.channel.send(
            Holding(
                pid=os.getpid(),
                cuda_index=self.cuda_index,
                gpu_uuid=self.gpu_uuid,
                allocated_bytes=int(torch.cuda.memory_allocated(self.cuda_index)),
                reserved_bytes=int(torch.cuda.memory_reserved(self.cuda_index)),
            )
        )
        watch.wait_continue(self.request.hold_timeout_s)

    # Step 7 --------------------------------------------------------------------------------
    def step_cross_device(self) -> Outcome:
        torch = self.torch
        n = self.cuda_index
        if self.count < 2:
            return Outcome(S.SKIP, f"only one GPU is visible to torch (cuda:{n})")
        other = 1 if n == 0 else 0
        here = torch.ones(2, device=torch.device("cuda", n))
        try:
            # Two floats, but CUDA opens a context on cuda:{other} for them; it goes when the
            # child exits, a few seconds later.
            there = torch.ones(2, device=torch.device("cuda", other))
        except RuntimeError as error:
            # Exclusive-process, prohibited or full: no second GPU to show the error with.
            return Outcome(
                S.SKIP, f"cuda:{other} cannot be used here: {error_text(error)}", str(error)
            )
        try:
            here + there
            torch.cuda.synchronize(n)
        except RuntimeError as error:
            text = str(error)
            if not _is_device_mismatch(text):
                return Outcome(
                    S.FAIL,
                    f"cuda:{n} + cuda:{other} failed, but not with the device error: "
                    f"{error_text(error)}",
                    text,
                )
            return Outcome(S.PASS, f"cuda:{n} + cuda:{other} raised {error_text(error)}", text)
        return Outcome(S.FAIL, f"cuda:{n} + cuda:{other} did not raise an error")

    # Step 8 --------------------------------------------------------------------------------
    def step_bandwidth(self) -> Outcome:
        torch = self.torch
        n = self.cuda_index
        block = self.tensors["block"]
        note = ""
        try:
            host = torch.empty(block.numel(), dtype=torch.float32, pin_memory=True)
        except RuntimeError:
            host = torch.empty(block.numel(), dtype=torch.float32)
            note = " (pageable host memory: pinning failed)"
        host.fill_(1.0)
        self.tensors["host"] = host
        nbytes = block.numel() * 4

        def best_seconds(action: Callable[[], object], repeats: int) -> float:
            best = float("inf")
            for _ in range(repeats):
                torch.cuda.synchronize(n)
                started = time.perf_counter()
                action()
                torch.cuda.synchronize(n)
                best = min(best, time.perf_counter() - started)
            return max(best, 1e-9)

        to_device = nbytes / best_seconds(lambda: block.copy_(host), 3) / 1e9
        to_host = nbytes / best_seconds(lambda: host.copy_(block), 3) / 1e9
        side = min(4096, int((block.numel() // 3) ** 0.5) // 64 * 64)
        value = f"H2D {to_device:.1f} GB/s, D2H {to_host:.1f} GB/s{note}"
        if side >= 64:
            square = side * side
            a, b, c = (block[i * square : (i + 1) * square].view(side, side) for i in range(3))
            torch.matmul(a, b, out=c)  # warm-up: cuBLAS picks its kernel here
            seconds = best_seconds(lambda: torch.matmul(a, b, out=c), 5)
            value += f", matmul {side}x{side} fp32 {2 * side**3 / seconds / 1e12:.1f} TFLOP/s"
        return Outcome(S.PASS, value, f"{mib(nbytes)} per copy, best of 3")

    # Step 9 --------------------------------------------------------------------------------
    def step_cleanup(self) -> Outcome:
        import gc

        torch = self.torch
        n = self.cuda_index
        held = int(torch.cuda.memory_reserved(n))
        self.tensors.clear()
        gc.collect()
        torch.cuda.synchronize(n)
        # cuBLAS keeps its workspace in torch's allocator after a matmul; give it back too.
        clear_workspaces = getattr(getattr(torch, "_C", None), "_cuda_clearCublasWorkspaces", None)
        if clear_workspaces is not None:
            clear_workspaces()
        torch.cuda.empty_cache()
        allocated = int(torch.cuda.memory_allocated(n))
        reserved = int(torch.cuda.memory_reserved(n))
        if allocated:
            return Outcome(S.FAIL, f"{mib(allocated)} still allocated after freeing the tensors")
        value = f"freed {mib(held)}, cache emptied; the child exits"
        if reserved:
            value += f" ({mib(reserved)} still cached by torch)"
        return Outcome(S.PASS, value)


def main(argv: list[str] | None = None) -> int:
    """Run the probe; the results go to stdout as protocol lines. Exit 0 unless the request
    itself was bad (the verdict is in the ``done`` line)."""
    parser = argparse.ArgumentParser(prog="python -m gpumon.probe.child")
    parser.add_argument("--request", help="the parent's request, one JSON object")
    parser.add_argument(
        "--standalone", action="store_true", help="run by hand: no parent to wait for"
    )
    args = parser.parse_args(argv)
    channel = Channel()
    channel.send(Hello(os.getpid(), sys.executable or "python", sys.version.split()[0]))
    watch = ParentWatch(exit_on_eof=not args.standalone)
    watch.start()
    runner = StepRunner(channel)
    try:
        request = decode_request(args.request) if args.request else Request(cuda_index=0)
    except ProtocolError as error:
        channel.send(Done(False, f"bad request from the parent: {error}"))
        return EXIT_BAD_REQUEST
    if args.standalone:
        request = dataclasses.replace(request, hold_timeout_s=0.0)
    child_io.run_steps(Probe(request, runner, channel), runner, watch)
    failed = [step for step, status in runner.results.items() if status == S.FAIL]
    summary = f"step {failed[0]} failed" if failed else "every step passed"
    channel.send(Done(not failed, summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
