"""Removes what the EKS Hybrid Nodes gateway leaves behind after ``helm uninstall``.

The gateway's leader writes ``<hybrid pod CIDR> -> <its primary ENI>`` into the VPC route tables
it is given (CreateRoute/ReplaceRoute; it never deletes) and upserts the cluster-scoped
``CiliumVTEPConfig`` (``hybrid-gateway``). Uninstalling the chart leaves both: the routes turn
into blackholes once the ENI goes, and Cilium keeps tunnelling to a gateway that is gone. A
staged teardown that keeps the VPC and the cluster must remove them.

The gateway's Helm release depends on this resource, and this resource on the route tables and
the cluster: at destroy Pulumi uninstalls the release first, then this resource's ``delete``
removes the routes and the VTEP config, then the tables and the cluster go.

Only routes the gateway can have written are touched: in a listed table, to a destination
inside one of the pod CIDRs, targeting a network interface, made by CreateRoute. The hybrid
*node* CIDR routes to the Transit Gateway, the ``local`` route, propagated routes and every
other table stay.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi.dynamic

from components.aws_account import AwsAccount
from components.cleanup.aws_calls import AwsCalls
from components.cleanup.aws_session import AwsSession
from components.cleanup.kubernetes_api import KubernetesApi, public_certificate_authority
from components.cleanup.self_contained import self_contained


@self_contained
class GatewayRouteCleanupProvider(KubernetesApi, AwsCalls, pulumi.dynamic.ResourceProvider):
    """Dynamic provider: ``create`` records what to clean, ``delete`` removes the gateway's VPC
    routes and its ``CiliumVTEPConfig``.

    Pickled into the state and run from there at destroy time, hence ``@self_contained``: every
    helper is a method and every import happens inside a method. The Kubernetes API plumbing
    (token, CA-pinned opener, retried calls) comes from ``KubernetesApi``; ``retry_base_seconds``
    and ``attempts`` govern the EC2 retries too.
    """

    # Nothing secret is captured by the provider or stored in its outputs.
    serialize_as_secret_always = False

    #: Versions the CiliumVTEPConfig CRD may be served at, tried in this order.
    vtep_versions: tuple[str, ...] = ("v2", "v2alpha1")

    # A change to any of these means another set of things to clean up; the old resource's
    # delete must still clean up the old set.
    _replace_keys = ("routeTableIds", "podCidrs", "region", "clusterName", "vtepConfigName")
    # These only say how to reach the cluster.
    _update_keys = ("endpoint", "certificateAuthority", *AwsSession._account_keys)

    def check_props(self, props: dict[str, Any]) -> dict[str, Any]:
        """The props ``delete`` needs, validated; raises ValueError."""
        import ipaddress

        problems = []
        strings = ("region", "clusterName", "endpoint", "certificateAuthority", "vtepConfigName")
        for key in strings:
            if not isinstance(props.get(key), str) or not props[key].strip():
                problems.append(f"{key} must be a non-empty string")
        endpoint = props.get("endpoint")
        if isinstance(endpoint, str) and endpoint.strip() and not endpoint.startswith("https://"):
            problems.append(f"endpoint must be an https URL, got {endpoint!r}")

        tables = props.get("routeTableIds")
        if not isinstance(tables, (list, tuple)) or not tables:
            problems.append("routeTableIds must be a non-empty list")
        elif not all(isinstance(t, str) and t.startswith("rtb-") for t in tables):
            problems.append(f"routeTableIds must be route table ids (rtb-...), got {tables!r}")

        cidrs = props.get("podCidrs")
        if not isinstance(cidrs, (list, tuple)) or not cidrs:
            problems.append("podCidrs must be a non-empty list")
        else:
            for cidr in cidrs:
                try:
                    # strict: a CIDR with host bits set is a typo, not what the gateway got.
                    network = ipaddress.ip_network(cidr, strict=True) \
                        if isinstance(cidr, str) and "/" in cidr else None
                except ValueError:
                    network = None
                if network is None or network.version != 4:
                    problems.append(f"podCidrs: {cidr!r} is not an IPv4 CIDR such as "
                                    "172.17.0.0/16")
        if problems:
            raise ValueError("gateway route cleanup: " + "; ".join(problems))
        outs = {key: props[key] for key in strings}
        outs["routeTableIds"] = list(tables)
        outs["podCidrs"] = list(cidrs)
        outs.update(self._account_props(props))
        return outs

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        # Pure on purpose: the offline plan calls it under mocks, and there is nothing to make.
        from pulumi.dynamic import CreateResult

        outs = self.check_props(props)
        return CreateResult(f"gateway-routes-{outs['clusterName']}", outs)

    def diff(self, _id: str, olds: dict[str, Any],
             news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        from pulumi.dynamic import DiffResult

        def same(key: str) -> bool:
            old, new = olds.get(key), news.get(key)
            if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)):
                # The order of tables or CIDRs does not change what is cleaned up.
                return sorted(map(str, old)) == sorted(map(str, new))
            return old == new

        replaces = [key for key in self._replace_keys if not same(key)]
        updates = [key for key in self._update_keys if not same(key)]
        # delete() runs the provider code stored in the state: a changed provider alone is an
        # update, or a fix to this class would never reach a stack whose inputs stay the same.
        code_changed = olds.get("__provider") != news.get("__provider")
        return DiffResult(changes=bool(replaces or updates) or code_changed,
                          replaces=replaces, delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any],
               news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        from pulumi.dynamic import UpdateResult

        return UpdateResult(self.check_props(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        props = self.check_props(props)
        region = props["region"]
        name = props["vtepConfigName"]
        # This call's credentials, handed to each part (never kept on the provider object,
        # which the engine's concurrent deletes share: components/cleanup/aws_session.py).
        account = self._account(props)

        # Each part runs whatever happened to the other; everything left is reported at once.
        try:
            routes_left, tables_unread = self._delete_routes(props, account)
        except Exception as error:  # noqa: BLE001 - reported below, with what to do by hand
            routes_left = []
            tables_unread = [(table, f"{type(error).__name__}: {error}")
                             for table in props["routeTableIds"]]
        vtep_error: Optional[str] = None
        try:
            self._delete_vtep_config(props, account)
        except Exception as error:  # noqa: BLE001
            # A cluster deleted outside Pulumi took its CiliumVTEPConfig with it.
            if not self._cluster_is_gone(props["clusterName"], region, account):
                vtep_error = f"{type(error).__name__}: {error}"

        if not routes_left and not tables_unread and vtep_error is None:
            return
        lines = [f"Could not remove everything the EKS Hybrid Nodes gateway of cluster "
                 f"{props['clusterName']} left behind. Left:"]
        for table, destination, why in routes_left:
            lines.append(f"  route {destination} in route table {table} ({region}): {why}")
        for table, why in tables_unread:
            lines.append(f"  route table {table} ({region}) could not be read: {why}; its "
                         f"routes to {', '.join(props['podCidrs'])} (or inside them) that "
                         "target a network interface may still be there")
        if vtep_error is not None:
            lines.append(f"  CiliumVTEPConfig {name} at {props['endpoint']}: {vtep_error}")
        if routes_left or tables_unread:
            lines.append("Stale routes send pod traffic into a blackhole once the gateway's "
                         "network interface is gone.")
        if vtep_error is not None:
            lines.append("A stale CiliumVTEPConfig makes Cilium tunnel to a gateway that is "
                         "gone.")
        lines.append("Remove what is left by hand with:")
        for table, destination, _why in routes_left:
            lines.append(f"  aws ec2 delete-route --region {region} --route-table-id {table} "
                         f"--destination-cidr-block {destination}")
        for table, _why in tables_unread:
            lines.append(f"  aws ec2 describe-route-tables --region {region} "
                         f"--route-table-ids {table}   # then, for each such route:")
            lines.append(f"  aws ec2 delete-route --region {region} --route-table-id {table} "
                         "--destination-cidr-block <destination>")
        if vtep_error is not None:
            lines.append(f"  kubectl delete ciliumvtepconfig {name}")
        raise Exception("\n".join(lines))

    # --- EC2 ------------------------------------------------------------------------------

    def _delete_routes(self, props: dict[str, Any], account: Any
                       ) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
        """Deletes the gateway's routes with ``account``'s credentials. Returns the routes left
        as (table, destination, why) and the tables that could not be read as (table, why)."""
        ec2 = self._aws_client("ec2", props["region"], account=account)
        tables, unread = self._describe_tables(ec2, props["routeTableIds"])
        left = []
        for table_id, destination in self._gateway_routes(tables, props):
            _, why = self._aws_call(
                ec2.delete_route, gone_codes=("InvalidRoute.NotFound",
                                              "InvalidRouteTableID.NotFound"),
                RouteTableId=table_id, DestinationCidrBlock=destination)
            if why is not None:
                left.append((table_id, destination, why))
        return left, unread

    def _describe_tables(self, ec2: Any, table_ids: list[str]
                         ) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
        """The listed tables that exist, and the ones that could not be read with why. A table
        that no longer exists has no routes left: it is neither returned nor unread."""
        response, why = self._aws_call(ec2.describe_route_tables, RouteTableIds=list(table_ids))
        if why is None:
            return response.get("RouteTables", []), []
        if not why.startswith("InvalidRouteTableID.NotFound"):
            return [], [(table_id, why) for table_id in table_ids]
        # One of them is gone (the whole call fails then): look at them one at a time.
        tables, unread = [], []
        for table_id in table_ids:
            response, why = self._aws_call(ec2.describe_route_tables, RouteTableIds=[table_id],
                                           gone_codes=("InvalidRouteTableID.NotFound",))
            if why is not None:
                unread.append((table_id, why))
            else:
                tables.extend(response.get("RouteTables", []))
        return tables, unread

    def _gateway_routes(self, tables: list[dict[str, Any]],
                        props: dict[str, Any]) -> list[tuple[str, str]]:
        """(table, destination) of each route the gateway can have written."""
        import ipaddress

        listed = set(props["routeTableIds"])
        pods = [ipaddress.ip_network(cidr) for cidr in props["podCidrs"]]
        found = []
        for table in tables:
            table_id = table.get("RouteTableId")
            if table_id not in listed:
                continue  # never act on a table we were not given, whatever the API returned
            for route in table.get("Routes") or []:
                destination = route.get("DestinationCidrBlock")
                if not destination or not route.get("NetworkInterfaceId") \
                        or route.get("Origin") != "CreateRoute":
                    continue
                try:
                    network = ipaddress.ip_network(destination, strict=False)
                except ValueError:
                    continue
                if any(network.version == pod.version and network.subnet_of(pod)
                       for pod in pods):
                    found.append((table_id, destination))
        return found

    # --- Kubernetes -----------------------------------------------------------------------

    def _delete_vtep_config(self, props: dict[str, Any], account: Any) -> None:
        """Deletes the CiliumVTEPConfig at whichever version is served. Done once it is gone:
        404 at every version means not served there or already deleted. Raises otherwise."""
        import urllib.parse

        token = self._bearer_token(props["clusterName"], props["region"], account)
        opener = self._opener(props["certificateAuthority"])
        name = urllib.parse.quote(props["vtepConfigName"], safe="")
        base = props["endpoint"].rstrip("/")
        for version in self.vtep_versions:
            # The object is reachable through every served version; a version the CRD does
            # not serve answers 404 like an absent object, so the next one is tried.
            url = f"{base}/apis/cilium.io/{version}/ciliumvtepconfigs/{name}"
            if self._call(opener, "DELETE", url, token, allow_404=True) is not None:
                return


class GatewayRouteCleanup(pulumi.dynamic.Resource, module="cleanup", name="GatewayRoutes"):
    """Removes the EKS Hybrid Nodes gateway's VPC routes and ``CiliumVTEPConfig`` when deleted.

    Make the gateway's Helm release depend on it; it depends on the route tables and the
    cluster through its inputs. At destroy it then runs after ``helm uninstall`` and before the
    tables and the cluster go.
    """

    # Dynamic resources publish each output under its property name, as an attribute.
    region: pulumi.Output[str]
    routeTableIds: pulumi.Output[list[str]]
    podCidrs: pulumi.Output[list[str]]
    clusterName: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    certificateAuthority: pulumi.Output[str]
    vtepConfigName: pulumi.Output[str]

    def __init__(self, name: str, region: pulumi.Input[str],
                 route_table_ids: pulumi.Input[list[pulumi.Input[str]]],
                 pod_cidrs: pulumi.Input[list[pulumi.Input[str]]],
                 cluster_name: pulumi.Input[str], endpoint: pulumi.Input[str],
                 certificate_authority: pulumi.Input[str],
                 vtep_config_name: pulumi.Input[str] = "hybrid-gateway",
                 account: Optional[AwsAccount] = None,
                 opts: Optional[pulumi.ResourceOptions] = None) -> None:
        """``account``: the credentials ``delete`` acts with (components/aws_account.py)."""
        super().__init__(GatewayRouteCleanupProvider(), name, {
            "region": region,
            "routeTableIds": route_table_ids,
            "podCidrs": pod_cidrs,
            "clusterName": cluster_name,
            "endpoint": endpoint,
            "certificateAuthority": public_certificate_authority(certificate_authority),
            "vtepConfigName": vtep_config_name,
            **(account or AwsAccount()).cleanup_inputs(),
        }, opts)
