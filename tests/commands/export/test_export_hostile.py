"""`gpumon export` and other users' text: a process name with a byte that
is not UTF-8 used to make every scrape answer HTTP 500. Scraped over HTTP, parsed with
prometheus_client's parser and linted (promtool is not installed here)."""

from __future__ import annotations

import dataclasses
import re
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpumon.commands.export import collector as export
from gpumon.data.model import DriverInfo
from tests.commands.export.test_export import FakeSource, Serve, make_sample, parse
from tests.commands.export.test_export import serve as serve_fixture
from tests.support.hostile import HOSTILE_ARGV, hostile_source, unsafe_characters

serve = serve_fixture  # the same fixture as in test_export.py


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_SAMPLE_LINE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")


def lint_exposition(text: str) -> list[str]:
    """What `promtool check metrics` would object to in text format 0.0.4 (it is not
    installed here): each family has one HELP and one TYPE before its samples, samples of a
    family are together and carry its name, names and label names are valid, counters end in
    _total, values are numbers, no series appears twice."""
    problems: list[str] = []
    helps: set[str] = set()
    types: dict[str, str] = {}
    finished: set[str] = set()
    current = ""
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            kind, name, *rest = line[2:].split(" ", 2)
            seen = helps if kind == "HELP" else types
            if name in seen or name in finished:
                problems.append(f"line {number}: second {kind} for {name}")
            if not _METRIC_NAME.fullmatch(name):
                problems.append(f"line {number}: bad metric name {name!r}")
            if kind == "HELP":
                helps.add(name)
                if not rest or not rest[0].strip():
                    problems.append(f"line {number}: empty HELP for {name}")
            else:
                types[name] = rest[0] if rest else ""
                if types[name] not in ("counter", "gauge"):
                    problems.append(f"line {number}: unexpected type {types[name]!r}")
                if types[name] == "counter" and not name.endswith("_total"):
                    problems.append(f"line {number}: counter {name} does not end in _total")
            if name != current:
                finished.add(current)
                current = name
            continue
        if line.startswith("#") or not line:
            continue
        match = _SAMPLE_LINE.match(line)
        if match is None:
            problems.append(f"line {number}: not a sample line")
            continue
        name, value = match.group(1), match.group(3)
        if name != current or name not in helps or name not in types:
            problems.append(f"line {number}: {name} outside its family or without HELP/TYPE")
        try:
            float(value)
        except ValueError:
            problems.append(f"line {number}: value {value!r} is not a number")
    seen_series: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            if key in seen_series:
                problems.append(f"duplicate series {key}")
            seen_series.add(key)
            for label in sample.labels:
                if not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
                    problems.append(f"bad label name {label!r}")
    return problems


def test_the_linter_finds_what_it_looks_for() -> None:
    bad = (
        "# HELP a_total A.\n# TYPE a_total counter\na_total 1\n"
        "# TYPE b gauge\nb 1\n"  # no HELP
        "# HELP c C.\n# TYPE c counter\nc 1\n"  # counter without _total
        '# HELP d D.\n# TYPE d gauge\nd{x="1"} 1\nd{x="1"} 2\n'  # duplicate series
        "a_total 2\n"  # outside its family
    )
    problems = "\n".join(lint_exposition(bad))
    for expected in ("b outside", "c does not end", "duplicate series", "a_total outside"):
        assert expected in problems


def hostile_scrape(port: int) -> tuple[int, bytes]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.status, response.read()


def test_hostile_command_lines_and_user_names_scrape_as_valid_utf8(serve: Serve) -> None:
    """One GPU per hostile command line of the shared corpus (exec -a $'train\\xff' ...,
    escape sequences, bidi, 100k characters): the scrape answers 200, is valid UTF-8, parses,
    lints clean, and no label value carries an unsafe character."""
    status, body = hostile_scrape(serve(hostile_source()).port)
    assert status == 200
    text = body.decode("utf-8", errors="strict")
    assert lint_exposition(text) == []
    series = parse(text)
    for name, values in series.items():
        for labels in values:
            for label, value in labels:
                assert unsafe_characters(value) == [], (name, label, value)
    processes = {
        dict(labels)["pid"]: dict(labels) for labels in series["gpumon_process_gpu_memory_bytes"]
    }
    assert set(processes) == {str(7000 + index) for index in range(len(HOSTILE_ARGV))}
    names = {label: processes[str(7000 + i)]["process"] for i, label in enumerate(HOSTILE_ARGV)}
    assert names["not_utf8"] == "train\\xff"  # the byte shown as it was, as in `gpumon once`
    assert names["emoji_cjk"] == "python"
    assert len(names["very_long"]) <= 64
    assert processes["7000"]["user"] != ""  # the hostile user name is there, made safe


