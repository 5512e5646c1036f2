"""A stand-in for AWS while the program runs offline (the plan and the tests).

It answers the invokes the program makes and gives each new resource the outputs AWS would:
ids with the real prefixes, ARNs, public IPs from the documentation range. An invoke it does not
know raises instead of quietly returning nothing, so a new lookup in the program cannot slip
through the plan and the tests unanswered.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
from typing import Any, Callable, Optional

import dill
import pulumi
from pulumi.runtime import rpc

#: The example account of the AWS documentation; never a real one.
ACCOUNT_ID = "111122223333"

#: "Now" for dynamic providers that read the clock (they take it from a ``createdAt`` prop when
#: one is given): the start of today, UTC, fixed for the process so offline runs repeat.
FROZEN_NOW = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT00:00:00Z")

#: Zones per region as (name suffix, zone-id number). Regions not listed get three. us-west-1
#: lists usw1-az2, which EKS does not support, so it is left with two usable zones.
_ZONES: dict[str, list[tuple[str, int]]] = {
    "ap-northeast-2": [("a", 1), ("b", 2), ("c", 3), ("d", 4)],
    "us-east-1": [("a", 4), ("b", 6), ("c", 1), ("d", 2), ("e", 3), ("f", 5)],
    "us-west-1": [("a", 1), ("b", 3), ("c", 2)],
}
_REGION_ID_PREFIX = {"ap-northeast-2": "apne2", "us-east-1": "use1", "us-west-1": "usw1"}

# Resource type token -> (id prefix, ARN resource type) for EC2-style resources.
_EC2: dict[str, tuple[str, str]] = {
    "aws:ec2/vpc:Vpc": ("vpc", "vpc"),
    "aws:ec2/subnet:Subnet": ("subnet", "subnet"),
    "aws:ec2/routeTable:RouteTable": ("rtb", "route-table"),
    "aws:ec2/internetGateway:InternetGateway": ("igw", "internet-gateway"),
    "aws:ec2/natGateway:NatGateway": ("nat", "natgateway"),
    "aws:ec2/eip:Eip": ("eipalloc", "elastic-ip"),
    "aws:ec2/securityGroup:SecurityGroup": ("sg", "security-group"),
    "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup": ("sg", "security-group"),
    "aws:ec2/instance:Instance": ("i", "instance"),
    "aws:ec2/launchTemplate:LaunchTemplate": ("lt", "launch-template"),
    "aws:ec2transitgateway/transitGateway:TransitGateway": ("tgw", "transit-gateway"),
    "aws:ec2transitgateway/routeTable:RouteTable": ("tgw-rtb", "transit-gateway-route-table"),
    "aws:ec2transitgateway/vpcAttachment:VpcAttachment": ("tgw-attach", "transit-gateway-attachment"),
}
_ID_ONLY = {
    "aws:ec2/routeTableAssociation:RouteTableAssociation": "rtbassoc",
    "aws:ec2/route:Route": "r",
    "aws:ec2transitgateway/route:Route": "tgw-route",
    "aws:ec2transitgateway/routeTableAssociation:RouteTableAssociation": "tgw-rtb-assoc",
}


def _hex(*parts: str, length: int = 17) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:length]


class UnknownInvoke(LookupError):
    pass


class FakeCloud(pulumi.runtime.Mocks):
    def __init__(self, region: str, account_id: str = ACCOUNT_ID,
                 caller_arn: Optional[str] = None):
        self.region = region
        self.account_id = account_id
        #: What sts:GetCallerIdentity answers: an IAM user unless a test deploys as an assumed
        #: role.
        self.caller_arn = caller_arn or f"arn:aws:iam::{account_id}:user/lab-deployer"
        self.invokes: dict[str, Callable[[dict], dict]] = {
            "aws:index/getAvailabilityZones:getAvailabilityZones": self._availability_zones,
            "aws:index/getCallerIdentity:getCallerIdentity": self._caller_identity,
            "aws:index/getRegion:getRegion": lambda args: {"name": self.region, "region": self.region,
                                                           "id": self.region},
            "aws:index/getPartition:getPartition": lambda args: {
                "partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws"},
            "aws:eks/getAddonVersion:getAddonVersion": self._addon_version,
            "aws:ssm/getParameter:getParameter": self._ssm_parameter,
        }
        self.calls: list[str] = []

    # --- invokes -------------------------------------------------------------------------------

    def call(self, args: pulumi.runtime.MockCallArgs):
        self.calls.append(args.token)
        handler = self.invokes.get(args.token)
        if handler is None:
            raise UnknownInvoke(
                f"the offline fake cloud does not answer invoke {args.token}; "
                "add it to offline/fake_cloud.py")
        return handler(args.args)

    def _availability_zones(self, args: dict) -> dict:
        prefix = _REGION_ID_PREFIX.get(self.region, self.region.replace("-", "")[:6])
        zones = _ZONES.get(self.region, [("a", 1), ("b", 2), ("c", 3)])
        excluded = set(args.get("excludeZoneIds") or [])
        pairs = [(f"{self.region}{s}", f"{prefix}-az{n}") for s, n in zones]
        pairs = [(name, zid) for name, zid in pairs if zid not in excluded]
        return {
            "id": self.region,
            "names": [name for name, _ in pairs],
            "zoneIds": [zid for _, zid in pairs],
            "groupNames": [self.region] * len(pairs),
            "state": args.get("state"),
        }

    def _addon_version(self, args: dict) -> dict:
        minor = str(args["kubernetesVersion"]).split(".")[1]
        version = f"v1.{minor}.0-eksbuild.1"
        return {"addonName": args["addonName"], "kubernetesVersion": args["kubernetesVersion"],
                "version": version, "id": args["addonName"]}

    def _ssm_parameter(self, args: dict) -> dict:
        name = args["name"]
        if not name.startswith("/aws/service/"):
            raise UnknownInvoke(f"the offline fake cloud knows only public parameters, not {name}")
        value = f"ami-0{_hex(name, length=16)}" if name.endswith("/ami-id") else f"fake:{name}"
        return {"name": name, "value": value, "insecureValue": value, "type": "String",
                "id": name, "arn": f"arn:aws:ssm:{self.region}::parameter{name}"}

    def _caller_identity(self, args: dict) -> dict:
        return {"accountId": self.account_id, "id": self.account_id, "arn": self.caller_arn,
                "userId": "AIDAEXAMPLEDEPLOYER"}

    # --- resources -----------------------------------------------------------------------------

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        state: dict[str, Any] = dict(args.inputs)
        if args.typ.startswith("pulumi-python:dynamic"):
            return self._dynamic_create(state, args.name)
        if args.typ.startswith("pulumi:providers:"):
            return f"{args.name}-provider-id", state
        rid = self._id(args.typ, args.name)
        if args.typ in _EC2:
            state["arn"] = f"arn:aws:ec2:{self.region}:{self.account_id}:{_EC2[args.typ][1]}/{rid}"
        state["id"] = rid
        state.update(self._computed(args.typ, args.name, rid, state))
        return rid, state

    def _dynamic_create(self, inputs: dict, name: str):
        """Runs the dynamic provider's own create(). This project's dynamic providers act on the
        cloud only in delete(); their create() is pure, so the plan shows their real outputs."""
        blob = rpc.unwrap_rpc_secret(inputs["__provider"])
        provider = dill.loads(base64.b64decode(blob))
        props = {k: rpc.unwrap_rpc_secret(v) for k, v in inputs.items() if k != "__provider"}
        if props.get("createdAt") == "":
            props["createdAt"] = FROZEN_NOW
        if hasattr(provider, "sleep"):
            # A propagation wait: nothing propagates offline, and the plan must not wait.
            provider.sleep = lambda _seconds: None
        if hasattr(provider, "new_token"):
            # What a cleanup mints at create: a function of the name (as ids are), so the plan's
            # runs repeat; a model of a later creation names the resource anew
            # (tests/replacement.py).
            provider.new_token = lambda: _hex("token", name, length=32)
        result = provider.create(props)
        return result.id, {**props, **(result.outs or {}), "__provider": inputs["__provider"]}

    def _id(self, typ: str, name: str) -> str:
        if typ == "aws:ssm/activation:Activation":
            h = _hex(typ, name, length=32)
            return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        if typ in _EC2:
            return f"{_EC2[typ][0]}-0{_hex(typ, name, length=16)}"
        if typ in _ID_ONLY:
            return f"{_ID_ONLY[typ]}-0{_hex(typ, name, length=16)}"
        return f"{name}-{_hex(typ, name, length=8)}"

    def _public_ip(self, allocation_id: str) -> str:
        # 203.0.113.0/24 (TEST-NET-3) is reserved for documentation.
        return f"203.0.113.{int(_hex(allocation_id, length=4), 16) % 254 + 1}"

    def _computed(self, typ: str, name: str, rid: str, state: dict) -> dict:
        if typ == "aws:ec2/vpc:Vpc":
            return {"defaultSecurityGroupId": self._id("aws:ec2/securityGroup:SecurityGroup", name + "-default"),
                    "mainRouteTableId": self._id("aws:ec2/routeTable:RouteTable", name + "-main"),
                    "ownerId": self.account_id}
        if typ == "aws:ec2/eip:Eip":
            return {"allocationId": rid, "publicIp": self._public_ip(rid)}
        if typ == "aws:ec2/natGateway:NatGateway":
            # The same address as the Elastic IP it was given.
            return {"publicIp": self._public_ip(state.get("allocationId", rid)), "networkInterfaceId": f"eni-0{_hex(name, length=16)}"}
        if typ == "aws:ec2transitgateway/transitGateway:TransitGateway":
            return {"associationDefaultRouteTableId": "", "ownerId": self.account_id}
        if typ == "aws:ec2/instance:Instance":
            return {"privateIp": f"172.31.{int(_hex(rid, length=2), 16) % 250}.10",
                    "primaryNetworkInterfaceId": f"eni-0{_hex(rid, 'eni', length=16)}"}
        if typ == "aws:ec2/launchTemplate:LaunchTemplate":
            return {"latestVersion": 1, "defaultVersion": 1}
        if typ == "aws:iam/role:Role":
            role_name = state.get("name") or f"{name}-{_hex(name, length=7)}"
            return {"name": role_name, "arn": f"arn:aws:iam::{self.account_id}:role/{role_name}",
                    "uniqueId": f"AROA{_hex(name, length=17).upper()}"}
        if typ == "aws:kms/key:Key":
            key_id = f"{_hex(name, length=8)}-{_hex(name, 'a', length=4)}-4{_hex(name, 'b', length=3)}-8{_hex(name, 'c', length=3)}-{_hex(name, 'd', length=12)}"
            return {"keyId": key_id, "arn": f"arn:aws:kms:{self.region}:{self.account_id}:key/{key_id}"}
        if typ == "aws:cloudwatch/logGroup:LogGroup":
            return {"arn": f"arn:aws:logs:{self.region}:{self.account_id}:log-group:{state.get('name', name)}"}
        if typ == "aws:eks/cluster:Cluster":
            cluster = state["name"]
            vpc_config = dict(state.get("vpcConfig") or {})
            vpc_config["clusterSecurityGroupId"] = self._id("aws:ec2/securityGroup:SecurityGroup", cluster + "-cluster")
            return {
                "arn": f"arn:aws:eks:{self.region}:{self.account_id}:cluster/{cluster}",
                "endpoint": f"https://{_hex(cluster, length=32).upper()}.gr7.{self.region}.eks.amazonaws.com",
                # "-----BEGIN CERTIFICATE-----" ... base64-encoded, as EKS returns it.
                "certificateAuthority": {"data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="},
                "vpcConfig": vpc_config,
                "status": "ACTIVE",
                "platformVersion": "eks.1",
            }
        if typ == "aws:eks/nodeGroup:NodeGroup":
            return {"nodeGroupName": f"{name}-{_hex(name, length=8)}", "status": "ACTIVE",
                    "arn": f"arn:aws:eks:{self.region}:{self.account_id}:nodegroup/{name}"}
        if typ == "aws:eks/podIdentityAssociation:PodIdentityAssociation":
            # EKS: "a-" and 17 characters; the ARN names the cluster.
            association = f"a-{_hex(name, 'association', length=17)}"
            return {"associationId": association,
                    "associationArn": f"arn:aws:eks:{self.region}:{self.account_id}:"
                                      f"podidentityassociation/{state.get('clusterName')}/{association}"}
        if typ == "aws:ssm/activation:Activation":
            return {"activationCode": f"{_hex(name, 'code', length=20)}", "expired": False,
                    "registrationCount": 0}
        if typ == "aws:sqs/queue:Queue":
            queue = state.get("name") or f"{name}-{_hex(name, length=7)}"
            return {"name": queue, "arn": f"arn:aws:sqs:{self.region}:{self.account_id}:{queue}",
                    "url": f"https://sqs.{self.region}.amazonaws.com/{self.account_id}/{queue}"}
        if typ == "aws:cloudwatch/eventRule:EventRule":
            rule = state.get("name") or f"{name}-{_hex(name, length=7)}"
            return {"name": rule, "arn": f"arn:aws:events:{self.region}:{self.account_id}:rule/{rule}"}
        if typ.startswith("aws:") and "arn" not in state:
            # Every other AWS resource still gets an ARN of the right service, so nothing
            # built from one (a policy, say) sees None.
            service = typ.split(":")[1].split("/")[0]
            return {"arn": f"arn:aws:{service}:{self.region}:{self.account_id}:{name}/{rid}"}
        return {}
