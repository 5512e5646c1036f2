"""The real Pulumi engine on this machine: the ``pulumi`` CLI, its Python language host and
``pulumi-resource-kubernetes`` that engines/build.py builds, driven through Pulumi's own
Automation API (``pulumi.automation``), with nothing from the network.

    project = PulumiProject.copy_of(PROJECT_DIR, workdir / "project")   # the program, unchanged
    with PulumiEngine(bindir, workdir) as engine:
        stack = engine.stack(project, "dev")                             # local backend, passphrase
        stack.set_config({"eks-hybrid-lab:upToLayer": "network"})
        run = stack.preview()  /  stack.up(parallel=8)  /  stack.destroy()
        run.ok, run.error, run.steps(), run.order("delete"), stack.outputs()

What stays on this machine, and why each setting:

- ``PULUMI_HOME`` and the backend (``file://…``) are folders of the engine's own, so no login,
  no ``~/.pulumi`` and no Pulumi Cloud; secrets are passphrase-encrypted with a passphrase made
  for this engine (``PULUMI_CONFIG_PASSPHRASE``).
- ``PULUMI_SKIP_UPDATE_CHECK`` and ``PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION``: the CLI asks
  no server for a newer version and downloads no plugin; the plugins are the built binaries on
  ``PATH`` (the CLI's ``using pulumi-… from $PATH``). A plugin that is not there (the AWS
  provider cannot be built here) ends the command with an :class:`EngineError` naming it.
- AWS: the engine's environment names no credentials of the caller's and sends boto3 to a
  closed loopback port unless the caller gives an endpoint (a moto server), so nothing the
  engine runs can reach a real AWS endpoint.
- ``TMPDIR`` is a folder of the engine's own, removed with its home: what the CLI and its
  plugins leave there (pulumi-kubernetes leaves every kubeconfig it is given) stays off /tmp.
- Every CLI command runs in its own session with a deadline: past it, or on Ctrl-C, the
  whole group (the CLI, its language host, the program, the providers) is killed and the
  command raises, naming itself and the deadline.

The engine's own account of a run is its event stream (the Automation API's ``on_event``, over
a loopback gRPC server, ``--event-log``): :class:`Run` keeps every event with the moment it
arrived, so a test asks in which order the engine created, replaced and deleted resources and
how long each step took. Requires the ``pulumi`` Python SDK (the test requirements).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from control_plane import die_with_parent, engines_folder

from pulumi import automation as auto
from pulumi.automation._cmd import CommandResult, _MINIMUM_VERSION, _parse_and_validate_pulumi_version
from pulumi.automation.errors import create_command_error

HERE = Path(__file__).resolve().parent
#: build.py's groups the Pulumi tier needs (besides the core the Kubernetes side runs on).
PULUMI_GROUPS = ("pulumi", "pulumi-kubernetes")
#: The engine's files, by group, for the one line a skip or an error gives.
BINARIES = {"pulumi": ("pulumi", "pulumi-language-python", "pulumi-language-python-exec",
                       "pulumi-resource-pulumi-python"),
            "pulumi-kubernetes": ("pulumi-resource-kubernetes",)}
BUILD_COMMAND = "python3 engines/build.py all"
#: Where boto3 goes when the caller names no endpoint: port 9 (discard) on loopback, where
#: nothing listens, so a call fails at once instead of reaching AWS.
CLOSED_AWS_ENDPOINT = "http://127.0.0.1:9"
#: The caller's variables the engine must not see: credentials and endpoints of a real
#: account, a Pulumi Cloud token, the caller's own Pulumi home and backend.
_DROPPED = re.compile(r"^(AWS_|PULUMI_)")


class EngineError(RuntimeError):
    """A CLI command that failed or ran out of time: one line saying which, and why."""


def pulumi_engine_folder() -> tuple[Optional[Path], str]:
    """The folder with the core engines and the Pulumi parts, or None and one line naming the
    missing binaries and the command that builds them."""
    folder, why = engines_folder(*PULUMI_GROUPS)
    if folder is not None:
        missing = [name for group in PULUMI_GROUPS for name in BINARIES[group]
                   if not (folder / name).is_file()]
        if not missing:
            return folder, ""
        why = f"{folder} lacks {', '.join(missing)}"
    names = ", ".join(n for g in PULUMI_GROUPS for n in BINARIES[g][:1])
    return None, f"the real Pulumi engine is not built ({names}: {why}); build it with: {BUILD_COMMAND}"


@dataclass(frozen=True)
class Event:
    """One engine event (``pulumi.automation.EngineEvent``) and when it arrived (monotonic)."""

    event: Any
    arrived: float


@dataclass(frozen=True)
class Step:
    """One resource operation as the engine reported it: from its ``resourcePreEvent`` to its
    ``resOutputsEvent`` (or ``resOpFailedEvent``), by the events' sequence numbers."""

    urn: str
    type: str
    op: str
    started: int
    finished: Optional[int]
    seconds: Optional[float]
    failed: bool = False

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


