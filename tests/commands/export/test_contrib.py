"""contrib/: the Grafana dashboard and the Prometheus alert rules use only metrics gpumon exports.

A renamed metric, a forgotten ``_total`` or a typo would otherwise give an empty panel or an
alert that can never fire, and nobody would notice until the GPU that needed it had failed.
promtool (Debian package ``prometheus``) checks the rules, runs their unit tests and lints the
exposition when it is installed.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "contrib" / "grafana" / "gpumon-dashboard.json"
RULES = ROOT / "contrib" / "prometheus" / "gpumon-alerts.yml"
RULES_TEST = ROOT / "contrib" / "prometheus" / "gpumon-alerts.test.yml"

METRIC = re.compile(r"\b(?:gpumon|DCGM)_[A-Za-z0-9_]*[A-Za-z0-9]")
DATASOURCE_VARIABLE = {"${datasource}", "$datasource"}
# What a metric's unit suffix means in Grafana's units.
GRAFANA_UNITS = {
    "_ratio": "percentunit",
    "_bytes": "bytes",
    "_celsius": "celsius",
    "_watts": "watt",
    "_hertz": "hertz",
    "_seconds": "s",
}


def exposition(*, ecc: bool) -> str:
    """What ``gpumon export --demo`` serves; ``ecc`` turns ECC on (the demo boards have it off,
    which leaves the ECC counter with no sample)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from gpumon.commands.export.collector import build_families
    from gpumon.sources.demo import DemoSource

    sample = DemoSource(seed=0, clock=lambda: 1_700_000_000.0).sample()
    if ecc:
        gpus = tuple(
            dataclasses.replace(gpu, ecc_errors_uncorrected_volatile=0) for gpu in sample.gpus
        )
        sample = dataclasses.replace(sample, gpus=gpus)
    families = build_families(sample, sampling_errors=1)

    class Collector:
        def collect(self) -> Iterator[Any]:
            yield from families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())
    return generate_latest(registry).decode()


@cache
def exported_names() -> frozenset[str]:
    """Every series name a scrape of gpumon can hold (counters with ``_total``)."""
    from prometheus_client.parser import text_string_to_metric_families

    from gpumon.commands.export.collector import exporter_families

    names = set()
    for ecc in (False, True):
        for family in text_string_to_metric_families(exposition(ecc=ecc)):
            names.update(sample.name for sample in family.samples)
    # The health series a scrape adds: the sample's age, a stall, --record's recording.
    health = exporter_families(False, 0, age_s=0.0, stalled=False, recording=True)
    names.update(sample.name for family in health for sample in family.samples)
    return frozenset(names)


def test_exported_names_are_what_the_docs_promise() -> None:
    """Guards the reference the other tests compare against."""
    names = exported_names()
    assert "gpumon_gpu_ecc_errors_uncorrected_volatile_total" in names
    assert "gpumon_sampling_errors_total" in names
    assert "gpumon_gpu_ecc_errors_uncorrected_volatile" not in names
    assert {"gpumon_gpu_up", "gpumon_simulated", "gpumon_process_gpu_memory_bytes"} <= names


# --- The dashboard -------------------------------------------------------------------------


def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those nested in (collapsed) rows included; rows themselves too."""
    found = []
    for panel in dashboard.get("panels", []):
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def panel_exprs(panel: dict[str, Any]) -> list[str]:
    return [target["expr"] for target in panel.get("targets", []) if target.get("expr")]


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL query: panels, annotations and template variables."""
    queries = [expr for panel in all_panels(dashboard) for expr in panel_exprs(panel)]
    queries += [
        annotation["expr"]
        for annotation in dashboard.get("annotations", {}).get("list", [])
        if annotation.get("expr")
    ]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def names_in(queries: list[str]) -> set[str]:
    return {name for query in queries for name in METRIC.findall(query)}


def test_dashboard_queries_only_metrics_gpumon_exports() -> None:
    queries = dashboard_queries(load_dashboard())
    used = names_in(queries)
    assert used, "no gpumon metric found in the dashboard's queries"
    unknown = sorted(used - exported_names())
    assert not unknown, f"the dashboard queries metrics gpumon does not export: {unknown}"


