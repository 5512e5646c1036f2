"""A stand-in for the `pulumi` CLI, for the Automation API (which shells out to it).

It answers the calls the rehearsal's Automation API use makes — version, stack select, stack ls,
stack output, config get/set/rm, up and stack history (which ``up`` reads after the update) —
from a JSON state file (``FAKE_PULUMI_STATE``: ``{"selected": name, "stacks": {name: {"outputs":
{...}, "secrets": [keys], "config": {key: value}}}}``), records every call in ``FAKE_PULUMI_LOG``,
and refuses anything else with exit 255 and the call in stderr, so a new call cannot slip by.

``up`` plays the lab's program for what the rehearsal changes: the ``demo2`` output's scenario
and ``karpenterPodDeletionCostManagement`` follow ``eks-hybrid-lab:burstScenario`` (default A).
A state key ``"up_fails": n`` makes the next n updates fail, as a refused update would.

The stack is addressed as the CLI does: every command takes ``--stack``, and only ``stack
select`` changes the workspace's current stack (``"selected"``, which ``stack ls --json`` shows
as ``current``); ``stack --show-name --stack X`` proves X exists without selecting it.

``preview`` streams the engine events the Automation API reads (a ``resourcePreEvent`` a step, a
``summaryEvent`` with ``resourceChanges``, over gRPC to ``--event-log tcp://...`` as the CLI after
3.205 does, or to a file) for the lab's program: what changed between the config last applied
(``"deployed"``) and the config now — burstScenario: Kyverno's ClusterPolicy (B, C), the
Karpenter controller's release (its gate in C), DeletionCostRanks (C); gatewayInstanceType: the
gateway node group's launch template and node group — plus a state's ``"pending_changes"``
(steps of an unrelated change waiting on the stack), which ``up`` applies too.

``up`` and ``preview`` take the stack's lock (``"lock"``); a second one while it is held fails
with the DIY backend's words (pulumi/pulumi pkg/backend/diy/lock.go). ``"up_seconds"`` keeps an
``up``'s steps in flight that long; SIGINT then behaves as the CLI's cancellation scope
(pkg/backend/cancellation_scope.go): the first asks to cancel — the process keeps running until
the in-flight steps finish (``"cancel_seconds"``), releases the lock and fails with "update
canceled"; a second terminates at once, leaving the steps as ``pending_operations`` (``stack
export``) and the lock file (``cancel`` removes it). A write to a closed stdout ends it the same
way, as SIGPIPE ends the Go CLI.

Before ``up`` or ``preview`` runs anything it checks the stack's config the way the real CLI
does (``offline/pulumi_cli.py``, ported from pulumi/pulumi ``mergeConfig``): the project is the
``Pulumi.yaml`` of the working directory the Automation API runs it in, the stack's config is
its ``Pulumi.<stack>.yaml`` there (if any) with the state's ``config`` set over it (what
``config set`` would have written), and a refused config ends the command with the CLI's
message and exit 255 — so a rehearsal test fails where the real CLI would refuse the stack.
"""

from __future__ import annotations

import os
import sys

# Each call is a fresh interpreter, so what only some commands need is imported where they need
# it (pathlib, datetime and offline.pulumi_cli with yaml for up and preview's config check,
# socket for a preview's event log): `pulumi version` or `stack output` start no faster
# otherwise. For the same reason `install` starts it with `python -S` (no site: ~3 ms a call);
# the config check, which imports an installed package (yaml), runs `site.main()` first.


class json:  # noqa: N801 - stands in for the module, same names
    """``json.loads``/``json.dumps`` with their defaults, byte for byte, made from the C
    scanner and encoder the json package itself uses: importing json imports re (with enum,
    collections, functools) and compiles its patterns, ~7 ms of a ~20 ms `stack output`."""

    import _json

    class _Options:
        strict, object_hook, object_pairs_hook = True, None, None
        parse_float, parse_int = float, int
        parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__

    _scan = _json.make_scanner(_Options)

    @staticmethod
    def _default(o):
        raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")

    _encode = _json.make_encoder({}, _default, _json.encode_basestring_ascii, None, ": ", ", ",
                                 False, False, True)

    @classmethod
    def loads(cls, text: str):
        text = text.strip(" \t\n\r")
        try:
            value, end = cls._scan(text, 0)
        except StopIteration as err:
            raise ValueError(f"Expecting value: char {err.value}") from None
        if end != len(text):
            raise ValueError(f"Extra data: char {end}")
        return value

    @classmethod
    def dumps(cls, value) -> str:
        return "".join(cls._encode(value, 0))