@dataclass
class Run:
    """What one ``preview``/``up``/``destroy`` did: its events, its output, and how it ended."""

    command: str
    events: list[Event] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    error: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.error

    def steps(self) -> list[Step]:
        """Every resource step, in the order the steps started."""
        open_: dict[tuple[str, str], tuple[str, int, float]] = {}
        done: list[Step] = []
        for item in self.events:
            event = item.event
            for attr, failed in (("resource_pre_event", None), ("res_outputs_event", False),
                                 ("res_op_failed_event", True)):
                body = getattr(event, attr, None)
                if body is None:
                    continue
                meta = body.metadata
                key = (meta.urn, _op(meta.op))
                if failed is None:
                    open_[key] = (meta.type, event.sequence, item.arrived)
                    continue
                _, seq, arrived = open_.pop(key, (meta.type, event.sequence, item.arrived))
                done.append(Step(meta.urn, meta.type, key[1], seq, event.sequence,
                                 round(item.arrived - arrived, 3), failed))
        # A step that started and never ended (the command failed meanwhile).
        for (urn, op), (type_, seq, _) in open_.items():
            done.append(Step(urn, type_, op, seq, None, None, True))
        return sorted(done, key=lambda s: s.started)

    def order(self, op: str) -> list[str]:
        """The URNs of the steps of ``op`` (create, delete, replace, …) in the order they ended."""
        return [s.urn for s in sorted((s for s in self.steps() if s.op == op and s.finished),
                                      key=lambda s: s.finished)]

    def diagnostics(self) -> list[str]:
        """The engine's error and warning messages (the program's and the providers')."""
        out = []
        for item in self.events:
            diag = getattr(item.event, "diagnostic_event", None)
            if diag is not None and diag.severity in ("error", "warning"):
                out.append(f"{diag.severity}: {diag.message.strip()}")
        return out


def _op(op: Any) -> str:
    return getattr(op, "value", op)


class BoundedCommand(auto.PulumiCommand):
    """The Automation API's ``PulumiCommand`` on the built CLI, each command in a process
    group of its own with a deadline. The Automation API passes every CLI call through
    ``run``, so this is the one place the engine's processes are started and stopped."""

    def __init__(self, cli: Path, deadline: float):
        self.command = str(cli)
        self.deadline = deadline
        #: The session of each CLI command run so far (its pid: the CLI leads its session).
        self.sessions: list[int] = []
        env = {**_clean_env(os.environ), "PULUMI_SKIP_UPDATE_CHECK": "true"}
        try:
            version = subprocess.run([self.command, "version"], env=env, capture_output=True,
                                     text=True, timeout=30).stdout.strip()
        except subprocess.TimeoutExpired:
            raise EngineError(f"`{cli} version` did not answer in 30 s") from None
        self.version = _parse_and_validate_pulumi_version(_MINIMUM_VERSION, version.lstrip("v"),
                                                          False)

    def run(self, args: list[str], cwd: str, additional_env: Mapping[str, str],
            on_output: Optional[Callable[[str], Any]] = None,
            on_error: Optional[Callable[[str], Any]] = None) -> CommandResult:
        if "--non-interactive" not in args:
            args = ["--non-interactive", *args]
        env = {**_clean_env(os.environ), **additional_env, "PULUMI_AUTOMATION_API": "true"}
        process = subprocess.Popen([self.command, *args], cwd=cwd, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   preexec_fn=die_with_parent)
        self.sessions.append(process.pid)
        chunks: dict[str, list[str]] = {"out": [], "err": []}

        def pump(stream, callback, key):
            for line in iter(stream.readline, ""):
                line = line.rstrip("\n")
                chunks[key].append(line)
                if callback:
                    callback(line)
            stream.close()

        readers = [threading.Thread(target=pump, args=(process.stdout, on_output, "out"), daemon=True),
                   threading.Thread(target=pump, args=(process.stderr, on_error, "err"), daemon=True)]
        try:
            for reader in readers:
                reader.start()
            process.wait(self.deadline)
        except subprocess.TimeoutExpired:
            _kill_session(process)
            raise EngineError(f"`pulumi {' '.join(_shown(args))}` did not finish in "
                              f"{self.deadline:.0f} s; stopped it and every process it started "
                              f"(last output: {_last(chunks)})") from None
        except BaseException:
            _kill_session(process)
            raise
        finally:
            for reader in readers:
                reader.join(5)
        _kill_session(process)  # a plugin the CLI left behind goes with its session
        result = CommandResult(stdout="\n".join(chunks["out"]), stderr="\n".join(chunks["err"]),
                               code=process.returncode)
        if result.code != 0:
            raise create_command_error(result)
        return result


    def alive(self) -> list[int]:
        """The processes still alive in the sessions of the commands run so far (none, once
        every command has returned: each one's session is killed as it ends)."""
        return [pid for sid in self.sessions for pid in _session_members(sid)]


