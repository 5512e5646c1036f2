"""The ``aws:region`` rule: a region of the ``aws`` partition, and no other.

The lab writes the ``aws`` partition everywhere a partition shows: its ARNs (``arn:aws:…`` in
its IAM policies and access entries), the service principals its roles trust
(``ec2.amazonaws.com``), the endpoints and download hosts it names (nodeadm's
``hybrid-assets.eks.amazonaws.com``, the charts' ``public.ecr.aws``). Rather than half-follow
another partition, the config refuses a region of any other, before anything is created, and
says why (docs/configuration.md#regions has the sources).

Which partition a region is in is botocore's answer (the endpoint rules' ``aws.partition``,
botocore/endpoint_provider.py ``RuleSetStandardLibrary.aws_partition`` and
``is_partition_match``): the first partition of botocore's ``data/partitions.json`` that lists
the region or whose ``regionRegex`` matches it. botocore falls back to ``aws`` for a name no
partition matches; here such a name is no region at all.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from pathlib import Path
from typing import Optional

#: The partition the lab's ARNs, service principals and endpoints are written for.
LAB_PARTITION = "aws"

#: A region name's shape (lower case, words and a number: ``ap-northeast-2``,
#: ``eusc-de-east-1``); botocore's patterns use ``\\w``, which also admits upper case and ``_``.
_SHAPE = re.compile(r"[a-z]{2,4}(-[a-z]+)+-\d+")

#: Why the lab does not run in a partition (one clause, after "the lab runs only in the aws
#: partition"); the sources are in docs/configuration.md#regions.
_WHY = {
    "aws-us-gov": "Amazon EKS Hybrid Nodes isn't available in AWS GovCloud (US)",
    "aws-cn": "the China regions have their own ARNs (arn:aws-cn:), EC2 service principal "
              "(ec2.amazonaws.com.cn) and nodeadm download host (eks-hybrid-assets.awsstatic.cn), "
              "and the lab writes the aws partition's",
}
_WHY_ISOLATED = ("AWS publishes no documentation of EKS Hybrid Nodes in the isolated (ISO) "
                 "regions, and the lab writes the aws partition's ARNs, service principals and "
                 "endpoints")
_WHY_OTHER = "the lab writes the aws partition's ARNs, service principals and endpoints"


@functools.lru_cache(maxsize=None)
def _partitions() -> tuple[dict, ...]:
    """botocore's partitions, read from its data file without importing botocore (the program
    installs boto3, so the file is there wherever the program runs)."""
    spec = importlib.util.find_spec("botocore")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("botocore is not installed: pip install -r requirements.txt")
    data = Path(list(spec.submodule_search_locations)[0]) / "data" / "partitions.json"
    return tuple(json.loads(data.read_text())["partitions"])


def partition_of(region: str) -> Optional[str]:
    """The partition ``region`` is in, by botocore's rule; None when no partition has it."""
    if not _SHAPE.fullmatch(region):
        return None
    for partition in _partitions():
        if region in partition["regions"] or re.match(partition["regionRegex"], region):
            return partition["id"]
    return None


def region_problem(region: Optional[str]) -> Optional[str]:
    """What is wrong with ``region`` as the lab's ``aws:region``, in one clause; None if
    nothing is."""
    if region is None or partition_of(region) is None:
        return ("must be an AWS region such as ap-northeast-2 "
                "(pulumi config set aws:region ap-northeast-2)")
    partition = partition_of(region)
    if partition == LAB_PARTITION:
        return None
    why = _WHY.get(partition) or (_WHY_ISOLATED if partition.startswith("aws-iso")
                                  else _WHY_OTHER)
    return (f"is in the {partition} partition; the lab runs only in regions of the "
            f"{LAB_PARTITION} partition: {why} (docs/configuration.md#regions). Set a region of "
            f"the {LAB_PARTITION} partition, such as ap-northeast-2")


def arn_partition(arn: str) -> str:
    """The partition field of an ARN (``arn:<partition>:…``)."""
    return arn.split(":", 2)[1]
