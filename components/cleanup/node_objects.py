"""Deletes the Kubernetes ``Node`` objects of this stack's hybrid hosts when they go away.

EKS bills a hybrid node per vCPU-hour for as long as its ``Node`` object exists, not while the
machine runs. When the stack is lowered below the hybrid layer (the cluster stays) or a host is
replaced, the EC2 host is terminated but its ``Node`` stays behind, NotReady, and keeps billing.
Nothing in Pulumi owns those objects (the kubelet created them), so this dynamic resource removes
them in its ``delete``. The hosts depend on it and it depends on the cluster and the access
entries, so at destroy it runs after the hosts are gone and while the API server still answers.

It acts only on nodes selected by this stack's label *and* labelled as hybrid compute: other
stacks' hybrid nodes and the cloud nodes of the same cluster are never touched.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi.dynamic

from components.cleanup.self_contained import self_contained


@self_contained
class NodeObjectCleanupProvider(pulumi.dynamic.ResourceProvider):
    """Dynamic provider: ``create`` records where the nodes live, ``delete`` removes them."""

    # Nothing secret is captured by the provider or stored in its outputs.
    serialize_as_secret_always = False

    #: How long ``delete`` waits for the deleted nodes to disappear from the list.
    poll_seconds: float = 60.0
    #: Pause between two looks at the node list while waiting.
    poll_interval_seconds: float = 2.0
    #: First backoff between attempts of one request (doubles each time).
    retry_base_seconds: float = 1.0
    #: Attempts per request for connection errors, throttling, 401/403 and 5xx.
    attempts: int = 5
    #: Socket timeout of one request.
    request_timeout_seconds: float = 15.0
    #: Nodes fetched per list page.
    page_size: int = 100

    def check_props(self, props: dict[str, Any]) -> dict[str, str]:
        # An empty selector matches every node of the cluster: refuse it outright.
        keys = ("clusterName", "region", "endpoint", "certificateAuthority", "labelSelector")
        missing = [key for key in keys
                   if not isinstance(props.get(key), str) or not props[key].strip()]
        if missing:
            why = ("; an empty labelSelector would select every node of the cluster"
                   if "labelSelector" in missing else "")
            raise ValueError("node-object cleanup needs non-empty " + ", ".join(missing) + why)
        if not props["endpoint"].startswith("https://"):
            raise ValueError(f"endpoint must be an https URL, got {props['endpoint']!r}")
        return {key: props[key] for key in keys}

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        # Pure on purpose: the offline plan calls it under mocks, and there is nothing to make.
        outs = self.check_props(props)
        return pulumi.dynamic.CreateResult(f"node-objects-{outs['clusterName']}", outs)

    def diff(self, _id: str, olds: dict[str, Any],
             news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        # A different cluster or selector means a different set of nodes to clean up; the old
        # resource's delete must still clean up the old set. The rest only says how to reach it.
        replace_keys = ("clusterName", "labelSelector")
        update_keys = ("endpoint", "certificateAuthority", "region")
        replaces = [key for key in replace_keys if olds.get(key) != news.get(key)]
        changed = [key for key in replace_keys + update_keys if olds.get(key) != news.get(key)]
        # A changed provider (new code) is an update too, so destroy runs the latest code.
        code_changed = olds.get("__provider") != news.get("__provider")
        return pulumi.dynamic.DiffResult(
            changes=bool(changed) or code_changed, replaces=replaces,
            delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any],
               news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        return pulumi.dynamic.UpdateResult(self.check_props(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        import time

        props = self.check_props(props)
        selector = props["labelSelector"]
        left: Optional[list[str]] = None
        try:
            token = self._bearer_token(props["clusterName"], props["region"])
            opener = self._opener(props["certificateAuthority"])
            deadline = time.monotonic() + self.poll_seconds
            left = self._list_hybrid_nodes(opener, props, token)
            while left:
                for name in left:
                    self._delete_node(opener, props, token, name)
                left = self._list_hybrid_nodes(opener, props, token)
                if not left:
                    break
                # Nodes with finalizers linger a moment, and a kubelet that was still alive
                # re-registers its node: look again, deleting whatever is still listed.
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"still listed after {self.poll_seconds:g} s")
                time.sleep(self.poll_interval_seconds)
        except Exception as error:
            nodes = (", ".join(left) + " (as last listed)" if left
                     else "unknown (the node list did not succeed)")
            raise Exception(
                f"Could not delete the hybrid Node objects of EKS cluster "
                f"{props['clusterName']} at {props['endpoint']}: {error}. "
                f"Nodes left: {nodes}. They are billed while they exist; remove them by hand "
                f"with: kubectl delete node -l {selector}") from error

    def _bearer_token(self, cluster_name: str, region: str) -> str:
        # The same token `aws eks get-token` prints: a presigned STS GetCallerIdentity URL that
        # names the cluster in a signed header. Presigning is local; the API server's
        # authenticator is what calls STS with it.
        import base64

        import boto3

        sts = boto3.session.Session().client("sts", region_name=region)

        def add_cluster_header(request: Any, **_kwargs: Any) -> None:
            request.headers["x-k8s-aws-id"] = cluster_name

        sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_cluster_header)
        url = sts.generate_presigned_url(
            "get_caller_identity", Params={}, ExpiresIn=60, HttpMethod="GET")
        return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")

    def _opener(self, certificate_authority: str) -> Any:
        import base64
        import ssl
        import urllib.request

        # Trust the cluster's own CA and nothing else; PROTOCOL_TLS_CLIENT also checks the
        # hostname, so a token cannot be handed to another server.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cadata=base64.b64decode(certificate_authority).decode())

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            # A redirect would carry the bearer token to wherever it points.
            def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
                return None

        return urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=context), NoRedirect())

    def _call(self, opener: Any, method: str, url: str, token: str,
             allow_404: bool = False) -> Optional[dict]:
        import json
        import ssl
        import time
        import urllib.error
        import urllib.request

        last = ""
        for attempt in range(self.attempts):
            if attempt:
                time.sleep(self.retry_base_seconds * 2 ** (attempt - 1))
            request = urllib.request.Request(url, method=method, headers={
                "Authorization": f"Bearer {token}", "Accept": "application/json"})
            try:
                with opener.open(request, timeout=self.request_timeout_seconds) as response:
                    body = response.read()
                    return json.loads(body) if body else {}
            except urllib.error.HTTPError as error:
                detail = error.read()[:300].decode(errors="replace")
                error.close()
                if error.code == 404 and allow_404:
                    return None
                last = f"{method} {url} answered HTTP {error.code} {detail}".strip()
                # 401/403 right after the access entry changes can be IAM propagation;
                # 429 and 5xx are the API server asking to come back later.
                if error.code not in (401, 403, 429) and error.code < 500:
                    raise RuntimeError(last) from None
            except urllib.error.URLError as error:
                reason = error.reason
                if isinstance(reason, ssl.SSLCertVerificationError):
                    # Retrying will not make an untrusted server trusted.
                    raise RuntimeError(
                        f"{method} {url}: TLS verification against the cluster CA failed: "
                        f"{reason}") from None
                last = f"{method} {url} failed: {reason}"
            except (OSError, ValueError) as error:
                # Connection resets, timeouts and truncated bodies surface here.
                last = f"{method} {url} failed: {error!r}"
        raise RuntimeError(f"{last} (after {self.attempts} attempts)")

    def _list_hybrid_nodes(self, opener: Any, props: dict[str, str], token: str) -> list[str]:
        import urllib.parse

        selector = props["labelSelector"]
        names: list[str] = []
        cont = ""
        while True:
            query = {"labelSelector": selector, "limit": str(self.page_size)}
            if cont:
                query["continue"] = cont
            page = self._call(opener, "GET", props["endpoint"].rstrip("/") + "/api/v1/nodes?"
                             + urllib.parse.urlencode(query), token) or {}
            for node in page.get("items") or []:
                metadata = node.get("metadata") or {}
                labels = metadata.get("labels") or {}
                if self._selected(labels, selector) and \
                        labels.get("eks.amazonaws.com/compute-type") == "hybrid":
                    names.append(metadata["name"])
            cont = (page.get("metadata") or {}).get("continue") or ""
            if not cont:
                return names

    def _selected(self, labels: dict[str, str], selector: str) -> bool:
        # Re-checks the equality terms on our side, so a server or proxy that ignored the
        # selector cannot make us delete other stacks' nodes. Set-based terms are left to the
        # server.
        for term in selector.split(","):
            term = term.strip()
            if "!=" in term:
                key, value = (part.strip() for part in term.split("!=", 1))
                if labels.get(key) == value:
                    return False
            elif "=" in term and " in " not in term and " notin " not in term:
                key, value = (part.strip() for part in term.replace("==", "=").split("=", 1))
                if labels.get(key) != value:
                    return False
        return True

    def _delete_node(self, opener: Any, props: dict[str, str], token: str, name: str) -> None:
        import urllib.parse

        # 404: already gone (deleted by someone else between list and delete), which is the goal.
        self._call(opener, "DELETE", props["endpoint"].rstrip("/") + "/api/v1/nodes/"
                  + urllib.parse.quote(name, safe=""), token, allow_404=True)


class NodeObjectCleanup(pulumi.dynamic.Resource, module="cleanup", name="HybridNodeObjects"):
    """Removes this stack's hybrid ``Node`` objects from the cluster when it is deleted.

    Make the hybrid hosts depend on it, and it on the cluster and its access entries.
    """

    # Dynamic resources publish each output under its property name, as an attribute.
    clusterName: pulumi.Output[str]
    region: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    certificateAuthority: pulumi.Output[str]
    labelSelector: pulumi.Output[str]

    def __init__(self, name: str, cluster_name: pulumi.Input[str], region: pulumi.Input[str],
                 endpoint: pulumi.Input[str], certificate_authority: pulumi.Input[str],
                 label_selector: pulumi.Input[str],
                 opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(NodeObjectCleanupProvider(), name, {
            "clusterName": cluster_name,
            "region": region,
            "endpoint": endpoint,
            # The cluster CA is public; unsecret it in case it arrives inside a secret
            # (e.g. cut out of a kubeconfig), so the state and diffs stay readable.
            "certificateAuthority": pulumi.Output.unsecret(
                pulumi.Output.from_input(certificate_authority)),
            "labelSelector": label_selector,
        }, opts)
