"""What the leader writes: the VPC route for the hybrid pod CIDR to its primary ENI, and the
CiliumVTEPConfig naming its IP (pure: observations -> checks)."""

from __future__ import annotations

import ipaddress
from typing import Optional

from rehearse.lab.gateway import VTEP_CONFIG, VTEP_VERSIONS
from rehearse.run.outcome import not_read
from rehearse.run.report import FAIL, PASS, SKIP, Check
from rehearse.commands.verify_gateway.kinds import CHECK_LEASE, CHECK_ROUTE, CHECK_VTEP
from rehearse.commands.verify_gateway.observed import Lab


def check_route(lab: Lab, node: Optional[str], pod: Optional[dict]) -> Check:
    cidr = lab.inputs.get("hybridPodCidr", "<hybrid pod CIDR>")
    ids = lab.inputs.get("routeTables") or [t["id"] for t in lab.tables]
    command = (f"aws ec2 describe-route-tables --region {lab.region} --route-table-ids {' '.join(ids)} "
               f"--query \"RouteTables[].[RouteTableId,Routes[?DestinationCidrBlock=='{cidr}']]\"")
    eni = lab.primary_eni(node)
    instance = lab.instances.get(node or "") or {}
    if instance.get("instanceId"):
        # No JMESPath literal (`0`): backticks inside double quotes are command substitution.
        command += (f" && aws ec2 describe-instances --region {lab.region} --instance-ids "
                    f"{instance['instanceId']} --query \"Reservations[].Instances[].NetworkInterfaces"
                    "[].[Attachment.DeviceIndex,NetworkInterfaceId]\" --output text")
    if not lab.tables:
        return not_read(CHECK_ROUTE, "the route tables", lab.events, command)
    if lab.lease is None:
        return not_read(CHECK_ROUTE, "the Lease (which names the leader)", lab.events, command)
    if node is not None and node not in lab.instances:
        return not_read(CHECK_ROUTE, f"the leader node {node}'s EC2 instance", lab.events, command)
    leader_pod = pod["name"] if pod else "<leader pod>"
    handover = (f"the leader writes the route once, when it wins the Lease: to have it written "
                f"again, hand over (`kubectl -n {lab.ns} delete pod {leader_pod}`) and read the new "
                f"leader's log for the route update (its role needs ec2:CreateRoute/ReplaceRoute on "
                f"these tables, through the Pod Identity agent)")
    seen, problems, unsure = [], [], False
    for table in lab.tables:
        if not table.get("found"):
            seen.append(f"{table['id']}: not found ({table.get('error', 'no such table')})")
            problems.append("table")
            continue
        route = next((r for r in table["routes"] if r.get("DestinationCidrBlock") == cidr), None)
        if route is None:
            seen.append(f"{table['id']}: no route for {cidr}")
            problems.append("missing")
            continue
        target = route.get("NetworkInterfaceId") or route.get("InstanceId") or route.get(
            "TransitGatewayId") or route.get("GatewayId") or route.get("NatGatewayId") or "nothing"
        state = route.get("State", "unknown")
        owner = lab.eni_owner(route.get("NetworkInterfaceId"))
        text = f"{table['id']}: {cidr} → {target}" + (f" (node {owner})" if owner else "") + f", {state}"
        if state != "active":
            problems.append("blackhole")
            text += " — its target is gone"
        elif not route.get("NetworkInterfaceId"):
            problems.append("other")
            text += " — not a network interface"
        elif eni is None:
            unsure = True
        elif route["NetworkInterfaceId"] != eni:
            problems.append("other")
            text += f" — not the leader's primary ENI {eni}"
        seen.append(text)
    if node is not None and eni is None and not problems:
        where = instance.get("lookup") or {}
        return Check(CHECK_ROUTE, FAIL, "; ".join(seen) + f"; but the leader node {node}'s primary ENI "
                     f"was not found (EC2 lookup by {where.get('by', 'nothing')} "
                     f"{where.get('value', '')}: {instance.get('error', 'not read')})",
                     "check that the leader node is an EC2 instance of this region "
                     f"(`kubectl get node {node} -o jsonpath='{{.spec.providerID}}'`)", command)
    if problems:
        fix = handover
        if "table" in problems:
            fix = ("a route table the stack names is gone: `pulumi refresh` and `pulumi up` the "
                   "gateway layer; then " + handover)
        elif "blackhole" in problems:
            fix = ("the route points at an interface that no longer exists (a replaced gateway "
                   "node); the gateway never deletes routes and only writes them on winning the "
                   "Lease: " + handover)
        elif "missing" in problems:
            fix = ("no route: the leader never wrote it (is the table in the chart's "
                   "routeTableIDs? did CreateRoute fail in the leader's log?): " + handover)
        return Check(CHECK_ROUTE, FAIL, "; ".join(seen), fix, command)
    if node is None or unsure:
        return Check(CHECK_ROUTE, SKIP, "; ".join(seen) + f" — whether that is the leader's cannot be "
                     f"said without a leader (see '{CHECK_LEASE}')", command=command)
    return Check(CHECK_ROUTE, PASS, "; ".join(seen) + f" — the leader {node}'s primary ENI (device index 0)",
                 command=command)


