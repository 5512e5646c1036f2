"""The reachability model (offline/reachability.py): every flow the lab needs is allowed by what
registers, on the dev stack and its variants, nothing outside RFC 1918 reaches an interface, and
each check is shown to fail on a planted defect. Defects are planted in copies of the recorded
registrations (the program is never edited), and every plant must change something."""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import io
from typing import Callable, Iterable, Optional

import pytest

from offline import reachability
from offline.runner import ProgramRun, Registration
from offline.reachability import (API_ENDPOINT, API_INTERFACES, COREDNS, FLOWS, GATEWAY_NODES,
                                 HYBRID_NODES, HYBRID_PODS_NODE_IP, HYBRID_PODS_POD_IP, INTERNET,
                                 KARPENTER_NODES, REHEARSAL_CLOUD_PODS, SYSTEM_NODES)

Key = tuple[str, str, str, int]

# The ends each layer brings; a flow is evaluated once both of its ends are built.
ENDS_BY_LAYER = {
    "cluster": {SYSTEM_NODES, API_ENDPOINT, API_INTERFACES, COREDNS, INTERNET},
    "hybrid": {HYBRID_NODES, HYBRID_PODS_NODE_IP},
    "gateway": {HYBRID_PODS_POD_IP, GATEWAY_NODES},
    "karpenter": {KARPENTER_NODES},
    "demo": {"prober-cloud", "echo-cloud", "echo-hybrid (pod IP)", "prober-hybrid (node IP)",
             "prober-hybrid (pod IP)", REHEARSAL_CLOUD_PODS},
    "gpu": {"vllm-client", "vllm (pod IP)", "vllm (node IP)"},
}
LAYERS = ("cluster", "hybrid", "gateway", "karpenter", "demo")

DNS = {(s, COREDNS, p, 53) for s in (HYBRID_PODS_NODE_IP, HYBRID_PODS_POD_IP) for p in ("udp", "tcp")}
#: Everything to echo-cloud's 8080 from the remote networks: demo 1's prober both ways, and
#: rehearse hostnet's host-network client (the node's address).
ECHO_CLOUD = {("prober-hybrid (node IP)", "echo-cloud", "tcp", 8080),
              ("prober-hybrid (pod IP)", "echo-cloud", "tcp", 8080),
              (HYBRID_NODES, "echo-cloud", "tcp", 8080)}
#: gateway-throughput's hybrid → cloud iperf3, from both addresses a hybrid pod's packet has.
IPERF3_TO_CLOUD = {(HYBRID_PODS_NODE_IP, REHEARSAL_CLOUD_PODS, "tcp", 5201),
                   (HYBRID_PODS_POD_IP, REHEARSAL_CLOUD_PODS, "tcp", 5201)}


def key(flow) -> Key:
    return (flow.source, flow.destination, flow.protocol, flow.port)


def expected(*groups: str) -> set[Key]:
    ends = set().union(*(ENDS_BY_LAYER[g] for g in groups))
    return {key(f) for f in FLOWS if f.source in ends and f.destination in ends}


def blocked(run: ProgramRun) -> dict[Key, str]:
    return {key(r): r.detail for r in reachability.evaluate(run) if not r.allowed}


#: id(run) -> (run, its flows): the shared runs' evaluation, a pure function of the run (which
#: its callers treat as read-only), made once a process rather than once a test. The run is
#: kept with it, so its id cannot be reused by another.
_EVALUATED: dict[int, tuple[ProgramRun, tuple[reachability.FlowResult, ...]]] = {}


def evaluated(run: ProgramRun) -> list[reachability.FlowResult]:
    """``reachability.evaluate(run)`` for a shared run (``lab``, ``dev_run``), not a planted copy."""
    if id(run) not in _EVALUATED:
        _EVALUATED[id(run)] = (run, tuple(reachability.evaluate(run)))
    return list(_EVALUATED[id(run)][1])


# --- planting defects in copies of the recorded registrations ---------------------------------