def _with_site() -> None:
    """The site-packages a normal start would have put on sys.path (run with -S)."""
    if not sys.flags.no_site:
        return
    import site

    if not any(p.endswith("site-packages") for p in sys.path):
        site.main()

SCENARIO_KEY = "eks-hybrid-lab:burstScenario"
GATEWAY_KEY = "eks-hybrid-lab:gatewayInstanceType"
PROJECT = "eks-hybrid-lab"
DEMO = "eks-hybrid-lab:layer:Demo"
KARPENTER = "eks-hybrid-lab:layer:Karpenter$eks-hybrid-lab:karpenter:Karpenter"
GATEWAY_NODES = ("eks-hybrid-lab:layer:Gateway$eks-hybrid-lab:gateway:GatewayNodes"
                 "$eks-hybrid-lab:eks:ManagedNodeGroup")
#: Resources of the program that no switch touches (the "same" of a change summary).
UNCHANGED = 60


def urn(stack: str, chain: str, name: str) -> str:
    return f"urn:pulumi:{stack}::{PROJECT}::{chain}::{name}"


def program_steps(stack: str, old: dict, new: dict) -> list[dict]:
    """The steps the lab's program takes from config ``old`` to ``new``, for what a switch
    changes: [{"op", "urn", "type"}] (stacks/layers/demo.py, karpenter.py, gateway.py)."""
    steps = []
    before, after = old.get(SCENARIO_KEY, "A"), new.get(SCENARIO_KEY, "A")

    def present(kind: str, chain: str, name: str, was: bool, now: bool) -> None:
        if was != now:
            steps.append({"op": "create" if now else "delete", "type": kind,
                          "urn": urn(stack, f"{chain}${kind}", name)})

    present("kubernetes:kyverno.io/v1:ClusterPolicy", f"{DEMO}$eks-hybrid-lab:demo:Kyverno",
            "demo-kyverno-deletion-cost", before in "BC", after in "BC")
    if (before == "C") != (after == "C"):
        kind = "kubernetes:helm.sh/v3:Release"
        steps.append({"op": "update", "type": kind,
                      "urn": urn(stack, f"{KARPENTER}${kind}", "karpenter-karpenter-controller-release")})
    present("pulumi-python:dynamic/cleanup:DeletionCostRanks", DEMO, "demo-deletion-cost-ranks",
            before == "C", after == "C")
    if old.get(GATEWAY_KEY, "m6i.large") != new.get(GATEWAY_KEY, "m6i.large"):
        for kind, name in (("aws:ec2/launchTemplate:LaunchTemplate", "gateway-nodes-group-lt"),
                           ("aws:eks/nodeGroup:NodeGroup", "gateway-nodes-group")):
            steps.append({"op": "update", "type": kind, "urn": urn(stack, f"{GATEWAY_NODES}${kind}", name)})
    return steps


def program_step(op: str, kind: str, chain: str, name: str, stack: str = "dev") -> dict:
    """A step of another change pending on the stack (``"pending_changes"``)."""
    return {"op": op, "type": kind, "urn": urn(stack, chain, name)}


def _change_summary(steps: list[dict]) -> dict:
    counts: dict[str, int] = {"same": UNCHANGED}
    for step in steps:
        counts[step["op"]] = counts.get(step["op"], 0) + 1
    return counts


def _events(stack: str, steps: list[dict]) -> list[dict]:
    """The engine events of a preview, as the CLI's event log carries them (apitype.EngineEvent
    JSON: preludeEvent, resourcePreEvent{metadata{op, urn, type, ...}}, summaryEvent, cancelEvent)."""
    import datetime

    now = int(datetime.datetime.now().timestamp())
    root = {"op": "same", "type": "pulumi:pulumi:Stack", "urn": urn(stack, "pulumi:pulumi:Stack", f"{PROJECT}-{stack}")}
    events: list[dict] = [{"preludeEvent": {"config": {}}}]
    for step in [root, *steps]:
        events.append({"resourcePreEvent": {"metadata": {**step, "provider": "", "keys": [], "diffs": []},
                                            "planning": True}})
    events.append({"summaryEvent": {"maybeCorrupt": False, "durationSeconds": 1,
                                    "resourceChanges": _change_summary(steps), "PolicyPacks": {}}})
    events.append({"cancelEvent": {}})
    return [{"sequence": i, "timestamp": now, **e} for i, e in enumerate(events)]