def check_vtep(lab: Lab, node: Optional[str], pod: Optional[dict]) -> Check:
    command = "kubectl get ciliumvtepconfig hybrid-gateway -o yaml"
    if node:
        command += f" && kubectl get node {node} -o wide"
    leader_pod = pod["name"] if pod else "<leader pod>"
    fix_missing = ("the leader upserts it when it wins the Lease (and re-creates it if deleted): "
                   f"read `kubectl -n {lab.ns} logs {leader_pod}`; the CRD comes with the AWS Cilium "
                   "build (1.18.8-1 or later, VTEP on)")
    if lab.vtep is None:
        return not_read(CHECK_VTEP, "the CiliumVTEPConfig", lab.events, command)
    if lab.lease is None:
        return not_read(CHECK_VTEP, "the Lease (which names the leader)", lab.events, command)
    if not lab.vtep.get("found"):
        return Check(CHECK_VTEP, FAIL, f"no CiliumVTEPConfig {VTEP_CONFIG} (asked cilium.io "
                     f"{', '.join(lab.vtep.get('tried') or VTEP_VERSIONS)})", fix_missing, command)
    spec = lab.vtep.get("spec") or {}
    # cilium.io/v2 (what the gateway writes) says endpoints; upstream v2alpha1 vtepEndpoints.
    endpoints = spec.get("endpoints") or spec.get("vtepEndpoints") or []
    if not endpoints:
        return Check(CHECK_VTEP, FAIL, f"CiliumVTEPConfig {VTEP_CONFIG} has no endpoints", fix_missing, command)
    shown = ", ".join(f"{e.get('cidr')} → {e.get('tunnelEndpoint')}" for e in endpoints)
    seen = f"{VTEP_CONFIG} (cilium.io/{lab.vtep.get('version')}): {shown}"
    if node is None:
        return Check(CHECK_VTEP, SKIP, seen + f" — whether that is the leader cannot be said "
                     f"without a leader (see '{CHECK_LEASE}')", command=command)
    ip = (lab.nodes.get(node) or {}).get("internalIP")
    wrong = [e for e in endpoints if e.get("tunnelEndpoint") != ip]
    vpc = lab.inputs.get("cloudVpcCidr")
    if wrong:
        others = {e.get("tunnelEndpoint") for e in wrong}
        owners = [n["name"] for n in lab.nodes.values() if n.get("internalIP") in others]
        return Check(CHECK_VTEP, FAIL, seen + f" — not the leader {node}'s IP {ip}" +
                     (f" (it is {', '.join(owners)}'s)" if owners else ""),
                     "hybrid pods would tunnel to a gateway that is not the leader: the leader "
                     f"writes it on winning the Lease; delete the stale object so the leader "
                     f"re-creates it (`kubectl delete ciliumvtepconfig {VTEP_CONFIG}`), or hand "
                     f"over (`kubectl -n {lab.ns} delete pod {leader_pod}`)", command)
    if vpc and not any(same_network(e.get("cidr"), vpc) for e in endpoints):
        return Check(CHECK_VTEP, FAIL, seen + f" — no endpoint for the VPC {vpc}",
                     f"the chart's vpcCIDR should be the cloud VPC's CIDR {vpc} (gateway layer)", command)
    return Check(CHECK_VTEP, PASS, seen + f" — the leader {node}'s InternalIP", command=command)


def same_network(a: Optional[str], b: str) -> bool:
    try:
        return ipaddress.ip_network(a or "", strict=False) == ipaddress.ip_network(b, strict=False)
    except ValueError:
        return False
