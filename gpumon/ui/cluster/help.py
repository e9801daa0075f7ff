"""The cluster dashboard's help (``?``): its keys (the app's, the node list's, a node's, a
GPU's last hour) and what the node list's columns, the header and the banner mean, in the
shared frame (:mod:`gpumon.ui.widgets.help`).
"""

from __future__ import annotations

from gpumon.ui.cluster.node_history import NodeGpuScreen
from gpumon.ui.cluster.node_list import NodeList
from gpumon.ui.cluster.node_screen import NodeScreen
from gpumon.ui.cluster.screen import ClusterScreen
from gpumon.ui.widgets.gpu_panel import GpuPanel
from gpumon.ui.widgets.help import TEXTUAL_BINDINGS, HelpScreen, fields_section, keys_section
from gpumon.ui.widgets.process_table import ProcessTable

CLUSTER_NOTES = """\
The node list
  STATE           UP: Prometheus scraped the node's exporter on time.
                  DOWN since HH:MM: the scrape fails (up == 0).
                  stale, last seen HH:MM: no series newer than three scrape
                  intervals (the target is gone, or scrapes stopped).
                  A DOWN or stale node's readings are old: dimmed, sorted
                  after current ones, and its GPUs never count as free
                  (FREE reads "-").
  FREE            GPUs with no process and almost no memory in use; N/A
                  where the exporter lists no processes (dcgm-exporter)
  UTIL / MEMORY   mean utilisation of the node's GPUs; memory used / total
  HOT             the hottest GPU's temperature
  TOP USER        the user holding the most GPU memory on the node
  EXPORTER        gpumon (gpumon export: GPUs and processes) or dcgm
                  (NVIDIA's dcgm-exporter: GPUs only, fewer fields)

Header and fleet summary
  N GPUs up       GPUs of UP nodes: FREE, busy (a node that cannot tell
                  its processes counts in neither), the memory idle
                  processes hold, how the rows were read (recording
                  rules or raw queries), and per partition or other site
                  label. Then the hottest nodes, the most idle-held and
                  the users holding most (on a tall enough terminal).
  every N s (refresh M s)  a refresh that took more than a fifth of the
                  interval stretches it to five times the refresh.
  DEMO            some node serves simulated data (gpumon export --demo)
  A node's GPUs and processes are read when its screen opens ("reading
  node7..."), then at each refresh while it is shown or watched.
  Prometheus unreachable: the last data stays on screen, dimmed and
  stale (no GPU counts as free), and the server is asked again with a
  growing pause between tries (1, 2, 4 ... 60 s).
  Prometheus not answering for N s: a refresh has taken more than three
  intervals; the last data is shown stale in the same way until it ends.
"""


class ClusterHelpScreen(HelpScreen):
    """The cluster dashboard's keys and what its columns mean."""

    def build_text(self) -> str:
        groups = [
            ("Keys", [*type(self.app).BINDINGS, *TEXTUAL_BINDINGS]),
            ("Node list", [*ClusterScreen.BINDINGS, *NodeList.BINDINGS]),
            ("A node (Enter on the node list)", [*NodeScreen.BINDINGS, *GpuPanel.BINDINGS]),
            ("Its processes (gpumon's exporter only)", ProcessTable.BINDINGS),
            ("A GPU's last hour (Enter on a node's GPU)", NodeGpuScreen.BINDINGS),
        ]
        lines = ["gpumon cluster: every node Prometheus scrapes.  Press Esc, q or ? to close.", ""]
        lines += keys_section(groups, self._ascii_only)
        lines += [*CLUSTER_NOTES.splitlines(), ""]
        lines += fields_section()
        text = "\n".join(lines) + "\n"
        if self._ascii_only:
            text = text.replace("°C", " C")
        return text
