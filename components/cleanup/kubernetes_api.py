"""Talking to an EKS cluster's Kubernetes API from a dynamic provider, with nothing but boto3 and
the standard library.

Destroy-time cleanups that remove Kubernetes objects inherit from :class:`KubernetesApi`. It is
``@self_contained`` like the providers themselves: dill pickles it by value as a base class of
the provider, so the provider process at destroy time does not need this project importable.
Every helper is a method and every import happens inside a method (see ``self_contained``).
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi

from components.cleanup.aws_session import AwsSession
from components.cleanup.self_contained import self_contained


def public_certificate_authority(certificate_authority: pulumi.Input[str]) -> pulumi.Output[str]:
    """The cluster CA for a cleanup's inputs. It is public: unsecret it in case it arrives
    inside a secret (cut out of a kubeconfig, say), so the state and diffs stay readable.
    (Called when a resource is declared, never from a provider method: it is not pickled.)"""
    return pulumi.Output.unsecret(pulumi.Output.from_input(certificate_authority))


@self_contained
class KubernetesApi(AwsSession):
    """Mixin for dynamic providers: an EKS bearer token, a CA-pinned opener, retried calls.
    The token is signed with the stack's credentials (``AwsSession``), as the kubeconfig's
    ``aws eks get-token`` signs it."""

    #: First backoff between attempts of one request (doubles each time).
    retry_base_seconds: float = 1.0
    #: Attempts per request for connection errors, throttling, 401/403 and 5xx.
    attempts: int = 5
    #: Socket timeout of one request.
    request_timeout_seconds: float = 15.0

    def _bearer_token(self, cluster_name: str, region: str, account: Any) -> str:
        """The same token `aws eks get-token` prints, signed with ``account``'s credentials
        (``AwsSession._account``): a presigned STS GetCallerIdentity URL that names the
        cluster in a signed header. Presigning is local; the API server's authenticator is
        what calls STS with it."""
        import base64

        import boto3

        # Without account settings, a session of its own, as before they existed.
        sts = (self._aws_session(region, account) if self._has_account(account)
               else boto3.session.Session()).client("sts", region_name=region)

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
             allow_404: bool = False, body: Optional[dict] = None,
             content_type: str = "application/json") -> Optional[dict]:
        """The decoded JSON answer of ``method url`` (``{}`` for an empty body); ``None`` for a
        404 when ``allow_404``. ``body`` is sent as JSON of ``content_type``. Raises
        RuntimeError once it gives up."""
        import json
        import ssl
        import time
        import urllib.error
        import urllib.request

        last = ""
        for attempt in range(self.attempts):
            if attempt:
                time.sleep(self.retry_base_seconds * 2 ** (attempt - 1))
            headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = content_type
            request = urllib.request.Request(url, method=method, headers=headers, data=data)
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

    def _cluster_is_gone(self, cluster_name: str, region: str, account: Any) -> bool:
        """True only when EKS answers, to ``account``'s credentials, that the cluster does not
        exist (it was deleted outside Pulumi): then nothing of it is left to clean up. Any other
        answer or failure: False."""
        try:
            from botocore.config import Config

            # In the wrong account (aws:allowedAccountIds) the session refuses: not gone.
            eks = self._aws_client("eks", region, account=account, config=Config(
                retries={"max_attempts": 2}, connect_timeout=5, read_timeout=10))
            eks.describe_cluster(name=cluster_name)
        except Exception as error:  # noqa: BLE001 anything but NotFound means "maybe there"
            response = getattr(error, "response", None) or {}
            return response.get("Error", {}).get("Code") == "ResourceNotFoundException"
        return False