def test_dashboard_imports_on_any_grafana() -> None:
    """No data source UID of one Grafana: a ``datasource`` variable every panel uses."""
    dashboard = load_dashboard()
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("instance", "gpu"):
        assert variables[name]["datasource"]["uid"] in DATASOURCE_VARIABLE
        assert "gpumon_gpu_up" in json.dumps(variables[name]["query"])

    queried = [panel for panel in all_panels(dashboard) if panel["type"] != "row"]
    assert len(queried) >= 10
    for panel in queried:
        title = panel["title"]
        assert panel["datasource"]["uid"] in DATASOURCE_VARIABLE, title
        assert panel["targets"], title
        for target in panel["targets"]:
            assert target["datasource"]["uid"] in DATASOURCE_VARIABLE, title
    ids = [panel["id"] for panel in all_panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_dashboard_flags_simulated_data() -> None:
    """Demo data must never pass for real GPUs: a panel says SIMULATED, graphs are shaded."""
    dashboard = load_dashboard()
    flags = [
        panel
        for panel in all_panels(dashboard)
        if any("gpumon_simulated" in expr for expr in panel_exprs(panel))
    ]
    assert flags, "no panel shows gpumon_simulated"
    mapped = json.dumps([panel["fieldConfig"]["defaults"].get("mappings") for panel in flags])
    assert "SIMULATED" in mapped, "gpumon_simulated 1 is not shown as SIMULATED"
    annotations = dashboard["annotations"]["list"]
    assert any(
        "gpumon_simulated" in annotation.get("expr", "") and annotation["enable"]
        for annotation in annotations
    ), "simulated periods are not annotated on the graphs"


def test_dashboard_units_match_metric_units() -> None:
    """A ratio shown as 0.87 W, or bytes as a bare number, is what a user would see first."""
    for panel in all_panels(load_dashboard()):
        suffixes = {
            suffix
            for name in names_in(panel_exprs(panel))
            for suffix in GRAFANA_UNITS
            if name.endswith(suffix)
        }
        if len(suffixes) == 1 and "increase(" not in " ".join(panel_exprs(panel)):
            expected = GRAFANA_UNITS[suffixes.pop()]
            assert panel["fieldConfig"]["defaults"]["unit"] == expected, panel["title"]


def test_dashboard_covers_what_the_readme_promises() -> None:
    used = names_in(dashboard_queries(load_dashboard()))
    for name in (
        "gpumon_gpu_up",
        "gpumon_gpu_utilization_ratio",
        "gpumon_gpu_memory_used_bytes",
        "gpumon_gpu_memory_total_bytes",
        "gpumon_gpu_temperature_celsius",
        "gpumon_gpu_temperature_slowdown_celsius",
        "gpumon_gpu_power_draw_watts",
        "gpumon_gpu_power_limit_watts",
        "gpumon_gpu_clock_sm_hertz",
        "gpumon_gpu_clock_memory_hertz",
        "gpumon_gpu_processes",
        "gpumon_process_gpu_memory_bytes",
        "gpumon_simulated",
    ):
        assert name in used, f"the dashboard does not show {name}"


# --- The alert rules -----------------------------------------------------------------------

_EXPR = re.compile(r"^(?P<indent>\s*(?:-\s+)?)expr:\s*(?P<value>.*)$")


def rule_exprs(text: str) -> list[str]:
    """The ``expr:`` values of a rules file: plain, quoted, or a ``|`` / ``>`` block."""
    lines = text.splitlines()
    exprs = []
    for number, line in enumerate(lines):
        match = _EXPR.match(line)
        if not match:
            continue
        value = match["value"].strip()
        if value[:1] in ("|", ">"):
            indent = len(match["indent"])  # the column of "expr:": the block is deeper
            block = []
            for following in lines[number + 1 :]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                block.append(following.strip())
            value = " ".join(part for part in block if part)
        elif value[:1] in ("'", '"'):
            value = value[1:-1]
        exprs.append(value)
    return exprs


def test_rule_parser_reads_block_and_plain_exprs() -> None:
    text = "- expr: up == 0\n  for: 1m\n- expr: >-\n    a\n    > b\n  for: 5m\n- expr: 'c'\n"
    assert rule_exprs(text) == ["up == 0", "a > b", "c"]


def test_alert_rules_query_only_metrics_gpumon_exports() -> None:
    exprs = rule_exprs(RULES.read_text(encoding="utf-8"))
    alerts = re.findall(r"^\s*-\s+alert:\s*(\S+)", RULES.read_text(encoding="utf-8"), re.M)
    assert len(exprs) == len(alerts) >= 6
    unknown = sorted(names_in(exprs) - exported_names())
    assert not unknown, f"the alert rules query metrics gpumon does not export: {unknown}"


def test_alert_rule_tests_use_real_metrics_and_cover_every_alert() -> None:
    """Unit tests fed with a misspelt series would pass while the alert never fires."""
    rules = RULES.read_text(encoding="utf-8")
    tests = RULES_TEST.read_text(encoding="utf-8")
    unknown = sorted(set(METRIC.findall(tests)) - exported_names())
    assert not unknown, f"the rule tests feed series gpumon does not export: {unknown}"
    alerts = set(re.findall(r"^\s*-\s+alert:\s*(\S+)", rules, re.M))
    tested = set(re.findall(r"alertname:\s*(\S+)", tests))
    assert alerts == tested


# --- promtool ------------------------------------------------------------------------------


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    return path


def run_promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_promtool_checks_the_rules() -> None:
    result = run_promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_runs_the_rule_unit_tests() -> None:
    result = run_promtool("test", "rules", str(RULES_TEST))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("ecc", [False, True], ids=["demo", "demo-with-ecc"])
def test_promtool_finds_no_lint_problem_in_the_exposition(ecc: bool) -> None:
    result = run_promtool("check", "metrics", stdin=exposition(ecc=ecc))
    problems = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, problems
    assert problems == ""


# --- Held idle ----------------------------------------------------------------------------

IDLE_PANEL = "Idle-held GPU memory by user"


def test_dashboard_shows_the_gpu_memory_each_user_holds_idle() -> None:
    panel = next(p for p in all_panels(load_dashboard()) if p["title"] == IDLE_PANEL)
    (expr,) = panel_exprs(panel)
    assert {"gpumon_process_idle_seconds", "gpumon_process_gpu_memory_bytes"} <= names_in([expr])
    assert panel["fieldConfig"]["defaults"]["unit"] == "bytes"


def test_the_idle_panel_sums_only_idle_processes_by_user(tmp_path: Path) -> None:
    """The panel's query on a Prometheus (promtool's): alice's idle 10 GiB and her busy 4 GiB,
    bob's busy job, an owner gpumon could not read holding 2 GiB idle."""
    panel = next(p for p in all_panels(load_dashboard()) if p["title"] == IDLE_PANEL)
    (expr,) = panel_exprs(panel)
    expr = expr.replace("$instance", ".*").replace("$gpu", ".*")
    processes = [  # gpu, pid, user, memory in GiB, idle seconds
        ("0", "100", "alice", 10, "0 0 1200x4"),
        ("1", "101", "alice", 4, "0x6"),
        ("1", "200", "bob", 20, "0x6"),
        ("2", "300", "", 2, "0 900x5"),
    ]
    series = []
    for gpu, pid, user, memory, idle in processes:
        labels = f'job="gpumon", instance="n1:9402", gpu="{gpu}", pid="{pid}", user="{user}"'
        series.append(
            f"      - series: 'gpumon_process_gpu_memory_bytes{{{labels}}}'\n"
            f"        values: '{memory * 1024**3}x6'\n"
            f"      - series: 'gpumon_process_idle_seconds{{{labels}}}'\n"
            f"        values: '{idle}'\n"
        )
    test = tmp_path / "idle-panel.test.yml"
    test.write_text(
        "rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n"
        + "".join(series)
        + "    promql_expr_test:\n"
        + f"      - expr: {json.dumps(expr)}\n"
        + "        eval_time: 3m\n        exp_samples:\n"
        + '          - labels: \'{instance="n1:9402", user="alice"}\'\n'
        + f"            value: {10 * 1024**3}\n"
        + '          - labels: \'{instance="n1:9402", user="(unknown)"}\'\n'
        + f"            value: {2 * 1024**3}\n",
        encoding="utf-8",
    )
    result = run_promtool("test", "rules", str(test))
    assert result.returncode == 0, result.stdout + result.stderr
