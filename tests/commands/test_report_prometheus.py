"""`gpumon report --prometheus`: the hours summed from the answers of a few queries whatever
the period (a fake server here; the real one:
tests/sources/prometheus/test_prometheus_integration.py), the recording rules' series where they
were loaded, and the rules themselves under promtool.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpumon.commands.report_output import render_text, report_to_dict
from gpumon.data.periods import Period
from gpumon.sources.prometheus.client import PrometheusError
from gpumon.sources.prometheus.rollup import HOURLY, HOURLY_MARKER
from gpumon.sources.prometheus.usage import (
    HOSTS,
    MAX_POINTS,
    PRESENT,
    RECORDED,
    RULES_INTERVAL,
    RULES_MARKER,
    SAMPLE_TIME,
    STARTED,
    cluster_usage,
    step_seconds,
)

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "contrib" / "prometheus" / "gpumon-recording.yml"
RULES_TEST = ROOT / "contrib" / "prometheus" / "gpumon-recording.test.yml"
GIB = 1024**3
#: The usage rules' other series the report reads, beside the facts (RECORDED).
READ_TOO = (
    STARTED,
    PRESENT,
    HOSTS,
    SAMPLE_TIME,
    RULES_INTERVAL,
    RULES_MARKER,
    *HOURLY.values(),
    HOURLY_MARKER,
)
WEEK = Period(1_793_491_200.0, 1_793_491_200.0 + 7 * 86400)


def fact(name: str, value: float, **labels: str) -> tuple[dict[str, str], float]:
    return {"instance": "n1:9402", "job": "gpumon", **labels, "gpumon_fact": name}, value


def vector(*items: tuple[dict[str, str], float]) -> dict[str, Any]:
    return {"resultType": "vector", "result": [
        {"metric": labels, "value": [1.0, str(value)]} for labels, value in items
    ]}  # fmt: skip


class FakePrometheus:
    """Answers the report's queries; records them."""

    url = "http://prometheus.example:9090"

    def __init__(self, *, rules: bool = False, simulated: int = 0) -> None:
        self.rules, self.simulated = rules, simulated
        self.asked: list[tuple[str, str]] = []

    def query_range(self, expression: str, start_s: float, end_s: float, step_s: float) -> Any:
        raise AssertionError("a range query: one series per node and step")

    def query(self, expression: str, at_s: float) -> Any:
        self.asked.append(("instant", expression))
        base = {"job": "gpumon", "instance": "n1:9402"}
        if "gpumon_sample_timestamp_seconds" in expression:  # both nodes scraped all the period
            return vector(*[
                ({"job": "gpumon", "instance": node, "gpumon_fact": fact}, at)
                for node in ("n1:9402", "n2:9402")
                for fact, at in (("first", at_s - 30 * 86400), ("last", at_s))
            ])  # fmt: skip
        rules = RULES_INTERVAL in expression
        if '"held"' in expression:  # the totals: the evaluations' values summed
            return vector(
                fact("held", 6, user="alice"),  # 1, 1, 2, 2 GPUs
                fact("used", 3, user="alice"),  # 0.5, 0.5, 1, 1
                fact("known", 5, user="alice"),  # one GPU a MIG slice for a while
                fact("idle", 2, user="alice"),
                fact("peak", 20 * GIB, user="alice"),
                fact("held", 2, user="bob", instance="n2:9402"),
                fact("held", 1, instance="n2:9402"),  # an owner the exporter could not read
                # On the rules, a host's value says whether its data is simulated.
                fact("host", self.simulated, hostname="gpu-node-1"),
                fact("host", 0 if rules else 1, hostname="gpu-node-2", instance="n2:9402"),
                fact("simulated", 0),
                *([fact("interval", 60.0)] if RULES_INTERVAL in expression else []),
            )
        if RULES_INTERVAL in expression:  # the rules' check
            return vector(({}, 5.0)) if self.rules else vector()
        if "count by" in expression:  # processes
            return vector(({**base, "user": "alice"}, 3), ({**base, "user": "bob"}, 9))
        process = {**base, "gpu": "1", "uuid": "GPU-1", "pid": "4200", "user": "alice"}
        return vector(
            ({**process, "process": "python", "job_id": "81234", "gpumon_fact": "idle"}, 7980.0),
            ({**process, "gpumon_fact": "memory"}, 20.0 * GIB),
        )