#: The Automation API's event service (pulumi/pulumi proto/pulumi/events.proto).
STREAM_EVENTS = "/pulumirpc.Events/StreamEvents"


def event_request(event: dict) -> bytes:
    """``pulumirpc.EventRequest{string event = 1}`` carrying ``event``'s JSON, in protobuf's
    wire format: field 1 as length-delimited (tag byte 0x0a), the length as a varint, the UTF-8
    text — the bytes ``events_pb2.EventRequest(event=...).SerializeToString()`` makes, written
    here because importing the pulumi SDK for its generated messages costs a preview ~0.25 s."""
    text = json.dumps(event).encode()
    length, varint = len(text), bytearray()
    while True:
        low, length = length & 0x7F, length >> 7
        varint.append(low | (0x80 if length else 0))
        if not length:
            break
    return b"\x0a" + bytes(varint) + text


def _send_events(target: str, events: list[dict]) -> None:
    if target.startswith("tcp://"):
        # The call the stub events_pb2_grpc.EventsStub makes: a client stream, an Empty back.
        _grpc_client_stream(target.removeprefix("tcp://"), STREAM_EVENTS,
                            [event_request(e) for e in events], timeout=10)
    else:
        with open(target, "a") as log:
            for event in events:
                log.write(json.dumps(event) + "\n")


def _grpc_client_stream(address: str, method: str, messages: list[bytes], timeout: float) -> None:
    """A client-streaming gRPC call, by hand over HTTP/2 (RFC 9113, and gRPC's PROTOCOL-HTTP2
    framing: each message a 0 byte, its length in 4 bytes, its bytes), because importing grpcio
    costs a preview ~55 ms of its ~75. It sends what a grpcio channel sends — the preface,
    SETTINGS, the request HEADERS (HPACK, no Huffman, no indexing), the messages in DATA frames
    within the peer's flow-control windows, END_STREAM — answers the server's SETTINGS and PING,
    and returns once the server ends the stream; a server that ends it without a response
    message (a failed status: trailers only, or RST_STREAM/GOAWAY) fails the call, as grpcio's
    RpcError does."""
    import _socket  # socket's own C module: socket.py imports enum (~4 ms) for its constants

    def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
        return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload

    def literal(name: bytes, value: bytes) -> bytes:
        # "Literal Header Field without Indexing -- New Name", lengths in one 7-bit prefix byte.
        assert len(name) < 127 and len(value) < 127
        return b"\x00" + bytes((len(name),)) + name + bytes((len(value),)) + value

    headers = (b"\x83\x86"  # static table: ":method: POST", ":scheme: http"
               + literal(b":path", method.encode()) + literal(b":authority", address.encode())
               + literal(b"te", b"trailers") + literal(b"content-type", b"application/grpc")
               + literal(b"grpc-timeout", f"{int(timeout)}S".encode()))
    body = b"".join(b"\x00" + len(m).to_bytes(4, "big") + m for m in messages)
    host, port = address.rsplit(":", 1)
    family, socktype, proto, _, where = _socket.getaddrinfo(host.strip("[]"), int(port), 0, _socket.SOCK_STREAM)[0]
    sock = _socket.socket(family, socktype, proto)
    try:
        sock.settimeout(timeout)
        sock.connect(where)
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(0x4, 0, 0) + frame(0x1, 0x4, 1, headers))
        received = bytearray()

        def read(n: int) -> bytes:
            while len(received) < n:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError(f"gRPC {method}: the server closed the connection")
                received.extend(chunk)
            out = bytes(received[:n])
            del received[:n]
            return out

        initial = connection_window = stream_window = 65535
        sent, answered, ended = 0, False, not body
        if not body:
            sock.sendall(frame(0x0, 0x1, 1))
        while True:
            while not ended and min(connection_window, stream_window) > 0:
                n = min(len(body) - sent, connection_window, stream_window, 16384)
                ended = sent + n == len(body)
                sock.sendall(frame(0x0, 0x1 if ended else 0, 1, body[sent:sent + n]))
                sent, connection_window, stream_window = sent + n, connection_window - n, stream_window - n
            head = read(9)
            kind, flags, stream = head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
            payload = read(int.from_bytes(head[:3], "big"))
            if kind == 0x4 and not flags & 0x1:  # SETTINGS: INITIAL_WINDOW_SIZE moves the stream's
                for i in range(0, len(payload), 6):
                    if int.from_bytes(payload[i:i + 2], "big") == 0x4:
                        value = int.from_bytes(payload[i + 2:i + 6], "big")
                        stream_window, initial = stream_window + value - initial, value
                sock.sendall(frame(0x4, 0x1, 0))
            elif kind == 0x6 and not flags & 0x1:  # PING
                sock.sendall(frame(0x6, 0x1, 0, payload))
            elif kind == 0x8:  # WINDOW_UPDATE
                increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
                if stream == 0:
                    connection_window += increment
                elif stream == 1:
                    stream_window += increment
            elif kind == 0x0 and stream == 1:  # DATA: the response message (Empty: 5 bytes)
                padding = payload[0] + 1 if flags & 0x8 else 0
                answered = answered or len(payload) > padding
                if flags & 0x1:
                    break
            elif kind == 0x1 and stream == 1 and flags & 0x1:  # trailers, END_STREAM
                break
            elif (kind == 0x3 and stream == 1) or kind == 0x7:  # RST_STREAM, GOAWAY
                break
    finally:
        sock.close()
    if not answered:
        raise ConnectionError(f"gRPC {method}: the server ended the call without a response")


