"""A stand-in ``pulumi-resource-aws`` plugin for the real Pulumi engine: the provider gRPC
protocol (pulumi/pulumi proto/pulumi/provider.proto) served over offline/fake_cloud.py.

pulumi-aws cannot be built here (it is terraform-provider-aws plus patches), so under the real
engine the AWS resources need a provider that answers the way the mocks do. With this one on
``PATH`` the engine itself — not ``set_mocks`` — runs the whole program: it orders the steps,
diffs, replaces and deletes; the real pulumi-kubernetes provider and the dynamic provider host
run beside it. What this plugin decides is only what pulumi-aws would: each resource's outputs
(FakeCloud's, the same ids and ARNs the offline plan shows) and which changed properties force
a replacement (tests/replacement.py's FORCE_NEW, ported from the Terraform schema).

The engine finds it as an ambient plugin (pulumi/pulumi sdk/go/common/workspace/plugins.go
``GetPluginPath``: a ``pulumi-resource-aws`` on ``$PATH`` is used whatever the SDK's version)
and reads the port it listens on from its first line of stdout, as for any plugin.

Settings come from the environment the test gives the engine:

- ``STANDIN_ACCOUNT_ID``: the account sts:GetCallerIdentity answers (FakeCloud's by default).
- ``STANDIN_EKS_ENDPOINT``, ``STANDIN_EKS_CA``: what an ``aws:eks/cluster:Cluster`` reports as
  its endpoint and certificate authority (base64 PEM), so the program's Kubernetes provider and
  cleanups reach the real kube-apiserver on loopback.
- EC2 instances are made in the moto server the engine's ``AWS_ENDPOINT_URL`` names (with the
  provider's default tags merged in, as pulumi-aws's ``tagsAll``), and terminated there at
  delete, so the cleanups that terminate hosts and a test's check that destroy left no
  instance act on the same instances.
- ``STANDIN_JOURNAL``: a file each call is appended to, one JSON line (op, type, name, time),
  for a test that asks what the provider was asked to do.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import sys
import threading
import time
from concurrent import futures
from typing import Any

import grpc
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime import proto, rpc
from pulumi.runtime.proto import provider_pb2_grpc

from offline.fake_cloud import ACCOUNT_ID, FakeCloud
from tests.replacement import FORCE_NEW

import pulumi

#: The installed pulumi-aws SDK's version: the provider release the program's resources ask for.
VERSION = importlib.metadata.version("pulumi_aws")


def _plain(struct: struct_pb2.Struct) -> dict[str, Any]:
    # The engine sends secrets unwrapped (acceptSecrets is false) and unknowns as the sentinel.
    return rpc.deserialize_properties(struct, keep_unknowns=True)


def _struct(values: dict[str, Any]) -> struct_pb2.Struct:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(rpc.serialize_properties(values, {}))
    finally:
        loop.close()


class StandinAws(provider_pb2_grpc.ResourceProviderServicer):
    def __init__(self) -> None:
        self.cloud = FakeCloud(region="us-east-1",
                               account_id=os.environ.get("STANDIN_ACCOUNT_ID", ACCOUNT_ID))
        self.journal = os.environ.get("STANDIN_JOURNAL")
        self.lock = threading.Lock()
        self.default_tags: dict[str, str] = {}

    def _note(self, op: str, typ: str, name: str, **more: Any) -> None:
        if self.journal:
            line = {"op": op, "type": typ, "name": name, "at": time.time(), **more}
            with self.lock, open(self.journal, "a") as out:
                out.write(json.dumps(line) + "\n")

    # --- the provider itself ----------------------------------------------------------------

    def GetPluginInfo(self, request, context):
        return proto.PluginInfo(version=VERSION)

    def CheckConfig(self, request, context):
        return proto.CheckResponse(inputs=request.news)

    def DiffConfig(self, request, context):
        same = _plain(request.olds) == _plain(request.news)
        return proto.DiffResponse(changes=proto.DiffResponse.DIFF_NONE if same
                                  else proto.DiffResponse.DIFF_SOME)

    def Configure(self, request, context):
        region = dict(request.variables).get("aws:config:region") or \
            _plain(request.args).get("region")
        if region:
            self.cloud.region = region
        # Provider config values that are objects reach a provider JSON-encoded (the engine's
        # legacy config encoding), as pulumi-aws's own CheckConfig sees them.
        tags = _plain(request.args).get("defaultTags") or {}
        if isinstance(tags, str):
            tags = json.loads(tags)
        self.default_tags = dict(tags.get("tags") or {})
        return proto.ConfigureResponse(acceptSecrets=False, supportsPreview=True,
                                       acceptResources=True)

    def Invoke(self, request, context):
        args = _plain(request.args)
        try:
            answer = self.cloud.call(pulumi.runtime.MockCallArgs(request.tok, args, None))
        except Exception as error:  # an invoke FakeCloud does not know: say which
            context.abort(grpc.StatusCode.UNKNOWN, str(error))
        return proto.InvokeResponse(**{"return": _struct(answer)})

    # --- resources ------------------------------------------------------------------------------

    def Check(self, request, context):
        return proto.CheckResponse(inputs=request.news)

    def Diff(self, request, context):
        olds, news = _plain(request.olds), _plain(request.news)
        ignored = set(request.ignoreChanges)
        outputs_only = set(olds) - set(news)
        changed = sorted(k for k in set(olds) | set(news)
                         if k not in ignored and k not in outputs_only and olds.get(k) != news.get(k))
        if not changed:
            return proto.DiffResponse(changes=proto.DiffResponse.DIFF_NONE)
        replaces = [k for k in changed if k in FORCE_NEW.get(request.type, ())]
        return proto.DiffResponse(changes=proto.DiffResponse.DIFF_SOME, diffs=changed,
                                  replaces=replaces)

    def _outputs(self, typ: str, name: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        rid, state = self.cloud.new_resource(pulumi.runtime.MockResourceArgs(
            typ=typ, name=name, inputs=inputs, provider=None, resource_id=None, custom=True))
        if typ == "aws:eks/cluster:Cluster" and os.environ.get("STANDIN_EKS_ENDPOINT"):
            state["endpoint"] = os.environ["STANDIN_EKS_ENDPOINT"]
            state["certificateAuthority"] = {"data": os.environ["STANDIN_EKS_CA"]}
        return rid, state

    def _ec2(self):
        import boto3

        return boto3.client("ec2", region_name=self.cloud.region)

    def _run_instance(self, inputs: dict[str, Any]) -> str:
        tags = {**self.default_tags, **(inputs.get("tags") or {})}
        answer = self._ec2().run_instances(
            # moto knows its own images, not the SSM parameter's: the AMI is not the question.
            ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
            InstanceType=inputs.get("instanceType") or "m5.large",
            TagSpecifications=[{"ResourceType": "instance",
                                "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}])
        return answer["Instances"][0]["InstanceId"]

    def Create(self, request, context):
        if request.preview:
            return proto.CreateResponse(id="", properties=request.properties)
        inputs = _plain(request.properties)
        rid, state = self._outputs(request.type, request.name, inputs)
        if request.type == "aws:ec2/instance:Instance":
            rid = state["id"] = self._run_instance(inputs)
            state["arn"] = f"arn:aws:ec2:{self.cloud.region}:{self.cloud.account_id}:instance/{rid}"
            # What the machine boots with, for a test that plays its boot (a kwok Node).
            self._note("create", request.type, request.name, id=rid,
                       userData=inputs.get("userData") or "")
        elif request.type == "aws:eks/nodeGroup:NodeGroup":
            # What EKS brings up for the group, for a test that plays its nodes joining.
            self._note("create", request.type, request.name, id=rid,
                       nodeGroup={"name": state.get("nodeGroupName"),
                                  "labels": inputs.get("labels") or {},
                                  "taints": inputs.get("taints") or [],
                                  "instanceTypes": inputs.get("instanceTypes") or [],
                                  "desiredSize": (inputs.get("scalingConfig") or {}).get("desiredSize", 0)})
        else:
            self._note("create", request.type, request.name)
        return proto.CreateResponse(id=rid, properties=_struct(state))

    def Update(self, request, context):
        if request.preview:
            return proto.UpdateResponse(properties=request.news)
        self._note("update", request.type, request.name)
        _, state = self._outputs(request.type, request.name, _plain(request.news))
        return proto.UpdateResponse(properties=_struct(state))

    def Read(self, request, context):
        return proto.ReadResponse(id=request.id, properties=request.properties,
                                  inputs=request.inputs)

    def Delete(self, request, context):
        self._note("delete", request.type, request.name, id=request.id)
        if request.type == "aws:ec2/instance:Instance":
            # As the AWS provider: terminate, and take an instance already gone as deleted.
            ec2 = self._ec2()
            ec2.terminate_instances(InstanceIds=[request.id])
            ec2.get_waiter("instance_terminated").wait(
                InstanceIds=[request.id], WaiterConfig={"Delay": 1, "MaxAttempts": 30})
        return empty_pb2.Empty()

    def Cancel(self, request, context):
        return empty_pb2.Empty()


def main() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    provider_pb2_grpc.add_ResourceProviderServicer_to_server(StandinAws(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    # The engine ends a plugin by killing it; until then, serve.
    threading.Event().wait()


if __name__ == "__main__":
    main()
