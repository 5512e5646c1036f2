"""The VPC route tables, read as the rehearsal tools record them: each table's routes, with only
the fields that say where a route goes and whether it works."""

from __future__ import annotations

from typing import Any, Iterator

#: What is kept of each route: its destination, every kind of target, and its state.
ROUTE_FIELDS = ("DestinationCidrBlock", "NetworkInterfaceId", "InstanceId", "GatewayId",
                "TransitGatewayId", "NatGatewayId", "VpcPeeringConnectionId", "State", "Origin")


def ec2_error_code(error: BaseException) -> str:
    """The EC2 API's error code in a botocore ClientError ("" when it carries none)."""
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


def read_route_tables(ec2: Any, tables: list[str]) -> Iterator[dict[str, Any]]:
    """Each table in ``tables``, in that order, as it is read (so a caller records every table
    read before an error stops the rest): ``{id, found, routes}``, or ``{id, found: False,
    error, routes: []}`` for a table EC2 does not know (a finding, not a failure: the stack may
    name a table that was since deleted). Any other EC2 error is raised."""
    from botocore.exceptions import ClientError

    for table in tables:
        try:
            found = ec2.describe_route_tables(RouteTableIds=[table])["RouteTables"]
        except ClientError as error:
            if ec2_error_code(error) != "InvalidRouteTableID.NotFound":
                raise
            yield {"id": table, "found": False, "error": ec2_error_code(error), "routes": []}
            continue
        routes = [{k: r[k] for k in ROUTE_FIELDS if k in r} for t in found for r in t.get("Routes", [])]
        yield {"id": table, "found": bool(found), "routes": routes}