class _State:
    """The state file, read and written under an flock: an interrupted `up` and the restore's
    commands are separate processes that write it concurrently."""

    def __init__(self, path: str):
        self.path = path

    def read(self) -> dict:
        return json.loads(open(self.path).read())

    def update(self, change) -> dict:
        import fcntl

        with open(self.path + ".flock", "a") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            state = self.read()
            change(state)
            tmp = self.path + f".{os.getpid()}.tmp"
            open(tmp, "w").write(json.dumps(state))
            os.replace(tmp, self.path)
            return state


def _lock_error(name: str, lock: dict) -> str:
    home = os.environ.get("PULUMI_HOME", "~/.pulumi")
    return ("the stack is currently locked by 1 lock(s). Either wait for the other process(es) to "
            "end or delete the lock file with `pulumi cancel`.\n"
            f"  file://{home}/.pulumi/locks/organization/{PROJECT}/{name}/{lock['id']}.json: "
            f"created by {lock['username']}@{lock['hostname']} (pid {lock['pid']}) at {lock['timestamp']}")


def _say(text: str, stream=None) -> None:
    """print, but a closed pipe ends the process as SIGPIPE ends the Go CLI."""
    stream = stream or sys.stdout
    try:
        stream.write(text + "\n")
        stream.flush()
    except BrokenPipeError:
        raise _Terminated("SIGPIPE") from None


class _Terminated(Exception):
    pass