def planted(run: ProgramRun, *, drop: Iterable[str] = (),
            change: Optional[dict[str, Callable[[dict], None]]] = None,
            add: Iterable[Registration] = ()) -> ProgramRun:
    """A copy of ``run`` without the registrations whose names match ``drop`` (glob patterns),
    with ``change[name]`` applied to a deep copy of that registration's inputs, plus ``add``.
    Every pattern and name must hit something, so a plant can never silently do nothing."""
    drop, change = list(drop), dict(change or {})
    hits = {p: 0 for p in [*drop, *change]}
    registrations = []
    for reg in run.registrations:
        matched = [p for p in drop if fnmatch.fnmatchcase(reg.name, p)]
        for pattern in matched:
            hits[pattern] += 1
        if matched:
            continue
        if reg.name in change and reg.custom:
            hits[reg.name] += 1
            inputs = copy.deepcopy(reg.inputs)
            change[reg.name](inputs)
            reg = dataclasses.replace(reg, inputs=inputs)
        registrations.append(reg)
    assert all(hits.values()), f"the plant hit nothing: {[p for p, n in hits.items() if not n]}"
    return ProgramRun(stack=run.stack, config=run.config, registrations=[*registrations, *add],
                      outputs=run.outputs, warnings=run.warnings)


def copy_of(run: ProgramRun, name: str, new_name: str, **inputs) -> Registration:
    original = run.named(name)
    return dataclasses.replace(original, name=new_name, urn=f"{original.urn}-{new_name}",
                               id=f"{new_name}-id", inputs={**original.inputs, **inputs})


# --- the lab as built ----------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, groups, count", [
    ({"upToLayer": "cluster"}, LAYERS[:1], 2),
    ({"upToLayer": "hybrid"}, LAYERS[:2], 8),
    # The gateway layer's 2 and the demo layer's 5 (and gpu's 1) beyond the lab's own flows
    # are the rehearsal tools' (rehearse/lab/flows.py): the gateway's ports through the pod proxy,
    # iperf3's 5201 three ways, hostnet's 9443 and its host network to echo-cloud.
    ({"upToLayer": "gateway"}, LAYERS[:3], 17),
    ({"upToLayer": "karpenter"}, LAYERS[:4], 19),
    ({}, LAYERS, 27),
    ({"gpuEnabled": True}, (*LAYERS, "gpu"), 30),
    ({"endpointAccess": "private"}, LAYERS, 27),
    ({"adminCidrs": ["198.51.100.0/24", "203.0.113.7/32"]}, LAYERS, 27),
    ({"availabilityZoneCount": 3}, LAYERS, 27),
], ids=lambda v: ",".join(f"{k}={v[k]}" for k in v) if isinstance(v, dict) else None)
def test_every_flow_whose_ends_are_built_is_allowed(lab, overrides, groups, count):
    results = evaluated(lab(**overrides))
    assert {key(r) for r in results} == expected(*groups)
    assert len(results) == count
    assert [(key(r), r.detail) for r in results if not r.allowed] == []


def test_no_flows_without_a_cluster(lab):
    assert evaluated(lab(upToLayer="network")) == []


def test_the_dev_stack_takes_the_paths_the_design_says(dev_run):
    paths = {key(r): r.path for r in evaluated(dev_run)}
    for flow, path in paths.items():
        if HYBRID_PODS_POD_IP in flow or any("(pod IP)" in end for end in flow[:2]):
            assert path == "hybrid nodes gateway", flow
    assert paths[(HYBRID_PODS_NODE_IP, COREDNS, "udp", 53)] == "Transit Gateway"
    assert paths[(API_INTERFACES, HYBRID_NODES, "tcp", 10250)] == "Transit Gateway"
    assert paths[(HYBRID_NODES, INTERNET, "tcp", 443)] == "NAT network-onprem-nat-gw"
    assert paths[(SYSTEM_NODES, INTERNET, "tcp", 443)] == "NAT network-cloud-nat-gw"
    # The dev stack's endpoint is public: kubelets reach it over their NAT.
    assert paths[(HYBRID_NODES, API_ENDPOINT, "tcp", 443)] == \
        "public endpoint over NAT network-onprem-nat-gw"


def test_a_private_endpoint_is_reached_through_the_transit_gateway(lab):
    paths = {key(r): r.path for r in evaluated(lab(endpointAccess="private"))}
    assert paths[(HYBRID_NODES, API_ENDPOINT, "tcp", 443)] == "private endpoint"


@pytest.mark.parametrize("overrides", [{}, {"gpuEnabled": True}, {"upToLayer": "hybrid"},
                                       {"availabilityZoneCount": 3}],
                         ids=lambda o: ",".join(o) or "defaults")
def test_nothing_outside_rfc1918_reaches_an_interface(lab, overrides):
    run = lab(**overrides)
    assert reachability.internet_exposure(run) == []
    assert reachability.unmodelled(run) == []


