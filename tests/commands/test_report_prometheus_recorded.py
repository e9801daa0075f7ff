"""`gpumon report --prometheus` on the recording rules, under promtool's PromQL engine: the
contrib rules evaluated every minute over an exporter's series, then the report's own
queries over what they recorded (GPU-hours from the samples and the rules' interval, the
processes of the period, host names), as Prometheus answers them."""

from __future__ import annotations

import json
from pathlib import Path

from gpumon.data.periods import Period
from gpumon.sources.prometheus.usage import extent_query, processes_query, totals_query
from tests.commands.export.test_contrib import run_promtool
from tests.commands.test_report_prometheus import GIB, RULES

NODE = 'job="gpumon", instance="n1:9402"'
PROCESS = "gpumon_process_gpu_memory_bytes{" + NODE + ', user="alice"'
#: alice's PID 100 holds GPU 0 from the start; her PID 101 starts on GPU 1 at 7m.
INPUT = f"""\
      - series: 'gpumon_host_info{{{NODE}, hostname="gpu-node-1"}}'
        values: '1x12'
      - series: 'gpumon_simulated{{{NODE}}}'
        values: '0x12'
      - series: '{PROCESS}, gpu="0", uuid="GPU-0", pid="100"}}'
        values: '{4 * GIB}x12'
      - series: '{PROCESS}, gpu="1", uuid="GPU-1", pid="101"}}'
        values: '_x7 {8 * GIB}x5'
"""
#: The five minutes before 10m.
PERIOD = Period(300.0, 600.0)


def expect(expression: str, *samples: tuple[str, float]) -> str:
    listed = "".join(
        f"          - labels: '{{{labels}}}'\n            value: {value}\n"
        for labels, value in samples
    )
    return (
        f"      - expr: {json.dumps(expression)}\n        eval_time: 10m\n"
        f"        exp_samples:\n{listed}"
    )


def test_the_report_reads_what_the_rules_recorded(tmp_path: Path) -> None:
    """Evaluations at 5m to 10m: 1+1+2+2+2+2 GPUs held, each sample one minute (10
    GPU-minutes); PID 100 running at 5m and PID 101 started at 7m: 2 processes."""
    fact = f'{NODE}, user="alice", gpumon_fact'
    test = tmp_path / "report.test.yml"
    test.write_text(
        f"rule_files:\n  - {RULES}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n"
        f"    input_series:\n{INPUT}    promql_expr_test:\n"
        + expect(
            totals_query("user", PERIOD, 60.0, recorded=True),
            (f'{fact}="held"', 10),
            (f'{fact}="peak"', 8 * GIB),
            ('gpumon_fact="interval"', 60),
            (f'{NODE}, hostname="gpu-node-1", gpumon_fact="host"', 0),
        )
        + expect(
            processes_query("user", PERIOD, recorded=True),
            (f'{fact}="started"', 1),
            (f'{fact}="running"', 1),
        )
        + expect(
            extent_query(PERIOD, recorded=True),
            ('gpumon_fact="first"', 300),
            ('gpumon_fact="last"', 600),
        ),
        encoding="utf-8",
    )
    result = run_promtool("test", "rules", str(test))
    assert result.returncode == 0, result.stdout + result.stderr