def _shown(args: list[str]) -> list[str]:
    return [a for a in args if a not in ("--non-interactive",) and not a.startswith("--event-log")
            and not a.startswith("tcp://")][:4]


def _last(chunks: dict[str, list[str]]) -> str:
    lines = [ln for ln in chunks["err"] + chunks["out"] if ln.strip()]
    return lines[-1].strip()[:200] if lines else "none"


def _kill_session(process: subprocess.Popen) -> None:
    """SIGKILL to the CLI's whole session: the CLI runs as a session leader, and it starts each
    plugin (the language host, the dynamic provider host, a provider) in a process group of its
    own, so a signal to its group alone would leave them running."""
    for _ in range(20):
        members = _session_members(process.pid)
        if not members:
            break
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        pass


def _carrying(variable: str) -> list[int]:
    """The live processes whose environment has ``variable`` (``NAME=value``)."""
    marker = variable.encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _session_members(sid: int) -> list[int]:
    """The live processes of session ``sid`` (field 6 of /proc/<pid>/stat)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state (after the command's closing parenthesis), fields[3] the session.
        if fields[0] != "Z" and int(fields[3]) == sid:
            members.append(int(stat.parent.name))
    return members


def _clean_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not _DROPPED.match(k)}


@dataclass(frozen=True)
class PulumiProject:
    """A folder the CLI runs as a project: ``Pulumi.yaml``, the program, and ``venv``, the
    virtualenv the project names, linked to this Python's so the CLI neither makes one nor
    installs anything."""

    path: Path

    @classmethod
    def copy_of(cls, source: Path, dest: Path,
                parts: tuple[str, ...] = ("Pulumi.yaml", "__main__.py", "requirements.txt",
                                          "stacks", "components")) -> "PulumiProject":
        """This repository's project, copied unchanged (``Pulumi.yaml`` byte for byte)."""
        dest.mkdir(parents=True, exist_ok=True)
        for part in parts:
            src = source / part
            if src.is_dir():
                shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copyfile(src, dest / part)
        return cls._with_venv(dest)

    @classmethod
    def program(cls, dest: Path, name: str, main: str, source: Path = HERE.parent,
                packages: tuple[str, ...] = ("components",)) -> "PulumiProject":
        """A project of a test's own: ``main`` as its ``__main__.py``, with ``packages`` of
        this repository copied beside it so the program uses the lab's own classes."""
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "Pulumi.yaml").write_text(
            f"name: {name}\nruntime:\n  name: python\n  options:\n    toolchain: pip\n"
            "    virtualenv: venv\n")
        (dest / "__main__.py").write_text(main)
        for package in packages:
            shutil.copytree(source / package, dest / package,
                            ignore=shutil.ignore_patterns("__pycache__"))
        return cls._with_venv(dest)

    @classmethod
    def _with_venv(cls, dest: Path) -> "PulumiProject":
        if sys.prefix == sys.base_prefix:
            raise EngineError("the real Pulumi engine runs the program in this Python's "
                              f"virtualenv, and {sys.executable} is not in one: run the tests "
                              "from a virtualenv (README)")
        venv = dest / _virtualenv_option(dest / "Pulumi.yaml")
        if not venv.exists():
            venv.symlink_to(sys.prefix, target_is_directory=True)
        return cls(dest)


def _virtualenv_option(project_file: Path) -> str:
    # runtime.options.virtualenv, read without a YAML parser: the project files here write it
    # as a plain scalar on its own line.
    found = re.search(r"^\s+virtualenv:\s*(\S+)\s*$", project_file.read_text(), re.M)
    return found.group(1).strip("'\"") if found else "venv"