def test_hours_are_the_samples_summed_over_the_step() -> None:
    """A week: 720 evaluations 14 minutes apart. alice's 6 GPUs sampled (1+1+2+2) make
    6 x 14 min = 1.4 GPU-hours held, 0.7 used and 0.47 idle; bob's 2 samples 0.47."""
    source = FakePrometheus()
    report = cluster_usage(source, WEEK, "user", WEEK.end_s)  # type: ignore[arg-type]
    assert report.step_s == step_seconds(WEEK) == 840.0
    alice, bob, unknown = report.rows
    assert (alice.key, alice.node) == ("alice", "gpu-node-1")
    assert alice.gpu_hours_held == pytest.approx(6 * 840 / 3600)
    assert alice.gpu_hours_used == pytest.approx(3 * 840 / 3600)
    assert alice.idle_held_hours == pytest.approx(2 * 840 / 3600)
    assert (alice.peak_memory_bytes, alice.processes) == (20 * GIB, 3)
    assert (bob.key, bob.node, bob.processes) == ("bob", "gpu-node-2", 0)  # his count: n1's
    assert bob.gpu_hours_held == pytest.approx(2 * 840 / 3600)
    # bob's processes had no SM utilisation series (MIG, a board without it): unknown, not 0.
    assert bob.gpu_hours_used is None and bob.used_known_hours == 0.0
    assert bob.idle_held_hours is None  # judged from the same utilisation: unknown, not 0
    assert alice.used_known_hours == pytest.approx(5 * 840 / 3600)
    assert (unknown.key, unknown.node) == (None, "gpu-node-2")
    (holder,) = report.holders
    assert (holder.user, holder.node, holder.gpu_index, holder.pid) == (
        "alice", "gpu-node-1", 1, 4200,
    )  # fmt: skip
    assert (holder.idle_s, holder.gpu_memory_bytes, holder.command) == (7980.0, 20 * GIB, "python")
    assert holder.job == "81234"  # the Slurm job, as the exporter labels it
    assert report.recording_rules is False and report.simulated is False
    kinds = [kind for kind, _ in source.asked]
    assert kinds == ["instant"] * 5  # whatever the period
    # The per-process series evaluated MAX_POINTS times at most, summed in Prometheus.
    assert "[604799s:840s]" in totals(source) and MAX_POINTS == 7 * 86400 / 840
    text = render_text(report, width=None)
    assert "from Prometheus at http://prometheus.example:9090 (sampled every 14m)" in text
    assert "  alice  gpu-node-1  GPU 1  PID 4200  20.0G  idle 2h13m  job 81234  python" in text
    assert report_to_dict(report)["rows"][0] == {
        "user": "alice", "node": "gpu-node-1", "gpu_hours_held": pytest.approx(1.4),
        "gpu_hours_used": pytest.approx(0.7), "idle_held_hours": pytest.approx(2 * 840 / 3600),
        "peak_memory_bytes": 20 * GIB, "processes": 3,
        "used_known_hours": pytest.approx(5 * 840 / 3600),
    }  # fmt: skip
    assert report_to_dict(report)["rows"][1]["gpu_hours_used"] is None
    bob_line = next(line for line in text.splitlines() if line.startswith("bob "))
    assert bob_line.split()[3] == "N/A"
    assert (
        "USED is N/A for bob on gpu-node-2, (unknown) on gpu-node-2: the SM utilisation of "
        "their processes was never known" in text
    )
    assert (
        "USED counts only the GPU-hours whose SM utilisation was known, part of those "
        "held for alice on gpu-node-1 (1.17 of 1.40)" in text
    )


