"""What a collector works with: the stack's outputs, the cluster, AWS in the stack's region, a
clock, and a way to show progress."""

from __future__ import annotations

import datetime
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from rehearse.connection import Kube
from rehearse.outputs import StackOutputs
from rehearse.record import utc_now


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Context:
    outputs: StackOutputs
    kube: Kube
    region: str
    #: boto3 client factory in the stack's region (the usual credential chain).
    aws: Callable[[str], Any]
    clock: Callable[[], datetime.datetime] = utc_now
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    progress: Callable[[str], None] = _progress
    #: The command's own options (argparse namespace as a dict).
    options: dict[str, Any] = field(default_factory=dict)
    #: The Pulumi project folder (--work-dir), for commands that change the stack's config.
    work_dir: Optional[Path] = None


def boto3_clients(region: str) -> Callable[[str], Any]:
    """One client per service, made on first use: a failover polls EC2 every half second, and
    a new client costs more than the call."""
    made: dict[str, Any] = {}

    def client(service: str) -> Any:
        if service not in made:
            import boto3
            from botocore.config import Config

            made[service] = boto3.session.Session().client(service, region_name=region, config=Config(
                retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=15))
        return made[service]

    return client
