"""The names `python -m rehearse gateway-throughput` records (events.jsonl's kinds, the
measurement pods' label) and reports (its title, its checks): replays of recorded runs read them,
so their values never change."""

from __future__ import annotations

from typing import Optional

TITLE = "measure the gateway's throughput, pod to pod, each way"

SETTINGS = "throughput.settings"
MTU = "throughput.mtu"
GATEWAY = "throughput.gateway"
POD_CREATED = "throughput.pod_created"
POD_DELETED = "throughput.pod_deleted"
RESULT = "throughput.result"
ORIGINAL = "throughput.original_instance_type"
SWITCHED = "throughput.switched"
RESTORED = "throughput.restored"

#: The label every measurement pod carries (and the report's commands select by).
LABEL, LABEL_VALUE = "eks-hybrid-lab.io/rehearse", "throughput"

#: (direction, whether the server runs on a hybrid node): iperf3's client sends, so the
#: direction is from the client's side to the server's.
DIRECTIONS = (("cloud → hybrid", True), ("hybrid → cloud", False))

CHECK_PODS_REMOVED = "measurement pods removed"
CHECK_RESTORED = "gatewayInstanceType put back"


def check_name(direction: str, instance_type: Optional[str]) -> str:
    return f"{direction} measured" + (f" ({instance_type})" if instance_type else "")
