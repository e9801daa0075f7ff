"""contrib/alertmanager/alertmanager.yml routes ``GpuHeldIdle`` to the user who holds the GPU,
by the alert's ``user`` label, and every other alert to the admins.

amtool (Debian package ``prometheus-alertmanager``) checks the file and tests its routes when
it is installed; without it, the routes are followed here as Alertmanager follows them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpumon.commands.export.series import PROCESS_LABELS

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "contrib" / "alertmanager" / "alertmanager.yml"
RULES = ROOT / "contrib" / "prometheus" / "gpumon-alerts.yml"
MATCHER = re.compile(r'\s*(\w+)\s*(=~|!~|!=|=)\s*"(.*)"\s*')
#: Labels, and where they are routed: a user's own route, mail to a login name, else the admins.
ROUTED = [
    ({"alertname": "GpuHeldIdle", "user": "alice", "instance": "n1"}, "gpu-holder-chat-alice"),
    ({"alertname": "GpuHeldIdle", "user": "bob", "instance": "n1"}, "gpu-holder-mail"),
    ({"alertname": "GpuHeldIdle", "user": "", "instance": "n1"}, "gpu-admins"),
    ({"alertname": "GpuHeldIdle", "user": "bob@evil;x", "instance": "n1"}, "gpu-admins"),
    ({"alertname": "GpuLost", "instance": "n1"}, "gpu-admins"),
]


def config() -> dict[str, Any]:
    loaded = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def matches(matchers: list[str], labels: dict[str, str]) -> bool:
    """Alertmanager's matchers: a missing label is ""; regular expressions are anchored."""
    for text in matchers:
        found = MATCHER.fullmatch(text)
        assert found is not None, f"not a matcher: {text!r}"
        name, operator, value = found.groups()
        have = labels.get(name, "")
        hit = re.fullmatch(value, have) is not None if "~" in operator else have == value
        if hit == operator.startswith("!"):
            return False
    return True


def receiver(route: dict[str, Any], labels: dict[str, str], inherited: str = "") -> str:
    """The receiver of the deepest matching route (none uses ``continue``: the first match)."""
    own = str(route.get("receiver", inherited))
    for child in route.get("routes", []):
        assert not child.get("continue"), "a route with continue: follow it in this test"
        if matches(child.get("matchers", []), labels):
            return receiver(child, labels, own)
    return own


@pytest.mark.parametrize(("labels", "expected"), ROUTED)
def test_an_idle_gpu_goes_to_its_holder_and_the_rest_to_the_admins(
    labels: dict[str, str], expected: str
) -> None:
    assert receiver(config()["route"], labels) == expected


def test_every_receiver_exists_and_each_names_only_labels_it_was_grouped_by() -> None:
    """A notification grouped by [alertname, user] has one user: .CommonLabels.user is theirs."""
    document = config()
    names = {entry["name"] for entry in document["receivers"]}

    def walk(route: dict[str, Any], group_by: list[str]) -> None:
        group_by = route.get("group_by", group_by)
        assert route.get("receiver", "gpu-admins") in names
        entry = next((r for r in document["receivers"] if r["name"] == route.get("receiver")), {})
        used = set(re.findall(r"\.CommonLabels\.(\w+)", yaml.safe_dump(entry)))
        assert used <= set(group_by), (route.get("receiver"), used, group_by)
        for child in route.get("routes", []):
            walk(child, group_by)

    walk(document["route"], [])
    mail = next(r for r in document["receivers"] if r["name"] == "gpu-holder-mail")
    assert mail["email_configs"][0]["to"] == "{{ .CommonLabels.user }}@example.org"


def test_the_alert_it_routes_carries_the_labels_and_annotation_it_uses() -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    alerts = {rule["alert"]: rule for group in rules["groups"] for rule in group["rules"]}
    held = alerts["GpuHeldIdle"]
    assert held["expr"].startswith("gpumon_process_idle_seconds") and "user" in PROCESS_LABELS
    assert "description" in held["annotations"]
    text = CONFIG.read_text(encoding="utf-8")
    named = set(re.findall(r'alertname\s*=\s*"(\w+)"', text))
    assert named <= set(alerts), named - set(alerts)


def amtool() -> str:
    path = shutil.which("amtool")
    if path is None:
        pytest.skip("amtool not installed (Debian package prometheus-alertmanager)")
    return path


def test_amtool_checks_the_config() -> None:
    done = subprocess.run(
        [amtool(), "check-config", str(CONFIG)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("labels", "expected"), ROUTED)
def test_amtool_routes_as_this_test_does(labels: dict[str, str], expected: str) -> None:
    argv = [amtool(), "config", "routes", "test", "--config.file", str(CONFIG)]
    argv += [f"{name}={value}" for name, value in labels.items() if value]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == expected, done.stdout + done.stderr
