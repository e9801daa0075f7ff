"""What the user can set, and from where: each setting declared once (:mod:`.settings`),
checked by one family of checks (:mod:`.checks`), read from the config files, the environment
and flags (:mod:`.files`, :mod:`.load`, :mod:`.flags`). May import :mod:`gpumon.data` only;
importing it loads neither argparse nor tomllib (``gpumon status`` builds settings each call).
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
