"""Every network connection a rehearsal tool makes inside the lab, as a flow of the lab's
reachability model (``offline/reachability.py`` ``FLOWS``: source, destination, protocol, port).

A tool that connects where the lab's security groups drop the packet measures nothing and
reports a failure that points elsewhere (iperf3's 5201 from hybrid pods to a
cloud pod, which the cluster security group dropped, was reported as a gateway problem). So each
connection is listed here; ``tests/test_rehearsal_flows.py`` reads the ports from what the tools
actually build (pod manifests, command lines, proxy paths), requires each to be listed here, and
requires each listed flow to be one the model evaluates as ALLOWED on the dev stack. A tool whose
connection fails names its flow with ``blocked_text``.

Endpoint names are the model's (plain strings: the rehearsal tools do not import the program).
Not listed: this machine to the API server's public endpoint (outside the lab's networks), and
the API server to kubelets (10250, the lab's own flow ``API server ENIs -> hybrid nodes``), which
every ``pods/log`` read uses.

A leaf module: the tools import it, it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass

# The model's endpoint names (offline/reachability.py).
HYBRID_NODES = "hybrid nodes"
HYBRID_PODS_NODE_IP = "hybrid pods (node IP)"
HYBRID_PODS_POD_IP = "hybrid pods (pod IP)"
API_INTERFACES = "API server ENIs"
GATEWAY_NODES = "gateway nodes"
REHEARSAL_CLOUD_PODS = "rehearsal pods (cloud)"
ECHO_CLOUD = "echo-cloud"
VLLM_POD_IP = "vllm (pod IP)"

#: The gateway's metrics port (aws/eks-hybrid-nodes-gateway chart 1.0.0
#: templates/deployment.yaml, containerPort ``metrics``; docs/gateway.md#metrics), read through the pod proxy.
GATEWAY_METRICS_PORT = 10080


@dataclass(frozen=True)
class Connection:
    tool: str
    #: What the connection is for, as the tool's report names it.
    what: str
    source: str
    destination: str
    protocol: str
    port: int
    #: Where the lab opens it (for the fix text of a connection that fails).
    opened_by: str

    @property
    def flow(self) -> tuple[str, str, str, int]:
        return (self.source, self.destination, self.protocol, self.port)


CONNECTIONS: tuple[Connection, ...] = (
    # gateway-throughput: the client connects to the server pod's IP, each way.
    Connection("gateway-throughput", "hybrid → cloud", HYBRID_PODS_NODE_IP, REHEARSAL_CLOUD_PODS,
               "tcp", 5201, "the cluster security group, opened to the remote node and pod "
               "networks by the demo layer (stacks/layers/demo.py REHEARSE_IPERF3_PORT)"),
    Connection("gateway-throughput", "hybrid → cloud", HYBRID_PODS_POD_IP, REHEARSAL_CLOUD_PODS,
               "tcp", 5201, "the cluster security group, opened to the remote node and pod "
               "networks by the demo layer (stacks/layers/demo.py REHEARSE_IPERF3_PORT)"),
    Connection("gateway-throughput", "cloud → hybrid", REHEARSAL_CLOUD_PODS, HYBRID_PODS_POD_IP,
               "tcp", 5201, "the route the gateway leader writes and the VXLAN rules of the "
               "gateway layer (the hybrid pod's own address is not filtered by a security group)"),
    # hostnet: a cloud pod to the host-network server; the host network to echo-cloud.
    Connection("hostnet", "cloud pod → hybrid host network", REHEARSAL_CLOUD_PODS, HYBRID_NODES,
               "tcp", 9443, "the hybrid hosts' security group (components/hybrid_hosts.py "
               "WEBHOOK_PORT from the cloud VPC)"),
    Connection("hostnet", "hybrid host network → cloud pod", HYBRID_NODES, ECHO_CLOUD,
               "tcp", 8080, "the cluster security group, opened by the demo layer "
               "(stacks/layers/demo.py ECHO_PORT)"),
    # verify gateway: the gateway's host-network ports, through the API server's pod proxy.
    Connection("verify gateway", "leader healthz", API_INTERFACES, GATEWAY_NODES, "tcp", 8088,
               "the cluster security group (the gateway nodes carry it; EKS admits the group "
               "from itself)"),
    Connection("verify gateway", "leader metrics", API_INTERFACES, GATEWAY_NODES, "tcp",
               GATEWAY_METRICS_PORT, "the cluster security group (the gateway nodes carry it; EKS "
               "admits the group from itself)"),
    # verify gpu: one completion through the service proxy (GPU stacks only).
    Connection("verify gpu", "completion", API_INTERFACES, VLLM_POD_IP, "tcp", 8000,
               "the route the gateway leader writes (the vLLM pod's own address)"),
)


def of(tool: str, what: str) -> list[Connection]:
    return [c for c in CONNECTIONS if c.tool == tool and c.what == what]


def blocked_text(tool: str, what: str) -> str:
    """A fix for a connection that did not get through: which flow of the lab's model it is and
    what opens it — not some other check's advice."""
    found = of(tool, what)
    if not found:
        return ""
    first = found[0]
    sources = " or ".join(dict.fromkeys(c.source for c in found))
    return (f"{sources} → {first.destination}, {first.protocol.upper()} {first.port}, must be "
            f"allowed by {first.opened_by}; `python -m offline.plan` prints the reachability "
            "model's verdict for it (its BLOCKED line names the rule missing)")
