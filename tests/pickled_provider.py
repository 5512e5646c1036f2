"""Runs a dynamic provider the way Pulumi does at destroy time: serialized into the state, then
unpickled and called in a separate process whose working directory is outside the project and
where the project's packages cannot be imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any, Mapping, Optional

from pulumi.dynamic.dynamic import serialize_provider

_RUNNER = textwrap.dedent("""
    import base64, importlib.util, json, sys
    import dill
    for package in ("components", "stacks", "tests"):
        assert importlib.util.find_spec(package) is None, package + " is importable"
    {prelude}
    provider = dill.loads(base64.b64decode(sys.argv[1]))
    method, args = sys.argv[2], json.loads(sys.argv[3])
    result = getattr(provider, method)(*args)
    print("RESULT " + json.dumps(getattr(result, "__dict__", result), default=str))
""")


def run_pickled(provider: Any, method: str, *args: Any, prelude: str = "",
                env: Optional[Mapping[str, str]] = None,
                timeout: float = 60) -> subprocess.CompletedProcess:
    """Calls ``provider.<method>(*args)`` in a fresh interpreter from the serialized provider.

    ``prelude`` is Python run first in that process (for example, to stub boto3). The child
    gets only ``env`` plus PATH/HOME; it runs with ``-I`` (no PYTHONPATH, no script dir) in ``/``.
    """
    blob = serialize_provider(provider)
    child_env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root")}
    child_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-I", "-c", _RUNNER.replace("{prelude}", textwrap.dedent(prelude)),
         blob, method, json.dumps(list(args))],
        cwd="/", env=child_env, capture_output=True, text=True, timeout=timeout)


def result_of(done: subprocess.CompletedProcess) -> Any:
    """The JSON result printed by a successful ``run_pickled``."""
    assert done.returncode == 0, done.stderr
    [line] = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):])