class PulumiEngine:
    """The built CLI with a home, a local backend and a passphrase of its own, all under
    ``workdir``. Every command has ended when it returns (BoundedCommand), so ``close`` (or
    leaving the ``with``) only removes the home and the processes' TMPDIR; the backend's state
    stays for the test to read."""

    def __init__(self, bindir: Path, workdir: Path, *, deadline: float = 300,
                 aws_endpoint: Optional[str] = None, env: Optional[Mapping[str, str]] = None):
        missing = [n for g in PULUMI_GROUPS for n in BINARIES[g] if not (bindir / n).is_file()]
        if missing:
            raise EngineError(f"{bindir} lacks {', '.join(missing)}; build with: {BUILD_COMMAND}")
        self.bindir = bindir
        self.workdir = workdir
        self.home = workdir / "pulumi-home"
        self.backend = workdir / "pulumi-state"
        # TMPDIR of the engine's processes: pulumi-resource-kubernetes writes the kubeconfig it
        # is given to $TMPDIR/kubeconfig<n> at every Configure and never removes it
        # (provider/pkg/provider/util.go, writeKubeconfigToFile); here it goes with ``close``.
        self.tmp = workdir / "tmp"
        for folder in (self.home, self.backend, self.tmp):
            folder.mkdir(parents=True, exist_ok=True)
        self.passphrase = secrets.token_hex(16)
        self.command = BoundedCommand(bindir / "pulumi", deadline)
        self.env = {
            "PULUMI_HOME": str(self.home),
            "PULUMI_BACKEND_URL": f"file://{self.backend}",
            "PULUMI_CONFIG_PASSPHRASE": self.passphrase,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PATH": os.pathsep.join([str(bindir), str(Path(sys.prefix) / "bin"),
                                     os.environ.get("PATH", "")]),
            # boto3 (the cleanups) and the AWS CLI: a moto server of the caller's, or nothing.
            "AWS_ENDPOINT_URL": aws_endpoint or CLOSED_AWS_ENDPOINT,
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
            "TMPDIR": str(self.tmp),
            **(env or {}),
        }

    def __enter__(self) -> "PulumiEngine":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def close(self) -> None:
        # Every command's session was killed as it ended; a process that still carries this
        # engine's home (one that left its session, or outlived a kill of the test run) goes
        # now. Seen once: a language host alive after its command's deadline kill.
        for pid in _carrying(f"PULUMI_HOME={self.home}"):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def stack(self, project: PulumiProject, name: str, *, secrets_provider: str = "passphrase") -> "EngineStack":
        """The stack ``name`` of ``project`` in this engine's backend, made if it is new.
        ``pulumi stack init`` rewrites a stack file that is already there (it quotes numbers
        and booleans): write the stack file after this, with :meth:`EngineStack.write_stack_file`."""
        workspace = auto.LocalWorkspace(work_dir=str(project.path), pulumi_home=str(self.home),
                                        env_vars=self.env, pulumi_command=self.command,
                                        secrets_provider=secrets_provider)
        try:
            stack = auto.Stack.create_or_select(name, workspace)
        except auto.CommandError as error:
            raise EngineError(f"pulumi stack init {name} failed: {_first_error(str(error))}") from None
        return EngineStack(self, project, stack)