def test_the_flow_table_matches_the_demo_services(dev_run, lab):
    """The table's demo ports are the Services' target ports, so a port change in the demos
    cannot leave the model checking the old one."""
    run = lab(gpuEnabled=True)
    target_ports = {s.inputs["metadata"]["name"]: s.inputs["spec"]["ports"][0]["targetPort"]
                    for s in run.of_type("kubernetes:core/v1:Service")}
    for flow in FLOWS:
        if flow.destination in reachability.WORKLOADS:
            deployment, _ = reachability.WORKLOADS[flow.destination]
            assert target_ports[deployment] == flow.port, flow
    assert all(f.why for f in FLOWS)
    assert len({key(f) for f in FLOWS}) == len(FLOWS)


def test_dns_belongs_to_the_cluster_layer_and_demo_ports_to_the_demo_layer(dev_run, lab):
    rules = dev_run.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    cluster_sg = dev_run.named("cluster-eks-cluster").outputs["vpcConfig"]["clusterSecurityGroupId"]
    by_port = {}
    for rule in rules:
        if rule.inputs["securityGroupId"] == cluster_sg:
            by_port.setdefault((rule.inputs["ipProtocol"], rule.inputs["fromPort"]), set()).add(
                (dev_run.layer_of(rule), rule.inputs["cidrIpv4"]))
    both = {"172.16.0.0/18", "172.17.0.0/16"}
    assert by_port[("udp", 53)] == by_port[("tcp", 53)] == {("cluster", c) for c in both}
    assert by_port[("tcp", 8080)] == {("demo", c) for c in both}
    assert by_port[("tcp", 5201)] == {("demo", c) for c in both}
    # Below the demo layer the port is closed again.
    assert not [r for r in lab(upToLayer="karpenter").of_type(rules[0].type)
                if r.inputs.get("fromPort") == 8080]


def test_render_prints_one_line_per_flow(dev_run):
    out = io.StringIO()
    reachability.render(evaluated(dev_run), out,
                        reachability.internet_exposure(dev_run))
    lines = out.getvalue().splitlines()
    assert reachability.HEADER in lines
    flow_lines = [line for line in lines if line.startswith(("  ALLOWED", "  BLOCKED"))]
    assert len(flow_lines) == len(expected(*LAYERS))
    assert all(line.startswith("  ALLOWED") for line in flow_lines)
    assert "  27 flows, 0 blocked" in lines
    assert "  Internet exposure: none (nothing outside RFC 1918 reaches an interface)" in lines

    out = io.StringIO()
    reachability.render(reachability.evaluate(planted(dev_run, drop=["cluster-eks-dns-*"])), out)
    dns = [line for line in out.getvalue().splitlines() if "CoreDNS" in line]
    assert len(dns) == 4 and all(line.startswith("  BLOCKED") and "no ingress on" in line
                                 for line in dns)


# --- each check fails on its defect --------------------------------------------------------------

def test_the_pre_fix_cluster_security_group_drops_dns_from_hybrid_pods(dev_run):
    """Defect 3: without the DNS rules, exactly the DNS flows are blocked, from both sources."""
    found = blocked(planted(dev_run, drop=["cluster-eks-dns-*"]))
    assert set(found) == DNS
    assert found[(HYBRID_PODS_NODE_IP, COREDNS, "udp", 53)].startswith(
        "no ingress on sg-") and "(cluster SG) for udp/53 from 172.16.0.0/18" in \
        found[(HYBRID_PODS_NODE_IP, COREDNS, "udp", 53)]
    assert "(cluster SG) for tcp/53 from 172.17.0.0/16" in found[(HYBRID_PODS_POD_IP, COREDNS, "tcp", 53)]


def test_the_pre_fix_program_is_exactly_defect_3(dev_run):
    """The cluster security group as it was (443 in, 10250 out): DNS and demo 1's hybrid prober
    are blocked, and nothing else."""
    found = blocked(planted(dev_run, drop=["cluster-eks-dns-*", "demo-echo-cloud-tcp8080-*"]))
    assert set(found) == DNS | ECHO_CLOUD


