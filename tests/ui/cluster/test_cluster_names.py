"""Remote names are text, never markup, in the cluster screens' titles.

A node's name, instance and job, and a GPU's name, come from Prometheus labels that anyone
who can push a series chooses. gpumon itself names two targets of one host ``gpu01 [job]``.
Brackets in them are shown as they are: not swallowed as a style, not run as a click action,
and ``[/]`` never crashes the screen.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpumon.data.cluster import ClusterSample
from gpumon.ui.cluster.node_history import NodeGpuScreen
from gpumon.ui.cluster.node_screen import NodeScreen
from tests.support.ui_helpers import screen_text
from tests.ui.cluster.test_cluster_ui import cluster_app, make_cluster, shown

#: Names with brackets: gpumon's own ``name [job]``, a style, a bare close tag, an action.
BRACKETED = ["gpu01 [gpumon-b]", "gpu01 [reverse]X", "evil[/]", "[@click=app.quit]x"]


def first_node_renamed(cluster: ClusterSample, **fields: str) -> ClusterSample:
    node = replace(cluster.nodes[0], **fields)
    return replace(cluster, nodes=(node, *cluster.nodes[1:]))


@pytest.mark.parametrize("name", BRACKETED)
async def test_a_node_title_shows_its_name_instance_and_job_as_they_are(name: str) -> None:
    cluster = first_node_renamed(make_cluster(3), name=name, instance=f"{name}:9835", job=name)
    app = cluster_app(cluster)
    async with app.run_test(size=(160, 50)) as pilot:
        await shown(app, pilot, cluster)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, NodeScreen)
        title = screen_text(app).splitlines()[0]
        assert title.startswith(f" {name}  UP  gpumon exporter  {name}:9835 ({name})  8 GPUs")
        await pilot.click("#node-title")  # an action in a name is not run: still here
        await pilot.pause()
        assert app.is_running and isinstance(app.screen, NodeScreen)


@pytest.mark.parametrize("name", BRACKETED)
async def test_a_gone_node_title_shows_its_name_as_it_is(name: str) -> None:
    cluster = first_node_renamed(make_cluster(3), name=name)
    app = cluster_app(cluster)
    async with app.run_test(size=(160, 50)) as pilot:
        await shown(app, pilot, cluster)
        await pilot.press("enter")
        await pilot.pause()
        await shown(app, pilot, make_cluster(3))  # Prometheus no longer lists it
        assert (
            screen_text(app).splitlines()[0].startswith(f" {name}: no longer listed by Prometheus")
        )


@pytest.mark.parametrize("name", BRACKETED)
async def test_a_gpu_title_shows_the_node_and_gpu_names_as_they_are(name: str) -> None:
    cluster = make_cluster(3)
    node = cluster.nodes[0]
    gpus = (replace(node.gpus[0], name=f"NVIDIA {name} H100"), *node.gpus[1:])
    cluster = first_node_renamed(cluster, name=name)
    node = replace(cluster.nodes[0], sample=replace(node.sample, gpus=gpus))
    cluster = replace(cluster, nodes=(node, *cluster.nodes[1:]))
    app = cluster_app(cluster)
    async with app.run_test(size=(160, 50)) as pilot:
        await shown(app, pilot, cluster)
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, NodeGpuScreen)
        title = screen_text(app).splitlines()[0]
        assert title.startswith(f" {name} · GPU 0  UP  NVIDIA {name} H100  ")
        await pilot.click("#node-gpu-title")
        await pilot.pause()
        assert app.is_running and isinstance(app.screen, NodeGpuScreen)
        await shown(app, pilot, make_cluster(3))  # gone
        assert screen_text(app).splitlines()[0].startswith(f" {name} GPU 0: no longer listed")
