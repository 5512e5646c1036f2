"""What the EKS authenticator checks of a bearer token, for the fake API servers.

An EKS token is ``k8s-aws-v1.`` + the unpadded URL-safe base64 of a presigned STS
``GetCallerIdentity`` URL whose signature covers an ``x-k8s-aws-id`` header naming the cluster.
The authenticator (kubernetes-sigs/aws-iam-authenticator, ``pkg/token/token.go``,
``tokenVerifier.Verify``) refuses a token whose URL is not STS's, whose action is not
GetCallerIdentity, that does not sign ``x-k8s-aws-id``, whose ``X-Amz-Expires`` is outside
0-60, or whose ``X-Amz-Date`` is more than 15 minutes old; then it sends the URL to STS with
``x-k8s-aws-id`` set to *its own* cluster's name, and STS refuses a signature that does not
cover that value. So a token minted for another cluster, or by other keys, is refused too.

Where the tests point boto3 at a moto server (``AWS_ENDPOINT_URL``), a token is presigned for
that server's URL instead of STS's, and the authenticator standing in for EKS's trusts that one
endpoint as STS (``sts_endpoint``): every other rule is unchanged.

The fakes know the test keys, so they check the signature the way STS does: botocore's SigV4
query signing (the algorithm STS verifies) recomputed for the cluster's name at the token's
own X-Amz-Date, compared with the token's ``X-Amz-Signature``.
"""

from __future__ import annotations

import base64
import datetime
import urllib.parse
from typing import Optional

from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

PREFIX = "k8s-aws-v1."
#: aws-iam-authenticator's presignedURLExpiration.
LIFETIME = datetime.timedelta(minutes=15)


def _url(token: str) -> Optional[str]:
    encoded = token[len(PREFIX):]
    try:
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def problem(token: str, *, cluster: str, access_key: str, secret_key: str, region: str,
            now: datetime.datetime, sts_endpoint: Optional[str] = None) -> Optional[str]:
    """Why the authenticator of ``cluster`` would refuse ``token`` (None: it accepts it).
    ``sts_endpoint``: the one URL (scheme://host:port) trusted as STS instead of AWS's."""
    if not token.startswith(PREFIX):
        return f"not an EKS bearer token: {token[:40]!r}"
    if "=" in token:
        return "token padding not stripped"
    url = _url(token)
    if url is None:
        return "token is not base64 of a URL"
    parts = urllib.parse.urlsplit(url)
    pairs = urllib.parse.parse_qsl(parts.query)
    query = dict(pairs)
    host = parts.hostname or ""
    if sts_endpoint is not None:
        trusted = urllib.parse.urlsplit(sts_endpoint)
        if (parts.scheme, parts.netloc) != (trusted.scheme, trusted.netloc):
            return f"not the STS endpoint {sts_endpoint}: {url}"
    elif parts.scheme != "https" or not host.startswith("sts.") or not host.endswith(".amazonaws.com"):
        return f"not an STS URL: {url}"
    if query.get("Action") != "GetCallerIdentity" or query.get("Version") != "2011-06-15":
        return f"not GetCallerIdentity: {query}"
    if query.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" or not query.get("X-Amz-Signature"):
        return "not presigned with SigV4"
    if "x-k8s-aws-id" not in query.get("X-Amz-SignedHeaders", "").split(";"):
        return "x-k8s-aws-id is not signed"
    try:
        expires = int(query.get("X-Amz-Expires", ""))
    except ValueError:
        expires = -1
    if not 0 <= expires <= 60:
        return f"invalid X-Amz-Expires {query.get('X-Amz-Expires')!r}"
    try:
        signed = datetime.datetime.strptime(query.get("X-Amz-Date", ""), "%Y%m%dT%H%M%SZ") \
            .replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return "no X-Amz-Date"
    if now > signed + LIFETIME:
        return f"token expired {(now - signed - LIFETIME).total_seconds():.0f} s ago"
    scope = query.get("X-Amz-Credential", "").split("/")
    if len(scope) != 5 or scope[0] != access_key or scope[2:] != [region, "sts", "aws4_request"]:
        return f"wrong credential scope {scope}"
    # What STS does with the URL the authenticator sends it, x-k8s-aws-id set to the cluster's
    # own name: the signature must be the one these keys make for that request.
    unsigned = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(
        [(k, v) for k, v in pairs if k != "X-Amz-Signature"])))
    request = AWSRequest(method="GET", url=unsigned, headers={"x-k8s-aws-id": cluster})
    request.context["timestamp"] = query["X-Amz-Date"]
    auth = SigV4QueryAuth(Credentials(access_key, secret_key), "sts", region, expires=expires)
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    if expected != query["X-Amz-Signature"]:
        return f"signature does not match (not signed for cluster {cluster!r} with these keys)"
    return None