class EngineStack:
    def __init__(self, engine: PulumiEngine, project: PulumiProject, stack: auto.Stack):
        self.engine = engine
        self.project = project
        self.stack = stack
        self.name = stack.name

    @property
    def stack_file(self) -> Path:
        return self.project.path / f"Pulumi.{self.name}.yaml"

    def write_stack_file(self, text: str) -> None:
        """The stack file as given, with the ``encryptionsalt`` the passphrase provider wrote
        at ``stack init`` kept (secrets in the file are encrypted with it)."""
        old = self.stack_file.read_text() if self.stack_file.exists() else ""
        salt = re.search(r"^encryptionsalt:.*$", old, re.M)
        if salt and "encryptionsalt:" not in text:
            text = f"{salt.group(0)}\n{text}"
        self.stack_file.write_text(text)

    def set_config(self, values: Mapping[str, Any], *, secret: tuple[str, ...] = ()) -> None:
        for key, value in values.items():
            self.stack.set_config(key, auto.ConfigValue(value=str(value), secret=key in secret))

    def outputs(self) -> dict[str, Any]:
        return {k: v.value for k, v in self.stack.outputs().items()}

    def state(self) -> str:
        """The state file the engine wrote for this stack, as text (the local backend keeps
        it under ``.pulumi/stacks/<project>/<stack>.json``)."""
        files = sorted((self.engine.backend / ".pulumi" / "stacks").rglob(f"{self.name}.json"))
        return "\n".join(f.read_text() for f in files)

    def _locks(self) -> list[Path]:
        """The stack's lock files in the local backend (``.pulumi/locks/<org>/<project>/<stack>/``)."""
        return list((self.engine.backend / ".pulumi" / "locks").glob(f"*/*/{self.name}/*.json"))

    def preview(self, **options) -> Run:
        return self._run("preview", self.stack.preview, **options)

    def up(self, **options) -> Run:
        return self._run("up", self.stack.up, **options)

    def destroy(self, **options) -> Run:
        return self._run("destroy", self.stack.destroy, **options)

    def _run(self, command: str, call: Callable[..., Any], **options) -> Run:
        run = Run(command)
        lock = threading.Lock()

        def on_event(event: Any) -> None:
            with lock:
                run.events.append(Event(event, time.monotonic()))

        locks_before = set(self._locks())
        started = time.monotonic()
        try:
            result = call(on_event=on_event, color="never", **options)
            run.stdout = getattr(result, "stdout", "")
            run.stderr = getattr(result, "stderr", "")
        except EngineError as error:
            # Past the deadline. The killed CLI's lock on the stack would refuse every later
            # command ("the stack is currently locked"): it held it, so it goes with it.
            for stale in set(self._locks()) - locks_before:
                stale.unlink(missing_ok=True)
            # Say which steps were still under way when it was stopped.
            with lock:
                run.events.sort(key=lambda e: e.event.sequence)
            running = [f"{s.op} of {s.name}" for s in run.steps()
                       if s.finished is None and s.type != "pulumi:pulumi:Stack"]
            if running:
                raise EngineError(f"{error} while running: {', '.join(running)}") from None
            raise
        except auto.CommandError as error:
            run.stdout = getattr(error, "stdout", "") or ""
            run.stderr = getattr(error, "stderr", "") or ""
            run.error = _first_error(str(error))
        run.seconds = round(time.monotonic() - started, 3)
        with lock:
            run.events.sort(key=lambda e: e.event.sequence)
        if run.error:
            # The CLI's text ends in "update failed" after whatever the program and its plugins
            # printed (a traceback of the program's shutdown, say): the why is the first error
            # the engine reported in its events, with the resource it was for.
            for item in run.events:
                diag = getattr(item.event, "diagnostic_event", None)
                if diag is not None and diag.severity == "error" and \
                        not _GENERIC.search(f"error: {diag.message.strip()}"):
                    where = diag.urn.rsplit("::", 2)[-2:] if diag.urn else []
                    run.error = _first_error(f"error: {diag.message}") + (
                        f" ({where[1]}, {where[0].rsplit('$', 1)[-1]})" if len(where) == 2 else "")
                    break
        return run


#: The CLI's last word on a failed command, which names no cause.
_GENERIC = re.compile(r"^error: (update|preview|destroy|refresh) failed$|Resource monitor has "
                      r"terminated", re.I)


def _first_error(text: str) -> str:
    """The line that says why a command failed, out of the CLI's output."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for pattern in (r"missing configuration value", r"must be of type", r"validating stack config",
                    r"no resource plugin|could not .*plugin|plugin .* not found"):
        for line in lines:
            if re.search(pattern, line, re.I):
                return line
    # A Python traceback (the program's or a dynamic provider's): its exception line says why,
    # not the ``error: Traceback …`` line above it.
    for start, line in enumerate(lines):
        if line.endswith("Traceback (most recent call last):"):
            for at in range(start + 1, len(lines)):
                if re.match(r"[\w.]*(Exception|Error)\b[^ ]*: ", lines[at]):
                    return _with_continuation(lines, at)
            break
    for pattern in (r"^error:", r"Exception:|Error:"):
        for at, line in enumerate(lines):
            if re.search(pattern, line, re.I):
                return _with_continuation(lines, at)
    return lines[-1] if lines else "the command failed with no output"


def _with_continuation(lines: list[str], at: int) -> str:
    # A message line ending in a colon ("… Left:") introduces its reason on the next line.
    if lines[at].endswith(":") and at + 1 < len(lines):
        return f"{lines[at]} {lines[at + 1]}"
    return lines[at]