def test_memory_held_with_no_sm_series_is_counted_as_idleness_unknown() -> None:
    """Two processes hold memory with no SM utilisation series (MIG): the holders query
    counts them, and the report says their idleness is unknown beside alice's idle one."""

    class MigToo(FakePrometheus):
        def query(self, expression: str, at_s: float) -> Any:
            found = super().query(expression, at_s)
            if "unless on (instance, job, uuid, pid) gpumon_process_sm_utilization_ratio" in (
                expression
            ):
                for pid in ("77", "78"):
                    labels = {"job": "gpumon", "instance": "n2:9402", "uuid": "MIG-1", "pid": pid}
                    found["result"].append(
                        {"metric": {**labels, "gpumon_fact": "unknown"}, "value": [1.0, "1e9"]}
                    )
            return found

    report = cluster_usage(MigToo(), WEEK, "user", WEEK.end_s)  # type: ignore[arg-type]
    assert len(report.holders) == 1 and report.idle_unknown == 2
    text = render_text(report, width=None)
    assert "  alice  gpu-node-1  GPU 1  PID 4200  20.0G  idle 2h13m  job 81234  python" in text
    assert (
        "Not counted: 2 processes hold GPU memory with no SM utilisation reading (MIG, or no "
        "sample from the driver), so whether they are idle is unknown."
    ) in text
    assert report_to_dict(report)["idle_unknown_processes"] == 2


def totals(source: FakePrometheus) -> str:
    (asked,) = [expression for _, expression in source.asked if '"held"' in expression]
    return asked


def test_the_recording_rules_series_are_read_where_they_were_loaded() -> None:
    """On the rules, the hours are their recorded samples summed times their evaluation
    interval (60 s here: alice's 6 make 0.1 GPU-hours), read without any subquery."""
    source = FakePrometheus(rules=True)
    report = cluster_usage(source, WEEK, "user", WEEK.end_s)  # type: ignore[arg-type]
    assert report.recording_rules is True and report.step_s == 60.0
    assert report.rows[0].gpu_hours_held == pytest.approx(6 * 60 / 3600)
    assert all(name in totals(source) for name in RECORDED.values())
    assert "gpumon_process_sm_utilization_ratio" not in totals(source)
    # No subquery anywhere: each series is read once, whatever the period and the fleet.
    assert not any(re.search(r"\[\d+s:", expression) for _, expression in source.asked)
    assert "sampled every 1m; recording rules" in render_text(report, width=None)
    assert report.simulated is False
    demo = cluster_usage(FakePrometheus(rules=True, simulated=1), WEEK, "user", WEEK.end_s)  # type: ignore[arg-type]
    assert demo.simulated is True and "DEMO (simulated data)" in render_text(demo, width=None)
    # Other groupings than user have no recorded series: the per-process ones, by their label.
    source = FakePrometheus(rules=True)
    report = cluster_usage(source, WEEK, "job", WEEK.end_s)  # type: ignore[arg-type]
    assert report.recording_rules is False
    assert "job_id" in totals(source) and "instance_user:" not in totals(source)
    assert [kind for kind, _ in source.asked] == ["instant"] * 4


def test_rules_that_do_not_record_their_interval_are_read_as_raw_series() -> None:
    """The rules of an older gpumon (a marker, no interval): their sums cannot be made
    hours; the per-process series are read."""

    class OlderRules(FakePrometheus):
        def query(self, expression: str, at_s: float) -> Any:
            if expression.startswith(f"count_over_time({RULES_INTERVAL}"):
                return vector()
            return super().query(expression, at_s)

    source = OlderRules(rules=True)
    report = cluster_usage(source, WEEK, "user", WEEK.end_s)  # type: ignore[arg-type]
    assert report.recording_rules is False and report.step_s == 840.0
    assert report.rows[0].gpu_hours_held == pytest.approx(6 * 840 / 3600)
    assert "instance_user:" not in totals(source)


def test_a_period_sets_the_step_within_bounds() -> None:
    assert step_seconds(Period(0, 90)) == 15.0
    assert step_seconds(Period(0, 3600)) == 15.0
    assert step_seconds(Period(0, 86400)) == 120.0
    assert step_seconds(Period(0, 10)) == 10.0  # shorter than a step: one evaluation


def test_a_server_that_fails_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpumon.cli import main
    from gpumon.sources.prometheus.source import PrometheusSource

    def refuse(self: object, *args: object) -> Any:
        raise PrometheusError("Prometheus at http://127.0.0.1:9: cannot connect: refused")

    monkeypatch.setattr(PrometheusSource, "query", refuse)
    monkeypatch.setattr(PrometheusSource, "query_range", refuse)
    assert main(["report", "--prometheus", "http://127.0.0.1:9", "--json"]) == 1
    out, err = capsys.readouterr()
    assert (
        out == ""
        and err == "gpumon: error: Prometheus at http://127.0.0.1:9: cannot connect: refused\n"
    )


