"""(being built)"""

from __future__ import annotations

import argparse
from typing import Any

from rehearse.report import Report

TITLE = "gpu"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def collect(ctx: Any, record: Any) -> None:
    raise NotImplementedError


def analyse(events: list[dict]) -> Report:
    raise NotImplementedError