def test_without_the_demo_layers_iperf3_rule_hybrid_to_cloud_throughput_is_blocked(dev_run):
    """The cluster security group as it once was (443, 53, 8080 from the remote
    networks) drops gateway-throughput's hybrid → cloud iperf3, and only that."""
    found = blocked(planted(dev_run, drop=["demo-rehearse-iperf3-*"]))
    assert set(found) == IPERF3_TO_CLOUD
    assert "(cluster SG) for tcp/5201 from 172.16.0.0/18" in found[(HYBRID_PODS_NODE_IP, REHEARSAL_CLOUD_PODS, "tcp", 5201)]
    assert "(cluster SG) for tcp/5201 from 172.17.0.0/16" in found[(HYBRID_PODS_POD_IP, REHEARSAL_CLOUD_PODS, "tcp", 5201)]


def test_each_remote_network_is_needed(dev_run):
    """Admitting the node CIDR alone leaves the pod-IP path (through the gateway) blocked."""
    found = blocked(planted(dev_run, drop=["cluster-eks-dns-*-from-pods-*",
                                           "demo-echo-cloud-tcp8080-from-pods-*"]))
    assert set(found) == {k for k in DNS | ECHO_CLOUD if "(pod IP)" in k[0]}
    found = blocked(planted(dev_run, drop=["cluster-eks-dns-*-from-nodes-*"]))
    assert set(found) == {k for k in DNS if "(node IP)" in k[0]}


def test_a_missing_vxlan_return_rule_blocks_everything_through_the_gateway(dev_run):
    found = blocked(planted(dev_run, drop=["gateway-nodes-peers-vxlan-from-*"]))
    through_gateway = {key(r) for r in evaluated(dev_run)
                       if r.path == "hybrid nodes gateway"}
    assert set(found) == {(GATEWAY_NODES, HYBRID_NODES, "udp", 8472)} | through_gateway
    assert "no ingress on sg-" in found[(GATEWAY_NODES, HYBRID_NODES, "udp", 8472)]
    assert "udp/8472 from 10.0.0.0/18" in found[(GATEWAY_NODES, HYBRID_NODES, "udp", 8472)]
    assert found[(HYBRID_PODS_POD_IP, COREDNS, "udp", 53)].startswith(
        "VXLAN gateway -> hybrid node: no ingress")


def test_a_missing_vxlan_rule_on_the_gateway_side_is_caught(dev_run):
    found = blocked(planted(dev_run, drop=["gateway-nodes-vxlan-from-peers"]))
    assert (HYBRID_NODES, GATEWAY_NODES, "udp", 8472) in found
    assert (HYBRID_PODS_POD_IP, COREDNS, "udp", 53) in found


def test_a_missing_transit_gateway_route_blocks_cloud_to_on_prem(dev_run):
    found = blocked(planted(dev_run, drop=["network-transit-to-onprem"]))
    crossing = {key(r) for r in evaluated(dev_run)
                if r.path in ("Transit Gateway", "hybrid nodes gateway")}
    assert set(found) == crossing
    assert "Transit Gateway route table tgw-rtb-" in found[(API_INTERFACES, HYBRID_NODES, "tcp", 10250)]
    assert "has no route to 172.16.0.0/18" in found[(API_INTERFACES, HYBRID_NODES, "tcp", 10250)]
    # The way there works; the reply cannot come back.
    assert found[(HYBRID_PODS_NODE_IP, COREDNS, "udp", 53)].startswith("the reply has no way back")


def test_a_missing_vpc_route_to_the_transit_gateway_is_caught(dev_run):
    found = blocked(planted(dev_run, drop=["network-transit-onprem-to-cloud"]))
    assert (HYBRID_NODES, GATEWAY_NODES, "udp", 8472) in found
    assert "has no route to 10.0." not in found[(HYBRID_NODES, GATEWAY_NODES, "udp", 8472)]
    # Without it the on-prem table sends the cloud VPC to its NAT gateway (the default route).
    assert "to nat nat-" in found[(HYBRID_NODES, GATEWAY_NODES, "udp", 8472)]


def test_a_missing_on_prem_nat_default_route_cuts_the_hosts_off_the_internet(lab):
    run = lab(gpuEnabled=True)
    found = blocked(planted(run, drop=["network-onprem-private-default-route"]))
    assert set(found) == {(HYBRID_NODES, INTERNET, "tcp", 443),
                          ("vllm (node IP)", INTERNET, "tcp", 443),
                          # A public endpoint is reached over the same NAT.
                          (HYBRID_NODES, API_ENDPOINT, "tcp", 443)}
    assert "has no route to 0.0.0.0/0" in found[(HYBRID_NODES, INTERNET, "tcp", 443)]