# --- the recording rules under promtool ------------------------------------------------------


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    return subprocess.run([path, *args], capture_output=True, text=True, timeout=60, check=False)


def test_promtool_checks_and_runs_the_recording_rules_tests() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(RULES_TEST))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_the_rules_record_what_the_report_reads() -> None:
    """A renamed rule would leave report --prometheus on the raw series for ever."""
    text = RULES.read_text(encoding="utf-8")
    for name in (*RECORDED.values(), *READ_TOO):
        assert f"record: {name}\n" in text, name
    tests = RULES_TEST.read_text(encoding="utf-8")
    assert all(name in tests for name in (*RECORDED.values(), *READ_TOO))
    assert f"rule_files:\n  - {RULES.name}\n" in tests


def test_the_rules_read_only_series_gpumon_exports() -> None:
    from tests.commands.export.test_contrib import exported_names, names_in, rule_exprs

    text = RULES.read_text(encoding="utf-8")
    usage, hourly = text.split("  - name: gpumon-nodes")[0].split("  - name: gpumon-usage-hourly")
    exprs = rule_exprs(usage)  # the node rows' group also reads dcgm-exporter's series
    assert len(exprs) + len(rule_exprs(hourly)) == len(RECORDED) + len(READ_TOO)
    # The hourly group reads the minute group's series alone, each with its roll-up.
    assert {f"{name}[" for name in HOURLY} == set(re.findall(r"[\w:]+\[", hourly))
    used = names_in(exprs)
    assert "gpumon_process_gpu_memory_bytes" in used
    assert used <= exported_names(), sorted(used - exported_names())


def test_the_holders_query_finds_memory_held_with_no_sm_series_under_promtool(
    tmp_path: Path,
) -> None:
    """The query on a Prometheus (promtool's): 100 is idle (idle and memory facts), 101
    busy, 102 holds 8 GiB on a MIG slice with no SM series (unknown), 103 holds 100 MiB
    with none (under the idle rule's 1 GiB: not counted)."""
    from gpumon.sources.prometheus.usage import holders_query
    from tests.commands.export.test_contrib import run_promtool

    processes = [  # pid, memory GiB, SM ratio or None, idle seconds or None
        ("100", 4, "0", "600"),
        ("101", 4, "0.9", "0"),
        ("102", 8, None, None),
        ("103", 0.1, None, None),
    ]
    series = []
    for pid, memory, sm, idle in processes:
        labels = f'job="gpumon", instance="n1:9402", uuid="GPU-1", pid="{pid}"'
        series.append(
            f"      - series: 'gpumon_process_gpu_memory_bytes{{{labels}}}'\n"
            f"        values: '{int(memory * GIB)}x3'\n"
        )
        if sm is not None:
            series.append(
                f"      - series: 'gpumon_process_sm_utilization_ratio{{{labels}}}'\n"
                f"        values: '{sm}x3'\n"
                f"      - series: 'gpumon_process_idle_seconds{{{labels}}}'\n"
                f"        values: '{idle}x3'\n"
            )

    def expected(name: str, pid: str, fact: str, value: float) -> str:
        return (
            f'          - labels: \'{name}{{job="gpumon", instance="n1:9402", uuid="GPU-1", '
            f'pid="{pid}", gpumon_fact="{fact}"}}\'\n            value: {value}\n'
        )

    test = tmp_path / "holders.test.yml"
    test.write_text(
        "rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n"
        + "".join(series)
        + "    promql_expr_test:\n"
        + f"      - expr: {json.dumps(holders_query(GIB))}\n"
        + "        eval_time: 2m\n        exp_samples:\n"
        + expected("gpumon_process_idle_seconds", "100", "idle", 600)
        + expected("gpumon_process_gpu_memory_bytes", "100", "memory", 4 * GIB)
        + expected("gpumon_process_gpu_memory_bytes", "102", "unknown", 8 * GIB),
        encoding="utf-8",
    )
    result = run_promtool("test", "rules", str(test))
    assert result.returncode == 0, result.stdout + result.stderr
