"""The nodeadm release the hybrid hosts install, pinned, and what its pin implies.

A host downloads nodeadm when it first boots. ``releases/latest`` would make what joins depend
on the day of the deploy (a release the day before a talk changes it); a pinned release does
not. The facts below, with their sources, are in docs/hybrid-nodes.md#nodeadm.
"""

from __future__ import annotations

import datetime
import re

#: The release every host installs: the newest aws/eks-hybrid release (tag) carrying the SSM
#: installer's current signing key. Raising it: add the new release's row to SSM_KEY_EXPIRES.
NODEADM_VERSION = "v1.0.20"

#: Where a release's files are (aws/eks-hybrid hack/release-nodeadm.sh: releases/<version>/).
RELEASES_URL = "https://hybrid-assets.eks.amazonaws.com/releases"

_UTC = datetime.timezone.utc
#: When the SSM installer's signing key a release carries expires. `nodeadm install
#: --credential-provider ssm` (and `nodeadm upgrade`) verifies ssm-setup-cli's signature with
#: that key, and fails once it has expired: a host can then no longer join. The time is the
#: key's own (its self-signature's expiry); the source's comment gives the day.
SSM_KEY_EXPIRES = {
    # The key that expired on 2026-07-15 (aws/eks-hybrid #864, #865): these cannot join.
    "v1.0.18": datetime.datetime(2026, 7, 15, 18, 19, 26, tzinfo=_UTC),
    # v1.0.19 carries the new key (aws/eks-hybrid #863); v1.0.20 the same.
    "v1.0.19": datetime.datetime(2027, 11, 25, 13, 58, 7, tzinfo=_UTC),
    "v1.0.20": datetime.datetime(2027, 11, 25, 13, 58, 7, tzinfo=_UTC),
}

#: Preflight warns this many days before the pinned release's key expires: a host may be
#: replaced, and install nodeadm again, for as long as the stack lives (the SSM activation lasts
#: at most 30 days), plus 30 days to find and try a release with the next key (the last one came
#: six days after the old key had expired): docs/hybrid-nodes.md#when-the-key-nears-its-expiry.
SSM_KEY_WARN_DAYS = 60

#: Where the pin is, for a message that tells someone to raise it.
PIN_SOURCE = "NODEADM_VERSION in components/nodeadm.py"

_VERSION = re.compile(r"v\d+\.\d+\.\d+")


def nodeadm_url(version: str, arch: str) -> str:
    """The release's nodeadm for ``arch`` (amd64 or arm64); its SHA-256 is at this URL plus
    ``.sha256`` (aws/eks-hybrid hack/build-nodeadm.sh)."""
    if not _VERSION.fullmatch(version):
        raise ValueError(f"nodeadm version {version!r} is not a release tag (vX.Y.Z)")
    return f"{RELEASES_URL}/{version}/bin/linux/{arch}/nodeadm"


def ssm_key_expires(version: str = NODEADM_VERSION) -> datetime.datetime:
    """When ``version``'s SSM signing key expires; KeyError for a release not in the table."""
    return SSM_KEY_EXPIRES[version]
