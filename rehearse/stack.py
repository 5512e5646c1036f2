"""The Pulumi Automation API seam of the commands that change a setting and run `pulumi up`
(`burst` switches burstScenario, `gateway-throughput` gatewayInstanceType). Tests replace
``open_stack`` in the module that calls it."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def open_stack(stack_name: str, work_dir: Path) -> Any:
    """The stack through the Automation API (it runs the `pulumi` CLI)."""
    from pulumi import automation

    return automation.select_stack(stack_name=stack_name, work_dir=str(work_dir))


def config_value(value: str) -> Any:
    from pulumi.automation import ConfigValue

    return ConfigValue(value=value)