def test_a_nat_gateway_without_an_internet_route_is_caught(dev_run):
    found = blocked(planted(dev_run, drop=["network-onprem-public-default-route"]))
    assert "has no route to 0.0.0.0/0" in found[(HYBRID_NODES, INTERNET, "tcp", 443)]


def test_a_public_endpoint_closed_to_the_nat_addresses_is_caught(lab):
    run = lab(adminCidrs=["198.51.100.0/24", "203.0.113.7/32"])

    def admins_only(inputs):
        inputs["vpcConfig"]["publicAccessCidrs"] = ["198.51.100.0/24"]

    found = blocked(planted(run, change={"cluster-eks-cluster": admins_only}))
    assert set(found) == {(s, API_ENDPOINT, "tcp", 443)
                          for s in (HYBRID_NODES, SYSTEM_NODES, GATEWAY_NODES, KARPENTER_NODES)}
    assert "publicAccessCidrs do not list network-onprem-nat-gw's address 203.0.113." in \
        found[(HYBRID_NODES, API_ENDPOINT, "tcp", 443)]


def test_a_route_table_the_gateway_does_not_program_drops_replies_to_pod_ips(dev_run):
    def no_route_tables(inputs):
        inputs["values"]["routeTableIDs"] = "rtb-0elsewhere"

    found = blocked(planted(dev_run, change={"gateway-gateway-release": no_route_tables}))
    through_gateway = {key(r) for r in evaluated(dev_run)
                       if r.path == "hybrid nodes gateway"}
    assert set(found) == through_gateway
    assert "is not in its routeTableIDs" in found[(HYBRID_PODS_POD_IP, COREDNS, "udp", 53)]


@pytest.mark.parametrize("release, change, reason", [
    ("hybrid-cilium-release", lambda i: i["values"].__setitem__("vtep", {"enabled": False}),
     "Cilium's VTEP is off"),
    ("gateway-gateway-release", lambda i: i["values"].__setitem__("podCIDRs", "10.99.0.0/16"),
     "podCIDRs do not cover 172.17.0.0/16"),
    ("gateway-gateway-release", lambda i: i["values"].__setitem__("vpcCIDR", "10.99.0.0/16"),
     "vpcCIDR does not cover"),
    ("gateway-nodes-group-lt", lambda i: i.__setitem__("userData", None),
     "keep source/dest check on"),
], ids=["vtep-off", "pod-cidr", "vpc-cidr", "source-dest-check"])
def test_a_gateway_that_cannot_forward_blocks_pod_ip_flows(dev_run, release, change, reason):
    found = blocked(planted(dev_run, change={release: change}))
    through_gateway = {key(r) for r in evaluated(dev_run)
                       if r.path == "hybrid nodes gateway"}
    assert set(found) == through_gateway
    assert all(reason in detail for detail in found.values())


def test_karpenter_nodes_without_the_discovery_tag_have_no_security_group(dev_run):
    found = blocked(planted(dev_run, drop=["karpenter-cluster-sg-discovery"]))
    # CoreDNS and echo-cloud may run on burst nodes while the pool has no taint.
    assert {(KARPENTER_NODES, INTERNET, "tcp", 443), (KARPENTER_NODES, API_ENDPOINT, "tcp", 443)} <= set(found)
    assert "selects no security group" in found[(KARPENTER_NODES, INTERNET, "tcp", 443)]


def test_missing_egress_is_caught(dev_run):
    found = blocked(planted(dev_run, drop=["hybrid-hosts-egress"]))
    assert "no egress on sg-" in found[(HYBRID_NODES, INTERNET, "tcp", 443)]
    assert (HYBRID_PODS_NODE_IP, COREDNS, "udp", 53) in found


def test_a_transit_gateway_attachment_missing_a_zone_is_caught(lab):
    run = lab(availabilityZoneCount=3)
    attachment = run.named("network-transit-cloud-attachment")

    def two_zones(inputs):
        inputs["subnetIds"] = attachment.inputs["subnetIds"][:2]

    found = blocked(planted(run, change={"network-transit-cloud-attachment": two_zones}))
    assert (API_INTERFACES, HYBRID_NODES, "tcp", 10250) in found
    assert "has no subnet in ap-northeast-2c" in found[(API_INTERFACES, HYBRID_NODES, "tcp", 10250)]


