"""The collector of `python -m rehearse gateway-throughput`: for each instance type (or the
current one) the gateway read, both directions measured with a pair of iperf3 pods, and, with
--instance-types, the switch and the restore. What the command is and does, its --help, is its
face's docstring (command.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from rehearse.commands.gateway_throughput.gateway import (GATEWAY_SETTLE_SECONDS, read_gateway, read_mtu,
                                                          settled)
from rehearse.commands.gateway_throughput.kinds import (DIRECTIONS, GATEWAY, ORIGINAL, RESTORED, RESULT,
                                                        SETTINGS, SWITCHED, MTU)
from rehearse.commands.gateway_throughput.pods import (IMAGE, POLL_SECONDS, Pods, client_args, phase,
                                                       pod_manifest, server_args, why)
from rehearse.lab.stack import open_stack
from rehearse.lab.switch import ConfigSwitch, RestoreBlocked, Scope, require_confirmation, require_stack
from rehearse.run.arguments import PROJECT_DIR
from rehearse.run.errors import RunError, first_line, status_code

CONFIG_KEY = "eks-hybrid-lab:gatewayInstanceType"
DEFAULT_SECONDS = 10
DEFAULT_STREAMS = 4
#: Scheduling and an image pull before the server listens.
SERVER_START_SECONDS = 180
#: Beyond the test's duration: connecting, the end exchange, the pod's exit.
CLIENT_MARGIN_SECONDS = 60


def measure_direction(ctx: Any, record: Any, pods: Pods, direction: str, server_on_hybrid: bool,
                      instance_type: Optional[str], seconds: int, streams: int, image: str) -> None:
    where = ("hybrid", "cloud") if server_on_hybrid else ("cloud", "hybrid")
    server = pods.name("server", where[0])
    client = pods.name("client", where[1])
    result: dict[str, Any] = {"direction": direction, "instance_type": instance_type,
                              "server_pod": server, "client_pod": client,
                              "seconds_asked": seconds, "streams_asked": streams}
    ctx.progress(f"{direction}: iperf3 server on a {where[0]} node")
    pods.create(pod_manifest(server, pods.ns, on_hybrid=server_on_hybrid, args=server_args(),
                             image=image, role="server",
                             deadline_seconds=SERVER_START_SECONDS + seconds + CLIENT_MARGIN_SECONDS))
    running = pods.wait(server, lambda p: phase(p) == "Running" and (p.get("status") or {}).get("podIP")
                        or phase(p) in ("Succeeded", "Failed"), SERVER_START_SECONDS)
    server_ip = ((running or {}).get("status") or {}).get("podIP")
    if phase(running) != "Running" or not server_ip:
        record(RESULT, **result, log=None,
               error=f"the server pod did not run in {SERVER_START_SECONDS} s ({why(running)})")
        return
    result.update(server_ip=server_ip, server_node=(running.get("spec") or {}).get("nodeName"))
    ctx.progress(f"{direction}: iperf3 client on a {where[1]} node → {server_ip}, "
                 f"{seconds} s, {streams} streams")
    pods.create(pod_manifest(client, pods.ns, on_hybrid=not server_on_hybrid,
                             args=client_args(server_ip, seconds, streams), image=image,
                             role="client",
                             deadline_seconds=SERVER_START_SECONDS + seconds + CLIENT_MARGIN_SECONDS))
    finished = pods.wait(client, lambda p: phase(p) in ("Succeeded", "Failed"),
                         SERVER_START_SECONDS + seconds + CLIENT_MARGIN_SECONDS)
    result.update(client_phase=phase(finished),
                  client_node=((finished or {}).get("spec") or {}).get("nodeName"))
    try:
        log = "".join(ctx.kube.client.log(client, namespace=pods.ns, container="iperf3"))
    except Exception as error:  # noqa: BLE001 a container that never started answers 400
        if status_code(error) is None:
            raise
        record(RESULT, **result, log=None, error=f"no log from the client: {first_line(error)} "
               f"({why(finished)})")
        return
    record(RESULT, **result, log=log)


def measure(ctx: Any, record: Any, pods: Pods, instance_type: Optional[str], seconds: int,
            streams: int, image: str) -> None:
    gateway = read_gateway(ctx)
    if instance_type and not settled(gateway, instance_type):
        # `pulumi up` returns once the node group is updated; the old nodes may still drain
        # and the Lease move: wait (bounded) for every gateway node and the leader on the type.
        ctx.progress(f"waiting up to {GATEWAY_SETTLE_SECONDS} s for the gateway on {instance_type}")
        deadline = ctx.monotonic() + GATEWAY_SETTLE_SECONDS
        while not settled(gateway, instance_type) and ctx.monotonic() < deadline:
            ctx.sleep(POLL_SECONDS)
            gateway = read_gateway(ctx)
    record(GATEWAY, instance_type=instance_type, when="before", **gateway)
    try:
        for direction, server_on_hybrid in DIRECTIONS:
            measure_direction(ctx, record, pods, direction, server_on_hybrid, instance_type,
                              seconds, streams, image)
    finally:
        pods.delete_all()
    # A leader that changed during the measurement (a failover) is said beside the numbers.
    record(GATEWAY, instance_type=instance_type, when="after", **read_gateway(ctx))


def collect(ctx: Any, record: Any) -> None:
    demo1 = ctx.outputs.optional("demo1")
    if not demo1 or not demo1.get("namespace"):
        raise RunError(f"the stack {ctx.outputs.stack} has no output demo1 (the lab's "
                       "demo-gateway namespace): set upToLayer to demo and run `pulumi up`")
    namespace = demo1["namespace"]
    seconds = int(ctx.options.get("seconds") or DEFAULT_SECONDS)
    streams = int(ctx.options.get("streams") or DEFAULT_STREAMS)
    image = ctx.options.get("image") or IMAGE
    types = list(ctx.options.get("instance_types") or [])
    record(SETTINGS, namespace=namespace, seconds=seconds, streams=streams, image=image,
           instance_types=types)
    record(MTU, **read_mtu(ctx))
    pods = Pods(ctx, record, namespace)
    try:
        if not types:
            measure(ctx, record, pods, None, seconds, streams, image)
            return
        _measure_each(ctx, record, pods, types, seconds, streams, image)
    finally:
        pods.delete_all()


#: What a gatewayInstanceType change touches in the program: the gateway node group's
#: resources (stacks/layers/gateway.py → components/hybrid_gateway.py GatewayNodes →
#: components/node_group.py: its launch template and EKS node group).
GATEWAY_SCOPE = Scope(CONFIG_KEY, "the gateway node group (GatewayNodes)",
                      parents=("eks-hybrid-lab:gateway:GatewayNodes",))


def _measure_each(ctx: Any, record: Any, pods: Pods, types: list[str], seconds: int,
                  streams: int, image: str) -> None:
    # Before anything changes: a stack named, and someone to confirm each plan.
    require_stack(ctx, "gateway-throughput --instance-types")
    require_confirmation(ctx, "gateway-throughput --instance-types")
    work_dir = Path(getattr(ctx, "work_dir", None) or PROJECT_DIR)

    def opened() -> Any:
        try:
            return open_stack(ctx.outputs.stack, work_dir)
        except FileNotFoundError:
            raise RunError("--instance-types needs the pulumi CLI (the Automation API runs it)") from None
        except Exception as error:  # noqa: BLE001 automation's CommandError
            raise RunError(f"pulumi could not find the stack {ctx.outputs.stack}: "
                           f"{first_line(error)}") from None

    switch = ConfigSwitch(ctx, opened, GATEWAY_SCOPE)
    original = switch.read_original()
    record(ORIGINAL, value=original)
    ctx.progress("note: each instance type replaces the gateway node group's nodes, so the "
                 "gateway's leader fails over at each switch and at the restore")
    try:
        for instance_type in types:
            started = ctx.monotonic()
            try:
                result = switch.switch(instance_type, f"gatewayInstanceType {instance_type}")
            except (KeyboardInterrupt, RunError):
                raise
            except Exception as error:  # noqa: BLE001 a refused update: recorded, next type
                record(SWITCHED, instance_type=instance_type, ok=False, error=first_line(error),
                       seconds=round(ctx.monotonic() - started, 1))
                continue
            record(SWITCHED, instance_type=instance_type, **result,
                   seconds=round(ctx.monotonic() - started, 1))
            if not result["ok"]:
                ctx.progress(f"{instance_type}: not applied: {result['error']}")
                continue
            measure(ctx, record, pods, instance_type, seconds, streams, image)
    finally:
        pods.delete_all()
        if switch.touched:
            back = original or "the project's default"
            try:
                result = switch.restore(f"gatewayInstanceType back to {back}")
            except RestoreBlocked as blocked:
                record(RESTORED, value=original, ok=False, error=str(blocked))
                raise RunError(f"could not put gatewayInstanceType back to {back}: {blocked}") from None
            except Exception as error:  # noqa: BLE001 said loudly: the stack is changed
                record(RESTORED, value=original, ok=False, error=first_line(error))
                raise RunError(f"could not put gatewayInstanceType back to {back}: "
                               f"{first_line(error)}: run `pulumi config set gatewayInstanceType "
                               f"{original}` and `pulumi up`") from None
            record(RESTORED, value=original, **result)