def main(argv: list[str]) -> int:
    state_path = os.environ["FAKE_PULUMI_STATE"]
    with open(os.environ["FAKE_PULUMI_LOG"], "a") as log:
        log.write(json.dumps(argv) + "\n")
    store = _State(state_path)
    state = store.read()
    if any("deployed" not in stack for stack in state["stacks"].values()):
        # What was last applied: the config as the first command finds it.
        def deployed(st: dict) -> None:
            for stack in st["stacks"].values():
                stack.setdefault("deployed", dict(stack.get("config", {})))
        state = store.update(deployed)
    args = [a for a in argv if a not in ("--non-interactive",)]

    def option(name: str):
        return args[args.index(name) + 1] if name in args else None

    if args[:1] == ["version"]:
        print("v3.210.0")
        return 0
    if args[:2] == ["stack", "select"]:
        name = option("--stack") or (args[2] if len(args) > 2 else None)
        if name not in state["stacks"]:
            print(f"error: no stack named '{name}' found", file=sys.stderr)
            return 255
        state["selected"] = name
        open(state_path, "w").write(json.dumps(state))
        return 0
    if args[:1] == ["stack"] and "--show-name" in args:
        # `pulumi stack --stack X`: shows X, selects nothing.
        name = option("--stack") or state.get("selected")
        if name not in state["stacks"]:
            print(f"error: no stack named '{name}' found", file=sys.stderr)
            return 255
        print(name)
        return 0
    if args[:2] == ["stack", "export"]:
        name = option("--stack") or state.get("selected")
        stack = state["stacks"][name]
        print(json.dumps({"version": 3, "deployment": {
            "manifest": {"time": "2026-12-01T09:00:00Z", "magic": "", "version": "v3.210.0"},
            "resources": [], "pending_operations": stack.get("pending_operations", [])}}))
        return 0
    if args[:1] == ["cancel"]:
        name = option("--stack") or state.get("selected")
        store.update(lambda st: st["stacks"][name].pop("lock", None))
        print(f"The currently running update for '{name}' has been canceled!")
        return 0
    if args[:2] == ["stack", "ls"] and "--json" in args:
        print(json.dumps([{"name": name, "current": name == state.get("selected"),
                           "updateInProgress": False} for name in state["stacks"]]))
        return 0
    if args[:2] == ["stack", "output"] and "--json" in args:
        name = option("--stack") or state.get("selected")
        stack = state["stacks"][name]
        outputs = dict(stack["outputs"])
        if "--show-secrets" not in args:
            outputs = {k: ("[secret]" if k in stack.get("secrets", []) else v)
                       for k, v in outputs.items()}
        print(json.dumps(outputs))
        return 0
    if args[:2] == ["config", "get"] and "--json" in args:
        name, key = option("--stack") or state.get("selected"), args[2]
        config = state["stacks"][name].setdefault("config", {})
        if key not in config:
            print(f"error: configuration key '{key}' not found for stack '{name}'", file=sys.stderr)
            return 255
        print(json.dumps({"value": config[key], "secret": False}))
        return 0
    if args[:2] == ["config", "set"] and "--" in args:
        name, key = option("--stack") or state.get("selected"), args[2]
        value = args[args.index("--") + 1]
        store.update(lambda st: st["stacks"][name].setdefault("config", {}).__setitem__(key, value))
        return 0
    if args[:2] == ["config", "rm"]:
        name, key = option("--stack") or state.get("selected"), args[2]
        store.update(lambda st: st["stacks"][name].setdefault("config", {}).pop(key, None))
        return 0
    if args[:1] in (["up"], ["preview"]):
        name = option("--stack") or state.get("selected")
        refusal = _config_refusal(name, state["stacks"][name].get("config", {}))
        if refusal:
            print(f"error: {refusal}", file=sys.stderr)
            return 255
        try:
            return _update(store, name, args, option("--event-log"))
        except _Terminated:
            return 255
    if args[:2] == ["stack", "history"] and "--json" in args:
        name = option("--stack") or state.get("selected")
        print(json.dumps(state["stacks"][name].get("history", [])[:1]))
        return 0
    print(f"fake pulumi: unexpected call {argv}", file=sys.stderr)
    return 255


