"""Placeholder: `gpumon status` is being built (issue 4)."""

from __future__ import annotations

import argparse

HELP = "(not built yet)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    raise SystemExit("gpumon: error: `gpumon status` is not built yet")
