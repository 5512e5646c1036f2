"""What a collector works with: the stack's outputs, the cluster, AWS in the stack's region, a
clock, and a way to show progress."""

from __future__ import annotations

import datetime
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from rehearse.lab.connection import Kube
from rehearse.lab.outputs import StackOutputs
from rehearse.run.record import utc_now


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Context:
    outputs: StackOutputs
    kube: Kube
    region: str
    #: boto3 client factory in the stack's region, with the stack's credentials (its
    #: aws:profile and aws:assumeRoles, in an account of its aws:allowedAccountIds).
    aws: Callable[[str], Any]
    clock: Callable[[], datetime.datetime] = utc_now
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    progress: Callable[[str], None] = _progress
    #: The command's own options (argparse namespace as a dict).
    options: dict[str, Any] = field(default_factory=dict)
    #: The Pulumi project folder (--work-dir), for commands that change the stack's config.
    work_dir: Optional[Path] = None


#: botocore's data loader, by the data path it reads, shared by the sessions this process
#: makes: a new session's own loader parses the service's model and the endpoint rules again
#: (JSON, 0.1-0.2 s of CPU a client), files that do not change while the process runs (a
#: command run by `rehearse all` after another, or each command run of the tests). Only the
#: parsed files are shared: credentials, config and region are still each session's own.
_LOADERS: dict[Any, Any] = {}
_LOADERS_LOCK = threading.Lock()


def boto3_session() -> Any:
    """``boto3.session.Session()``, reading botocore's data files through the shared loader.
    Relies on boto3's Session adding its own data folder to the session's loader (its
    ``_setup_loader``); the duplicate that adds to a shared loader is removed below."""
    import boto3
    import botocore.session

    core = botocore.session.get_session()
    key = core.get_config_variable("data_path")
    with _LOADERS_LOCK:
        shared = _LOADERS.get(key)
        if shared is not None:
            core.register_component("data_loader", shared)
        session = boto3.session.Session(botocore_session=core)
        loader = core.get_component("data_loader")
        if shared is None:
            _LOADERS[key] = loader
        else:
            # boto3 appends its own data folder to the loader's search paths on every session:
            # once is what a session of its own would have.
            paths, own = loader.search_paths, os.path.join(os.path.dirname(boto3.session.__file__), "data")
            while paths.count(own) > 1:
                del paths[len(paths) - 1 - paths[::-1].index(own)]
    return session


def boto3_clients(region: str, account: Any = None) -> Callable[[str], Any]:
    """One client per service, made on first use: a failover polls EC2 every half second, and
    a new client costs more than the call. ``account``: the stack's ``AwsAccount``
    (components/aws_account.py), whose session the clients come from, made as the cleanups
    make theirs; None or one without settings: the environment's credentials."""
    made: dict[str, Any] = {}
    sessions: list[Any] = []

    def session() -> Any:
        if account is None or not (account.profile or account.assume_roles or account.pinned):
            return boto3_session()
        if not sessions:
            # Once: the roles are assumed and the account checked once per run.
            sessions.append(account.boto3_session(region))
        return sessions[0]

    def client(service: str) -> Any:
        if service not in made:
            from botocore.config import Config

            made[service] = session().client(service, region_name=region, config=Config(
                retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=15))
        return made[service]

    return client