def _stamp() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _update(store: _State, name: str, args: list[str], event_log) -> int:
    """``preview`` or ``up`` under the stack's lock."""
    import _signal as signal  # signal.py imports enum (~4 ms) for its constants
    import time

    preview = args[:1] == ["preview"]
    me = {"id": f"lock-{os.getpid()}", "pid": os.getpid(), "username": "presenter",
          "hostname": "laptop", "timestamp": _stamp()}
    held: dict = {}

    def take(state: dict) -> None:
        stack = state["stacks"][name]
        if stack.get("lock"):
            held["lock"] = stack["lock"]
            return
        stack["lock"] = me
        state.setdefault("timeline", []).append([os.getpid(), "start", args[0], time.time()])

    interrupts: list[float] = []
    if not preview:
        # The CLI's cancellation scope is set up before the update takes the lock, so a Ctrl-C
        # once the update has started (its "start" below) always reaches it.
        signal.signal(signal.SIGINT, lambda *_: interrupts.append(time.monotonic()))
    state = store.update(take)
    if held:
        print(f"error: {_lock_error(name, held['lock'])}", file=sys.stderr)
        return 255
    stack = state["stacks"][name]
    steps = program_steps(name, stack["deployed"], stack.get("config", {})) + \
        [{k: step[k] for k in ("op", "type", "urn")} for step in stack.get("pending_changes", [])]

    def release(state: dict, result: str) -> None:
        state["stacks"][name].pop("lock", None)
        state.setdefault("timeline", []).append([os.getpid(), "end", args[0], time.time(), result])

    if preview:
        _say(f"Previewing update ({name})")
        if event_log:
            _send_events(event_log, _events(name, steps))
        _say(f"Resources: {', '.join(f'{n} to {op}' for op, n in _change_summary(steps).items() if op != 'same')}"
             f" {UNCHANGED} unchanged")
        store.update(lambda st: release(st, "previewed"))
        return 0

    def terminated(st: dict) -> None:
        # Terminated mid-update: the steps in flight stay pending, the lock file stays.
        st["stacks"][name]["pending_operations"] = [
            {"resource": {"urn": step["urn"], "type": step["type"]},
             "type": {"create": "creating", "delete": "deleting"}.get(step["op"], "updating")}
            for step in steps]
        st.setdefault("timeline", []).append([os.getpid(), "terminated", args[0], time.time()])

    try:
        _say(f"Updating ({name})")
        deadline = time.monotonic() + float(state.get("up_seconds") or 0)
        cancelled_at = None
        while time.monotonic() < deadline or (cancelled_at is not None and time.monotonic() < cancelled_at):
            if len(interrupts) >= 2:
                _say("^C received; terminating")
                raise _Terminated("SIGINT")
            if interrupts and cancelled_at is None:
                _say("^C received; cancelling. If you would like to terminate immediately, press ^C again.")
                _say("Note that terminating immediately may lead to orphaned resources and other inconsistencies.")
                cancelled_at = interrupts[0] + float(state.get("cancel_seconds") or 0.5)
                deadline = 0.0
            time.sleep(0.02)
    except _Terminated:
        store.update(terminated)
        raise

    def finish(st: dict) -> None:
        stack = st["stacks"][name]
        if st.get("up_fails") and not interrupts:
            st["up_fails"] -= 1
            release(st, "failed")
            return
        # The steps in flight finish (also when cancelled): the config is applied.
        stack["deployed"] = dict(stack.get("config", {}))
        stack.pop("pending_changes", None)
        scenario = stack.setdefault("config", {}).get(SCENARIO_KEY, "A")
        outputs = stack.setdefault("outputs", {})
        if isinstance(outputs.get("demo2"), dict):
            outputs["demo2"] = {**outputs["demo2"], "scenario": scenario}
        outputs["karpenterPodDeletionCostManagement"] = scenario == "C"
        stamp = _stamp()
        stack.setdefault("history", []).insert(0, {
            "kind": "update", "startTime": stamp, "endTime": stamp, "message": "",
            "environment": {}, "result": "failed" if interrupts else "succeeded",
            "version": len(stack["history"]) + 1,
            "config": {k: {"value": v, "secret": False} for k, v in stack["config"].items()},
            "resourceChanges": _change_summary(steps)})
        release(st, "canceled" if interrupts else "succeeded")

    failing = bool(state.get("up_fails"))
    final = store.update(finish)
    if failing and not interrupts:
        _say("error: update failed", sys.stderr)
        return 255
    if interrupts:
        # pkg/resource/deploy/deployment_executor.go: reportExecResult("canceled").
        _say("error: update canceled", sys.stderr)
        return 255
    scenario = final["stacks"][name]["config"].get(SCENARIO_KEY, "A")
    _say(f"Resources: {len(steps)} changed, {UNCHANGED} unchanged ({SCENARIO_KEY}={scenario})")
    return 0


def _config_refusal(stack: str, state_config: dict) -> str | None:
    """The CLI's config check before the program runs; None when the stack passes.

    The check is a function of the stack's name, the two files' text and the state's config, so
    its answer is kept for the test run under exactly those (``FAKE_PULUMI_CACHE``, made by
    ``install``): most updates of a run check a config an earlier one checked, and the check
    costs an update ~40 ms (yaml, dataclasses, offline.pulumi_cli)."""
    cwd = os.getcwd()
    if not os.path.exists(os.path.join(cwd, "Pulumi.yaml")):
        return f"no Pulumi.yaml project file found (searching upwards from {cwd})"
    texts = []
    for name in ("Pulumi.yaml", f"Pulumi.{stack}.yaml"):
        try:
            texts.append(open(os.path.join(cwd, name)).read())
        except FileNotFoundError:
            texts.append(None)
    key = json.dumps([stack, texts, state_config])
    cache = os.environ.get("FAKE_PULUMI_CACHE")
    entry = None
    if cache:
        import zlib

        entry = os.path.join(cache, f"{zlib.crc32(key.encode()):08x}-{len(key)}.json")
        try:
            kept_key, answer = json.loads(open(entry).read())
            if kept_key == key:
                return answer
        except (FileNotFoundError, ValueError):
            pass
    answer = _check_config(stack, state_config)
    if entry:
        tmp = entry + f".{os.getpid()}.tmp"
        open(tmp, "w").write(json.dumps([key, answer]))
        os.replace(tmp, entry)
    return answer


