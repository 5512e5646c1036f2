"""The names `rehearse hostnet` shares between its collector (collect.py, manifests.py) and its
analysis (analyse.py): what it creates and labels, the event kinds it records with the fields
each carries (the strings are as recorded: old runs replay from them), the probes and their
checks."""

from __future__ import annotations

NAMESPACE = "rehearse-hostnet"
#: The label every object the tool creates carries (and the namespace ``=hostnet``).
REHEARSE_LABEL = "eks-hybrid-lab.io/rehearse"
#: The run's token: in the pods' labels, and in every request path, so the servers' logs show
#: this run's requests and no one else's.
RUN_LABEL = "eks-hybrid-lab.io/rehearse-run"
#: Whose leftovers they are: the stack's cluster name (a namespace of another cluster's run, or
#: of someone else, is never removed).
STACK_LABEL = "eks-hybrid-lab.io/stack"
NAMESPACE_WHY = (
    "Created by `python -m rehearse hostnet` for a few minutes, then deleted: hostNetwork pods "
    "are forbidden by Pod Security baseline and restricted, so this namespace enforces "
    "privileged; its pods still run non-root with every capability dropped, no privilege "
    "escalation, a read-only root and RuntimeDefault seccomp.")
#: Pinned as the demos pin it (components/demos.py BUSYBOX).
BUSYBOX = ("busybox:1.37.0@sha256:"
           "9db7b59979c38555a39def84a31fb98b5296952f9e3afd4f6f11f05b07adfab0")
#: nobody: no passwd entry needed by httpd or wget.
UID = 65534
#: The hybrid hosts' security group admits TCP 9443 (WEBHOOK_PORT) and 10250 from the cloud VPC.
PORT = 9443
ECHO_APP = "echo-cloud"
COMPUTE_TYPE = "eks.amazonaws.com/compute-type"
HYBRID_TOLERATION = {"key": COMPUTE_TYPE, "operator": "Equal", "value": "hybrid", "effect": "NoSchedule"}

SERVER, HOST_CLIENT, CLOUD_CLIENT = "hostnet-server", "hostnet-client", "cloud-client"

ATTEMPTS = 3
REQUEST_TIMEOUT = 3
#: Seconds to wait for the pods to run, and for the clients to finish.
TIMEOUT = 180.0
POLL_SECONDS = 2.0
#: Beyond the two waits: creating the pods and reading four logs.
DEADLINE_MARGIN = 60

# Event kinds.
#: region, hybridPodCidr, remoteNodeCidr, cloudVpcCidr, transitGatewayId, routeTables,
#: demoNamespace, namespace, port, attempts, timeout, token.
INPUTS = "hostnet.inputs"
#: items: each node's view (``rehearse.lab.nodes.node_view``), as ``verify gateway`` records it.
NODES = "kube.nodes"
#: id, found, routes (or error): the cloud route tables, as ``verify gateway`` records them too
#: (``rehearse.lab.route_tables``).
ROUTE_TABLE = "ec2.route_table"
#: namespace, clusterIP, port, targetPort, pods (echo-cloud's Service and pods).
ECHO = "hostnet.echo_cloud"
#: object (Namespace | Pod), name, manifest.
CREATED = "hostnet.created"
#: name, nodeName, hostNetwork, phase, podIP, hostIP, reason (a probe pod when a wait ended).
POD = "hostnet.pod"
#: what, pods, done, seconds.
WAIT = "hostnet.wait"
#: role (the pod's name, or echo-cloud), namespace, pod, lines, error.
LOG = "hostnet.log"
#: deleted, failed, namespaceGone.
CLEANUP = "hostnet.cleanup"
#: namespace, run, pods (name -> phase, reason), deleted, failed, namespaceGone.
SWEPT = "hostnet.leftovers_removed"

# Probes (direction keys) and their checks.
HOST_TO_POD, HOST_TO_SVC, CLOUD_TO_HOST = "hostToCloudPod", "hostToCloudService", "cloudToHost"
CHECK = {HOST_TO_POD: "hybrid host network → cloud pod",
         HOST_TO_SVC: "hybrid host network → ClusterIP Service",
         CLOUD_TO_HOST: "cloud pod → hybrid host network"}
CHECK_CLEANUP = "namespace and pods removed"

TGW, GATEWAY = "node to node across the Transit Gateway", "through the gateway (VXLAN to the leader)"
