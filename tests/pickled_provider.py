"""Runs a dynamic provider the way Pulumi does at destroy time: serialized into the state, then
unpickled and called in a separate process whose working directory is outside the project and
where the project's packages cannot be imported.

Each call is its own process, forked from one interpreter per test session that was started
the same way (``-I``, in ``/``, with only PATH and HOME) and has imported only the libraries
Pulumi's dynamic provider host and the providers themselves import (dill, pulumi, boto3) —
never the program. The process boundary of every case is kept; the half-second of imports a
fresh interpreter pays is paid once."""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
from time import monotonic as _monotonic  # bound here: tests may replace time.monotonic
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

#: The session's forking interpreter. It reads one request a line (JSON: code, argv, env and
#: the files for the case's stdout and stderr), forks, and answers the child's pid, then its
#: exit code. The child becomes what ``python -I -c code argv...`` run in ``/`` with ``env``
#: would be: its own environment, its own __main__ (emptied of the forker's names), its own
#: stdout and stderr; an uncaught exception prints its traceback and exits 1; SystemExit's
#: code is the exit code; at exit its threads are waited for and atexit runs.
_FORKER = textwrap.dedent("""
    import atexit, importlib.util, json, os, sys, threading, traceback
    import base64, dill, pulumi.dynamic, boto3  # what every case imports; not the program
    for package in ("components", "stacks", "tests"):
        assert importlib.util.find_spec(package) is None, package + " is importable"

    # What the interpreter set in its environment at start-up (LC_CTYPE, coercing the C locale
    # to UTF-8), as it would for each case's own interpreter.
    STARTED_WITH = {k: v for k, v in os.environ.items() if k not in ("PATH", "HOME")}

    def serve():
        answers = os.fdopen(os.dup(1), "w")
        for line in sys.stdin:
            request = json.loads(line)
            assert threading.active_count() == 1, "forking a process with threads"
            sys.stdout.flush(), sys.stderr.flush(), answers.flush()
            pid = os.fork()
            if pid == 0:
                answers.close()
                become(request)
            answers.write(f"{pid}\\n")
            answers.flush()
            _, status = os.waitpid(pid, 0)
            answers.write(f"{os.waitstatus_to_exitcode(status)}\\n")
            answers.flush()

    def become(request, sys=sys, os=os, traceback=traceback, threading=threading, atexit=atexit,
               started_with=STARTED_WITH):
        os.chdir("/")
        os.environ.clear()
        os.environ.update(started_with)
        os.environ.update(request["env"])
        # sys.stdout and sys.stderr stay the objects the interpreter made (buffered as for a
        # pipe, as subprocess.run gives them); their descriptors become the case's files.
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.argv = ["-c", *request["argv"]]
        main = sys.modules["__main__"].__dict__
        for name in [name for name in main if not name.startswith("__")]:
            del main[name]
        code = 0
        try:
            exec(compile(request["code"], "<string>", "exec"), main)
        except SystemExit as exit:
            if exit.code is None:
                code = 0
            elif isinstance(exit.code, int):
                code = exit.code & 0xFF
            else:
                print(exit.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        # What the interpreter does at exit that a case can see: it waits for the threads
        # left running, runs the atexit functions, flushes stdout and stderr. Not its teardown
        # of every module, which in a forked copy costs 0.2 s of copied pages.
        threading._shutdown()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)

    serve()
""")


class _Forker:
    def __init__(self):
        self.errors = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-c", _FORKER], cwd="/", env=_base_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors, text=True,
            bufsize=1)
        self.lock = threading.Lock()
        self.pending = b""
        atexit.register(self.close)

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=30)

    def _answer(self, timeout: Optional[float]) -> str:
        """The forker's next line ("" if none came within ``timeout`` seconds). Read from the
        descriptor with a buffer of our own: the pid and the exit code can arrive together."""
        deadline = None if timeout is None else _monotonic() + timeout
        fd = self.process.stdout.fileno()
        while b"\n" not in self.pending:
            left = None if deadline is None else max(0.0, deadline - _monotonic())
            if not select.select([fd], [], [], left)[0]:
                return ""
            chunk = os.read(fd, 4096)
            if not chunk:
                self.errors.seek(0)
                raise RuntimeError("the forking interpreter ended: "
                                   + self.errors.read().decode(errors="replace"))
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode()

    def run(self, code: str, argv: list[str], env: Mapping[str, str],
            timeout: float) -> subprocess.CompletedProcess:
        with self.lock, tempfile.TemporaryDirectory() as scratch:
            out, err = os.path.join(scratch, "stdout"), os.path.join(scratch, "stderr")
            self.process.stdin.write(json.dumps({"code": code, "argv": argv, "env": dict(env),
                                                 "stdout": out, "stderr": err}) + "\n")
            self.process.stdin.flush()
            pid = int(self._answer(None))
            answer = self._answer(timeout)
            if not answer:
                os.kill(pid, signal.SIGKILL)
                self._answer(None)
            command = [sys.executable, "-I", "-c", code, *argv]
            with open(out) as stdout, open(err) as stderr:
                done = subprocess.CompletedProcess(command, int(answer or -9), stdout.read(),
                                                   stderr.read())
            if not answer:
                raise subprocess.TimeoutExpired(command, timeout, done.stdout, done.stderr)
            return done


_forker: Optional[_Forker] = None


def _base_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root")}


def run_pickled(provider: Any, method: str, *args: Any, prelude: str = "",
                env: Optional[Mapping[str, str]] = None,
                timeout: float = 60) -> subprocess.CompletedProcess:
    """Calls ``provider.<method>(*args)`` in a fresh process from the serialized provider.

    ``prelude`` is Python run first in that process (for example, to stub boto3). The child
    gets only ``env`` plus PATH/HOME; it runs as ``-I`` (no PYTHONPATH, no script dir) in ``/``.
    """
    global _forker
    blob = serialize_provider(provider)
    child_env = _base_env()
    child_env.update(env or {})
    if _forker is None or _forker.process.poll() is not None:
        _forker = _Forker()
    return _forker.run(_RUNNER.replace("{prelude}", textwrap.dedent(prelude)),
                       [blob, method, json.dumps(list(args))], child_env, timeout)


def result_of(done: subprocess.CompletedProcess) -> Any:
    """The JSON result printed by a successful ``run_pickled``."""
    assert done.returncode == 0, done.stderr
    [line] = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):])