def test_a_label_value_that_is_not_utf8_never_fails_a_scrape(serve: Serve) -> None:
    """Belt and braces: text that reaches the exporter unsanitised (lone surrogates from
    bytes that were not UTF-8, controls) still scrapes as 200 and valid UTF-8."""
    sample = make_sample()
    hostile = dataclasses.replace(
        sample.processes[0], command="/opt/train\udcff --x", user="mal\udcff\x1b[2Jory"
    )
    gpu = dataclasses.replace(sample.gpus[0], name="A100\ud800", pci_bus_id="00:07\udcc3")
    sample = dataclasses.replace(
        sample,
        gpus=(gpu, *sample.gpus[1:]),
        processes=(hostile,),
        driver=DriverInfo("550\udcff", None, "12\x9b"),
    )
    status, body = hostile_scrape(serve(FakeSource(sample)).port)
    assert status == 200  # was 500: UnicodeEncodeError inside prometheus_client
    text = body.decode("utf-8", errors="strict")
    assert lint_exposition(text) == []
    (labels,) = parse(text)["gpumon_process_gpu_memory_bytes"]
    assert dict(labels)["process"] == "train\\xff"
    assert dict(labels)["user"] == "mal\\xff?[2Jory"
    for values in parse(text).values():
        for labels in values:
            assert all(unsafe_characters(value) == [] for _, value in labels)


@pytest.mark.parametrize(
    "text", ["\ud800", "a\udbff\udfffb", "\udcff", "\x00\x1b\x7f\x9b", "\u202e", "\U0001f680", ""]
)
def test_label_value_is_always_utf8_and_safe(text: str) -> None:
    value = export.label_value(text)
    value.encode("utf-8")  # never raises
    assert unsafe_characters(value) == []
    assert export.label_value(value) == value  # a no-op on safe text
    assert export.label_value(None) == ""


def test_hostile_job_container_and_mig_labels_scrape_as_valid_utf8(serve: Serve) -> None:
    """Job and container ids come from /proc/PID/cgroup and MIG profiles from the driver:
    whatever text reaches them, their labels pass the same filter as user names."""
    from gpumon.data.model import MigInstance

    sample = make_sample()
    instance = MigInstance(0, 0, 1, 0, "3g\udcff\x1b[2J", "MIG-\u202eevil", 1, 2)
    gpu = dataclasses.replace(sample.gpus[0], mig_mode=True, mig_instances=(instance,))
    process = dataclasses.replace(
        sample.processes[0], job_id="81\x9b2J", container_id="ab\udcc3\u200bcd"
    )
    sample = dataclasses.replace(sample, gpus=(gpu,), processes=(process,))

    status, body = hostile_scrape(serve(FakeSource(sample)).port)

    assert status == 200
    text = body.decode("utf-8", errors="strict")
    assert lint_exposition(text) == []
    series = parse(text)
    for values in series.values():
        for labels in values:
            assert all(unsafe_characters(value) == [] for _, value in labels)
    (labels,) = series["gpumon_process_gpu_memory_bytes"]
    assert dict(labels)["job_id"] == export.label_value("81\x9b2J") != ""
    (labels,) = series["gpumon_mig_memory_used_bytes"]
    assert dict(labels)["profile"] == "3g\\xff?[2J"


def test_a_hostile_host_name_scrapes_as_valid_utf8(serve: Serve) -> None:
    """The host name labels every node of a cluster view: escapes, bytes that are not UTF-8
    and bidi overrides in it are made safe like every other label value."""
    sample = make_sample()
    hostile = dataclasses.replace(sample.host, hostname="node\x1b]0;pwned\x07\udcff\u202e7")
    status, body = hostile_scrape(serve(FakeSource(dataclasses.replace(sample, host=hostile))).port)
    assert status == 200
    text = body.decode("utf-8", errors="strict")
    assert lint_exposition(text) == []
    ((labels, value),) = parse(text)["gpumon_host_info"].items()
    assert value == 1.0
    assert dict(labels)["hostname"] == "node?]0;pwned?\\xff\\u202e7"
    assert unsafe_characters(dict(labels)["hostname"]) == []
