"""What the user can set, and from where: each setting declared once (:mod:`.settings`),
checked by one family of checks (:mod:`.checks`), read from the config files (:mod:`.files`)
and the environment and flags (:mod:`.load`, :mod:`.flags`).

May import: :mod:`gpumon.data`; never textual, rich or pynvml. Importing the package loads
neither argparse nor tomllib (``gpumon status`` builds its settings on every call).
"""

from gpumon.config.checks import SettingsError
from gpumon.config.files import default_history_path
from gpumon.config.load import describe, load_settings
from gpumon.config.settings import CLUSTER_COMMANDS, SETTINGS, Setting, Settings

__all__ = [
    "CLUSTER_COMMANDS",
    "SETTINGS",
    "Setting",
    "Settings",
    "SettingsError",
    "default_history_path",
    "describe",
    "load_settings",
]