def _check_config(stack: str, state_config: dict) -> str | None:
    import pathlib

    root = os.path.dirname(os.path.dirname(os.path.realpath(_config_refusal.__code__.co_filename)))
    if root not in sys.path:
        # The checkout this fake is in holds `offline`. (The code's own file name: run from the
        # compiled copy `install` writes, __file__ is that copy.)
        sys.path.insert(0, root)
    _with_site()
    from offline import pulumi_cli

    cwd = pathlib.Path.cwd()
    try:
        stack_file = cwd / f"Pulumi.{stack}.yaml"
        project = pulumi_cli.load_project(cwd)
        values = pulumi_cli.load_stack_file(stack_file, project.get("name", "")) if stack_file.exists() else {}
        for key, raw in state_config.items():
            # `pulumi config set KEY VALUE` stores text; a list or map came from --path sets.
            values[key] = pulumi_cli.StackValue(raw) if isinstance(raw, str) else pulumi_cli.stack_value(raw)
        pulumi_cli.merge_config(stack, project, values)
    except pulumi_cli.CliConfigError as refused:
        return str(refused)
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


#: This file compiled, once a test run: `pulumi` runs it compiled (``install``).
_COMPILED: list[bytes] = []
#: The config checks' answers of this test run (``_config_refusal``), a directory made once.
_CACHE: list[str] = []


def _cache_dir() -> str:
    """Under xdist, one folder for both workers (tests/worker_share.py): an answer is written
    to a side file and renamed, so either reads the other's whole."""
    if not _CACHE:
        from tests import worker_share

        shared = worker_share.directory("fake-pulumi-checks")
        if shared is not None:
            _CACHE.append(str(shared))
        else:
            import atexit
            import shutil
            import tempfile

            _CACHE.append(tempfile.mkdtemp(prefix="fake-pulumi-checks-"))
            atexit.register(shutil.rmtree, _CACHE[0], True)
    return _CACHE[0]


def _compiled_copy(bin_dir) -> str:
    """This file compiled, written into ``bin_dir``: each `pulumi` call is a fresh interpreter,
    and with bytecode caching off (PYTHONDONTWRITEBYTECODE) it would compile this source anew
    every call (~10 ms, a third of a `stack output`). The copy is the source of this run."""
    import pathlib
    import py_compile

    target = os.path.join(bin_dir, "fake_pulumi.pyc")
    if not _COMPILED:
        py_compile.compile(os.path.realpath(__file__), cfile=target, doraise=True)
        _COMPILED.append(pathlib.Path(target).read_bytes())
    else:
        pathlib.Path(target).write_bytes(_COMPILED[0])
    return target


def install(tmp_path, monkeypatch, state: dict):
    """Puts this fake first on PATH for the test, answering from ``state``; returns (state
    file, call log) — the log holds one JSON argument list a line."""
    import pathlib

    bin_dir = pathlib.Path(tmp_path) / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "pulumi"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "{_compiled_copy(bin_dir)}" "$@"\n')
    exe.chmod(0o755)
    state_file, log = pathlib.Path(tmp_path) / "state.json", pathlib.Path(tmp_path) / "calls.log"
    state_file.write_text(json.dumps(state))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PULUMI_STATE", str(state_file))
    monkeypatch.setenv("FAKE_PULUMI_LOG", str(log))
    monkeypatch.setenv("FAKE_PULUMI_CACHE", _cache_dir())
    monkeypatch.setenv("PULUMI_HOME", str(pathlib.Path(tmp_path) / "pulumi-home"))
    return state_file, log
