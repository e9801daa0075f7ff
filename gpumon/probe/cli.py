"""Placeholder: `gpumon probe` is being built (issue 3)."""

from __future__ import annotations

import argparse

HELP = "(not built yet)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    raise SystemExit("gpumon: error: `gpumon probe` is not built yet")
