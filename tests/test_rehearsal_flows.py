"""Every port a rehearsal tool connects to is a flow the lab allows (docs/networking.md).

The ports are read from what the tools build — iperf3's command lines and pod manifests,
hostnet's probe pods, the gateway's proxy paths, the vLLM service proxy — never retyped here;
each must be listed in ``rehearse/lab/flows.py`` (and nothing else listed), each listed flow must be
in the reachability model's table (``offline/reachability.py`` FLOWS), and the model must find it
ALLOWED over what the dev stack registers (the GPU one over the dev stack with ``gpuEnabled``).
A tool that moves to a port the lab drops fails here, before a presenter finds out on stage.
"""

from __future__ import annotations

import re
import tarfile

import pytest

from rehearse.lab import flows
from rehearse.commands.verify_gateway import collect as gateway
from rehearse.commands.verify_gpu import collect as gpu
from rehearse.commands.hostnet import collect as hostnet
from rehearse.commands.gateway_throughput import collect as throughput
from rehearse.commands.gateway_throughput import pods as throughput_pods
from offline import chart_render, reachability
from stacks.layers import demo



def _flag(args: list[str], flag: str) -> int:
    return int(args[args.index(flag) + 1])


def throughput_flows() -> set[tuple]:
    """Per direction: the client's side, the server's side (from the manifests' affinity) and
    the port the client asks for."""
    found = set()
    for direction, server_on_hybrid in throughput.DIRECTIONS:
        client = throughput.client_args("10.0.1.2", 10, 4)
        server = throughput.pod_manifest("s", "ns", on_hybrid=server_on_hybrid,
                                         args=throughput.server_args(), image="i",
                                         deadline_seconds=60, role="server")
        port = _flag(client, "-p")
        assert port == _flag(throughput.server_args(), "-p") == \
            server["spec"]["containers"][0]["ports"][0]["containerPort"], direction
        [term] = server["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert (term["matchExpressions"][0]["operator"] == "In") == server_on_hybrid
        if server_on_hybrid:
            # A cloud pod to the hybrid server pod's own IP: through the gateway.
            found.add((flows.REHEARSAL_CLOUD_PODS, flows.HYBRID_PODS_POD_IP, "tcp", port))
        else:
            # A hybrid pod's packet leaves from its node's address or its own
            # (docs/networking.md#where-a-hybrid-pods-packets-come-from).
            found |= {(source, flows.REHEARSAL_CLOUD_PODS, "tcp", port)
                      for source in (flows.HYBRID_PODS_NODE_IP, flows.HYBRID_PODS_POD_IP)}
    return found


def hostnet_flows(echo_port: int) -> set[tuple]:
    cloud = hostnet.cloud_client_pod("t0k3n", "172.16.0.10", hostnet.PORT, 1)
    assert not cloud["spec"].get("hostNetwork")
    [port] = {int(p) for p in re.findall(r"http://172\.16\.0\.10:(\d+)/", cloud["spec"]["containers"][0]["command"][-1])}
    host = hostnet.host_client_pod("t0k3n", "mi-1", f"10.0.1.55:{echo_port}", "172.20.0.9:80", 1)
    assert host["spec"]["hostNetwork"] is True
    script = host["spec"]["containers"][0]["command"][-1]
    [to_pod] = {int(p) for p in re.findall(r"http://10\.0\.1\.55:(\d+)/", script)}
    # The ClusterIP's port 80 is translated on the node to echo-cloud's target port: the same
    # flow as to the pod.
    assert "http://172.20.0.9:80/" in script
    return {(flows.REHEARSAL_CLOUD_PODS, flows.HYBRID_NODES, "tcp", port),
            (flows.HYBRID_NODES, flows.ECHO_CLOUD, "tcp", to_pod)}


def gateway_flows() -> set[tuple]:
    ports = {gateway.HEALTH_PORT, flows.GATEWAY_METRICS_PORT}
    # verify gateway's own metrics port, once it reads one, must be the one listed.
    assert getattr(gateway, "METRICS_PORT", flows.GATEWAY_METRICS_PORT) == flows.GATEWAY_METRICS_PORT
    return {(flows.API_INTERFACES, flows.GATEWAY_NODES, "tcp", p) for p in ports}


def gpu_flows() -> set[tuple]:
    return {(flows.API_INTERFACES, flows.VLLM_POD_IP, "tcp", int(gpu.DEFAULT_NAMES["port"]))}


def echo_cloud_port(run) -> int:
    deployment = next(d for d in run.of_type("kubernetes:apps/v1:Deployment")
                      if d.inputs["metadata"]["name"] == "echo-cloud")
    [container] = deployment.inputs["spec"]["template"]["spec"]["containers"]
    return int(container["ports"][0]["containerPort"])  # mocks give numbers as floats


def key(result) -> tuple:
    return (result.source, result.destination, result.protocol, result.port)


def test_every_connection_a_tool_makes_is_listed_and_nothing_else(dev_run):
    used = throughput_flows() | hostnet_flows(echo_cloud_port(dev_run)) | gateway_flows() | gpu_flows()
    assert used == {c.flow for c in flows.CONNECTIONS}


def test_every_listed_connection_is_a_flow_of_the_model():
    table = {(f.source, f.destination, f.protocol, f.port) for f in reachability.FLOWS}
    assert [c for c in flows.CONNECTIONS if c.flow not in table] == []
    assert flows.REHEARSAL_CLOUD_PODS == reachability.REHEARSAL_CLOUD_PODS


@pytest.mark.parametrize("overrides", [{}, {"gpuEnabled": True}], ids=["dev", "gpu"])
def test_the_lab_allows_every_port_a_rehearsal_tool_connects_to(dev_run, lab, overrides):
    run = lab(**overrides) if overrides else dev_run
    results = {key(r): r for r in reachability.evaluate(run)}
    wanted = [c for c in flows.CONNECTIONS if overrides or c.destination != flows.VLLM_POD_IP]
    missing = [c.flow for c in wanted if c.flow not in results]
    assert missing == [], "not evaluated: an end of these flows is not built"
    blocked = {c.flow: results[c.flow].detail for c in wanted if not results[c.flow].allowed}
    assert blocked == {}, "a rehearsal tool connects where the lab drops the packet"


def test_the_tools_ports_are_the_ones_the_lab_opens_and_the_chart_serves():
    from components.hybrid_hosts import WEBHOOK_PORT

    assert throughput_pods.PORT == demo.REHEARSE_IPERF3_PORT
    assert hostnet.PORT == WEBHOOK_PORT
    # The gateway's ports as its chart declares them (host network: the node's ports), where
    # the chart sources are (../shared/charts or EKS_HYBRID_LAB_CHARTS), as the chart tests.
    source = (chart_render.charts_dir() / "eks-hybrid-nodes-gateway" / "1.0.0"
              / "eks-hybrid-nodes-gateway-1.0.0.tgz")
    if not source.exists():
        pytest.skip(f"no chart source at {source}")
    with tarfile.open(source) as archive:
        text = archive.extractfile("eks-hybrid-nodes-gateway/templates/deployment.yaml").read().decode()
    assert "hostNetwork: true" in text
    ports = dict(re.findall(r"- name: (\w+)\s+containerPort: (\d+)", text))
    assert int(ports["healthz"]) == gateway.HEALTH_PORT
    assert int(ports["metrics"]) == flows.GATEWAY_METRICS_PORT


def test_a_blocked_connection_names_its_flow_and_what_opens_it():
    text = flows.blocked_text("gateway-throughput", "hybrid → cloud")
    assert text.startswith("hybrid pods (node IP) or hybrid pods (pod IP) → rehearsal pods (cloud), TCP 5201")
    assert "stacks/layers/demo.py" in text and "python -m offline.plan" in text
    assert flows.blocked_text("nothing", "here") == ""