def test_a_workload_on_the_wrong_side_makes_the_table_out_of_date(dev_run):
    def on_hybrid(inputs):
        inputs["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
            "matchExpressions"][0]["operator"] = "In"

    found = blocked(planted(dev_run, change={"demo-echo-cloud": on_hybrid}))
    assert set(found) == ECHO_CLOUD
    assert all("the flow table is out of date" in d for d in found.values())


# --- the negative check catches what it claims ---------------------------------------------------

def test_internet_exposure_catches_ingress_from_anywhere(dev_run):
    cluster_sg = dev_run.named("cluster-eks-cluster").outputs["vpcConfig"]["clusterSecurityGroupId"]
    hosts_sg = dev_run.named("hybrid-hosts-sg").id
    for group, cidr in ((hosts_sg, "0.0.0.0/0"), (cluster_sg, "0.0.0.0/0"),
                        (hosts_sg, "52.95.0.0/16"), (cluster_sg, "100.64.0.0/10")):
        bad = copy_of(dev_run, "hybrid-hosts-kubelet-from-cloud", "planted-from-anywhere",
                      securityGroupId=group, cidrIpv4=cidr)
        problems = reachability.internet_exposure(planted(dev_run, add=[bad]))
        assert problems == [f"{group} ({'cluster SG' if group == cluster_sg else 'hybrid-hosts-sg'}):"
                            f" ingress from {cidr} (planted-from-anywhere)"]


def test_internet_exposure_catches_inline_and_ipv6_ingress(dev_run):
    def open_inline(inputs):
        inputs["ingress"] = [{"protocol": "tcp", "fromPort": 22, "toPort": 22,
                              "ipv6CidrBlocks": ["::/0"]}]

    problems = reachability.internet_exposure(planted(dev_run, change={"gateway-nodes-sg": open_inline}))
    assert len(problems) == 1 and "ingress from ::/0" in problems[0]


def test_internet_exposure_catches_public_ips_and_public_subnets(dev_run):
    nat_subnet = dev_run.named("network-onprem-nat").id
    cases = {
        "instance public IP": {"hybrid-hosts-node-0": lambda i: i.__setitem__(
            "associatePublicIpAddress", True)},
        "instance in a public subnet": {"hybrid-hosts-node-0": lambda i: i.__setitem__(
            "subnetId", nat_subnet)},
        "subnet maps public IPs": {"network-cloud-private-0": lambda i: i.__setitem__(
            "mapPublicIpOnLaunch", True)},
        "launch template public IP": {"cluster-system-lt": lambda i: i.__setitem__(
            "networkInterfaces", [{"associatePublicIpAddress": "true"}])},
        "node group in a public subnet": {"cluster-system-ng": lambda i: i["subnetIds"].append(
            dev_run.named("network-cloud-nat").id)},
        "burst nodes in a public subnet": {"network-cloud-nat": lambda i: i.__setitem__(
            "tags", {"karpenter.sh/discovery": dev_run.lab_config.cluster_name})},
    }
    for what, change in cases.items():
        assert reachability.internet_exposure(planted(dev_run, change=change)), what
    eip = copy_of(dev_run, "network-onprem-nat-eip", "planted-eip",
                  instance=dev_run.named("hybrid-hosts-node-0").id)
    assert reachability.internet_exposure(planted(dev_run, add=[eip]))
    stray = copy_of(dev_run, "network-onprem-private-0", "planted-public-subnet",
                    cidrBlock="172.16.193.0/28")
    association = copy_of(dev_run, "network-onprem-nat-rta", "planted-public-rta",
                          subnetId=stray.id)
    assert reachability.internet_exposure(planted(dev_run, add=[stray, association])) == [
        f"public subnet {stray.id} (planted-public-subnet) holds no NAT gateway"]


def test_unmodelled_resources_are_reported(dev_run):
    acl = copy_of(dev_run, "network-onprem-private-0", "planted-acl")
    acl = dataclasses.replace(acl, type="aws:ec2/networkAcl:NetworkAcl")
    policy = dataclasses.replace(copy_of(dev_run, "demo-echo-cloud", "planted-policy"),
                                 type="kubernetes:networking.k8s.io/v1:NetworkPolicy")
    assert reachability.unmodelled(planted(dev_run, add=[acl, policy])) == [
        "planted-acl (aws:ec2/networkAcl:NetworkAcl)",
        "planted-policy (kubernetes:networking.k8s.io/v1:NetworkPolicy)"]
