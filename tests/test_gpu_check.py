"""The real-GPU check (``python -m tests.gpu_check``) without a GPU: its ``--fake`` run, its
comparison rules, and its parsing of nvidia-smi, /metrics and pytest's report, so that it
cannot rot between the sessions that draw a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.data.fields import FIELDS
from gpumon.sources.nvml.source import NvmlSource
from tests.gpu_check import rules
from tests.gpu_check.children import Child
from tests.gpu_check.exporter_check import exported_values, parse_metrics
from tests.gpu_check.fake import FakeSmi, fake_nvml, wrong
from tests.gpu_check.fields_check import NOT_IN_NVIDIA_SMI, check_fields
from tests.gpu_check.pytest_check import gpu_test_files, outcomes
from tests.gpu_check.smi import NvidiaSmi, SmiError, parse_details, parse_properties
from tests.support.fake_children import gone

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024**2


def run_check(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.gpu_check", "--fake", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def rows_of(report: dict[str, object], section: str) -> dict[str, dict[str, str]]:
    sections = {s["name"]: s for s in report["sections"]}  # type: ignore[attr-defined]
    return {row["key"]: row for row in sections[section]["data"]["rows"]}


@pytest.mark.slow
def test_the_fake_run_agrees_on_every_field_and_writes_its_report(tmp_path: Path) -> None:
    """Every field agrees (energy: nvidia-smi shows none), the exporter's series too, the
    sections that need a GPU say why they were skipped, and the files land in --out."""
    done = run_check("--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "RESULT: PASS" in done.stdout
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert report["ok"] is True
    for section in ("fields", "exporter"):
        rows = rows_of(report, section)
        assert set(rows) >= {field.key for field in FIELDS} | {"name", "uuid", "pci_bus_id"}
        assert {key for key, row in rows.items() if row["result"] != rules.AGREE} == {
            "energy",
            *NOT_IN_NVIDIA_SMI,
        }
        for key in ("energy", *NOT_IN_NVIDIA_SMI):
            assert rows[key]["result"] == rules.GPUMON_ONLY
    for skipped in ("[SKIP] Processes", "[SKIP] Probe", "[SKIP] pytest -m gpu"):
        assert f"{skipped}" in done.stdout
    assert done.stdout.count("skipped: needs nvidia-smi/torch (--fake)") == 3
    assert (tmp_path / "fake-h100-120x36.svg").read_text().startswith("<svg")
    text = (tmp_path / "gpu-check.txt").read_text()
    assert "[PASS] Screenshot" in text and text.endswith(
        "RESULT: PASS (4 passed, 0 failed, 3 skipped)\n"
    )


def test_an_injected_disagreement_fails_the_check() -> None:
    done = run_check("--only", "fields", "--fake-disagree", "power", "--fake-disagree", "mig")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = {
        line.split()[1]: line for line in done.stdout.splitlines() if line.startswith("    0 ")
    }
    assert lines["power"].split()[-2:] == ["differ", "0/3"]
    assert "power.draw" in lines["power"] and "350.50" in lines["power"]
    assert "differ" in lines["mig"] and "differ" not in lines["temp"]
    assert "RESULT: FAIL" in done.stdout and "differ: GPU 0 power, GPU 0 mig" in done.stdout


def test_a_property_nvidia_smi_refuses_is_listed_and_the_rest_compared() -> None:
    nvml = fake_nvml()
    smi = NvidiaSmi(FakeSmi(nvml, reject={"clocks_event_reasons.active", "memory.reserved"}))
    source = NvmlSource(nvml=nvml, read_processes=False)  # type: ignore[arg-type]
    section = check_fields(source, smi, rounds=2)
    rows = {row["key"]: row for row in section.data["rows"]}
    assert rows["clock_events"]["result"] == rules.NOT_QUERYABLE
    assert rows["mem_reserved"]["result"] == rules.NOT_QUERYABLE
    assert rows["power"]["result"] == rules.AGREE
    assert section.status == "pass"
    assert set(section.data["not_queryable"]) == {"clocks_event_reasons.active", "memory.reserved"}
    assert "utilization.jpeg" in section.data["gpumon_lacks"]


def test_every_field_has_a_rule_and_a_name_nvidia_smi_answers_to() -> None:
    """A new field without either would read 'no rule' (failing) or 'gpumon only' forever."""
    for field in FIELDS:
        assert rules.rule_for(field) is not None, field.key
        if field.key not in NOT_IN_NVIDIA_SMI:
            assert field.query or field.smi.startswith("-q: "), field.key
    queries = [field.query for field in FIELDS if field.query]
    assert len(queries) == len(set(queries))


@pytest.mark.parametrize(
    "text",
    ["[N/A]", "[Not Supported]", "[Unknown Error]", "N/A", "Not Supported", "", "  [N/A] "],
)
def test_nvidia_smis_ways_of_saying_na(text: str) -> None:
    assert rules.smi_na(text)


@pytest.mark.parametrize(
    ("rule", "mine", "theirs", "agrees"),
    [
        (rules.MEMORY, 81559 * MIB, ["81559"], True),
        (rules.MEMORY, 81559 * MIB + MIB // 2, ["81559"], True),  # nvidia-smi rounds down
        (rules.MEMORY, 81561 * MIB, ["81559"], False),
        (rules.PERCENT, 40, ["37", "48"], True),  # inside the range the readings span
        (rules.PERCENT, 60, ["37", "48"], False),
        (rules.POWER, 73.0, ["69.31"], True),  # within 5 W
        (rules.POWER, 625.0, ["600.00"], True),  # within 5 % (30 W)
        (rules.POWER, 640.0, ["600.00"], False),
        (rules.POWER, 76.0, ["69.31"], False),
        (rules.POWER_LIMIT, 700.0, ["700.00"], True),
        (rules.POWER_LIMIT, 699.0, ["700.00"], False),
        (rules.THRESHOLD, 87, ["87 C"], True),  # a -q line
        (rules.THRESHOLD, 88, ["87 C"], False),
        (rules.CLOCK, 1980, ["1965"], True),
        (rules.CLOCK, 345, ["1980"], False),
        (rules.PCIE, 1_500_000 * 1024, ["1500000 KB/s"], True),
        (rules.PSTATE, 0, ["P0"], True),
        (rules.PSTATE, 0, ["P8"], False),
        (rules.ENABLED, True, ["Enabled"], True),
        (rules.ENABLED, False, ["Enabled"], False),
        (rules.COMPUTE_MODE, "Exclusive Process", ["Exclusive_Process"], True),
        (rules.COMPUTE_MODE, "Default", ["Exclusive_Process"], False),
        (rules.CLOCK_EVENTS, ("gpu_idle", "sw_power_cap"), ["0x0000000000000005"], True),
        (rules.CLOCK_EVENTS, (), ["0x0000000000000000"], True),
        (rules.CLOCK_EVENTS, ("gpu_idle",), ["0x0000000000000005"], False),
        (rules.CLOCK_EVENTS, ("unknown_0x1000",), ["0x0000000000001000"], True),
        (rules.COUNT, 0, ["0"], True),
        (rules.BUS_ID, "00000000:18:00.0", ["00000000:18:00.0"], True),
    ],
)
def test_conversions_and_tolerances(
    rule: rules.Rule, mine: object, theirs: list[str], agrees: bool
) -> None:
    assert rule.agrees(rule.mine(mine), [rule.theirs(text) for text in theirs]) is agrees


def test_a_field_agrees_in_a_majority_of_rounds() -> None:
    rounds = [["40", "41"], ["90", "91"], ["42", "40"]]
    assert rules.compare_rounds(rules.PERCENT, [40, 40, 41], rounds).result == rules.AGREE
    verdict = rules.compare_rounds(rules.PERCENT, [40, 40, 95], rounds)
    assert (verdict.result, verdict.score, verdict.mine) == (rules.DIFFER, "1/3", "40")


@pytest.mark.parametrize(
    ("mine", "theirs", "result"),
    [
        (None, "[N/A]", rules.BOTH_NA),
        (None, "[Not Supported]", rules.BOTH_NA),
        (None, "45", rules.DIFFER),  # gpumon says N/A where nvidia-smi reads a value
        (45, "[N/A]", rules.DIFFER),
        (45, "garbage", rules.DIFFER),
    ],
)
def test_na_on_one_side_only_differs(mine: object, theirs: str, result: str) -> None:
    verdict = rules.compare_rounds(rules.TEMPERATURE, [mine], [[theirs, theirs]])
    assert verdict.result == result


def test_no_rule_fails() -> None:
    assert rules.compare_rounds(None, [1], [["1", "1"]]).result == rules.NO_RULE
    assert rules.NO_RULE in rules.FAILING and rules.DIFFER in rules.FAILING


def test_a_refused_property_is_dropped_and_the_query_asked_again() -> None:
    asked: list[str] = []

    def runner(argv: list[str], timeout_s: float) -> tuple[int, str]:
        names = argv[1].removeprefix("--query-gpu=").split(",")
        asked.append(argv[1])
        for name in names:
            if name.startswith("new."):
                return 2, f'Field "{name}" is not a valid field to query.\n'
        return 0, ", ".join(["0", *("1" for _ in names[1:])]) + "\n"

    smi = NvidiaSmi(runner)  # type: ignore[arg-type]
    assert smi.query(["a", "new.one", "b", "new.two"]) == {0: {"index": "0", "a": "1", "b": "1"}}
    assert smi.rejected == ["new.one", "new.two"]
    assert len(asked) == 3
    smi.query(["a", "new.one"])  # remembered: not asked again
    assert asked[-1] == "--query-gpu=index,a"


def test_a_refusal_naming_no_asked_property_is_found_one_by_one() -> None:
    def runner(argv: list[str], timeout_s: float) -> tuple[int, str]:
        names = argv[1].removeprefix("--query-gpu=").split(",")
        if "clocks.sm" in names:  # an alias, refused under its canonical name
            return 2, 'Field "clocks.current.sm" is not a valid field to query.\n'
        return 0, ", ".join("0" for _ in names) + "\n"

    smi = NvidiaSmi(runner)  # type: ignore[arg-type]
    assert smi.query(["a", "clocks.sm"]) == {0: {"index": "0", "a": "0"}}
    assert smi.rejected == ["clocks.sm"]


def test_a_failing_nvidia_smi_is_an_error_not_a_refusal() -> None:
    smi = NvidiaSmi(lambda argv, timeout_s: (9, "NVIDIA-SMI has failed because it couldn't "
                                                "communicate with the NVIDIA driver."))  # fmt: skip
    with pytest.raises(SmiError, match="couldn't communicate"):
        smi.query(["a"])


def test_q_output_is_read_per_gpu_by_bus_id() -> None:
    text = (
        "Attached GPUs                             : 1\n"
        "GPU 00000000:83:00.0\n"
        "    PCI\n"
        "        Bus Id                            : 00000000:83:00.0\n"
        "        Tx Throughput                     : 0 KB/s\n"
        "    GPU Power Readings\n"
        "        Power Draw                        : 52.50 W\n"
        "    Module Power Readings\n"
        "        Power Draw                        : N/A\n"
    )
    assert parse_details(text) == {
        "00000000:83:00.0": {
            "Bus Id": "00000000:83:00.0",
            "Tx Throughput": "0 KB/s",
            "Power Draw": "52.50 W",  # the first one: the GPU's, not the module's
        }
    }


def test_help_query_gpu_lists_properties_with_their_aliases() -> None:
    text = (
        '"timestamp"\nThe timestamp.\n\n"name" or "gpu_name"\nThe name.\n'
        '"clocks.current.sm" or "clocks.sm"\n'
    )
    assert parse_properties(text) == [
        ("timestamp",),
        ("name", "gpu_name"),
        ("clocks.current.sm", "clocks.sm"),
    ]


def test_wrong_answers_keep_their_shape() -> None:
    assert wrong("150.25") == "350.50"
    assert wrong("87 C") == "224 C"
    assert wrong("P0") == "P8"
    assert wrong("Enabled") == "Disabled"
    assert wrong("Exclusive_Process") == "Default"
    assert wrong("0x0000000000000005") == "0x0000000000000001"


def test_metrics_are_read_back_into_readings() -> None:
    page = (
        "# HELP gpumon_gpu_power_draw_watts Power draw.\n"
        'gpumon_gpu_power_draw_watts{gpu="0",name="X",uuid="GPU-1"} 69.5\n'
        'gpumon_gpu_utilization_ratio{gpu="0",name="X",uuid="GPU-1"} 0.63\n'
        'gpumon_gpu_energy_joules_total{gpu="0",name="X",uuid="GPU-1"} 1234.5\n'
        'gpumon_gpu_compute_mode{gpu="0",mode="Exclusive Process",name="X \\"q\\"",uuid="GPU-1"}'
        " 1.0\n"
        'gpumon_gpu_clock_event_reason{gpu="0",name="X",reason="gpu_idle",uuid="GPU-1"} 1.0\n'
        'gpumon_gpu_power_draw_watts{gpu="1",name="X",uuid="GPU-2"} 300.0\n'
        'gpumon_gpu_info{gpu="0",name="X",pci_bus_id="00000000:18:00.0",uuid="GPU-1"} 1.0\n'
        'gpumon_driver_info{cuda_driver_version="12.4",driver_version="580.1",nvml_version=""} 1\n'
    )
    series = parse_metrics(page)
    assert (series[3][0], series[3][1]["name"]) == ("gpumon_gpu_compute_mode", 'X "q"')
    values = exported_values(series, 0)
    assert values["power_draw_w"] == 69.5
    assert values["utilization_gpu_pct"] == pytest.approx(63)
    assert values["energy_j"] == 1234.5
    assert values["compute_mode"] == "Exclusive Process"
    assert values["clock_event_reasons"] == ("gpu_idle",)
    assert values["fan_pct"] is None  # no series: N/A
    assert (values["pci_bus_id"], values["driver_version"]) == ("00000000:18:00.0", "580.1")


def test_pytest_outcomes_come_from_its_junit_report(tmp_path: Path) -> None:
    xml = tmp_path / "report.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.sources.nvml.test_gpu_real" name="test_a"/>'
        '<testcase classname="tests.sources.nvml.test_gpu_real" name="test_b">'
        '<skipped type="pytest.skip" message="no usable NVIDIA GPU: no driver">x</skipped>'
        "</testcase>"
        '<testcase classname="tests.probe.test_probe_gpu" name="test_c">'
        '<failure message="assert 1 == 0&#10;more">trace</failure></testcase>'
        "</testsuite></testsuites>"
    )
    assert outcomes(xml) == [
        ("test_gpu_real::test_a", "passed", ""),
        ("test_gpu_real::test_b", "skipped", "no usable NVIDIA GPU: no driver"),
        ("test_probe_gpu::test_c", "failed", "assert 1 == 0"),
    ]
    assert {path.name for path in gpu_test_files()} >= {"test_gpu_real.py", "test_probe_gpu.py"}


def test_a_child_is_ended_with_its_whole_group() -> None:
    """The torch job and the probe must never outlive the check, nor what they started."""
    code = (
        "import subprocess, sys, time\n"
        "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(grandchild.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    with Child([sys.executable, "-c", code]) as child:
        grandchild = int(child.line(30) or 0)
    assert child.process.poll() is not None
    assert gone(grandchild)


def test_the_carried_site_is_pure_python_for_the_machines_python(tmp_path: Path) -> None:
    """What build/gpu-site carries: textual and pytest-asyncio with their requirements on
    Python 3.12 (no backport a 3.12 does not need), and never compiled code."""
    from importlib import metadata

    from tests.gpu_check import site

    names = {dist.metadata["Name"].lower() for dist in site.closure(site.DISTRIBUTIONS)}
    assert {"textual", "rich", "pytest", "pytest-asyncio", "pluggy"} <= names
    assert not names & {"exceptiongroup", "tomli", "psutil", "torch"}
    with pytest.raises(SystemExit, match="compiled code"):
        site.copy(metadata.distribution("psutil"), tmp_path)


@pytest.mark.parametrize(
    ("name", "slug"),
    [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"), (None, "gpu")],
)
def test_the_screenshot_is_named_after_the_gpu(name: str | None, slug: str) -> None:
    from tests.gpu_check.screenshot import slug as slug_of

    assert slug_of(name) == slug
