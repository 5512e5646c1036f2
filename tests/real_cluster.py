"""The real-engine tier: a real Kubernetes control plane (engines/control_plane.py) for the tests
that ask what Kubernetes decides — admission, validation, placement.

- ``control_plane`` (session): etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
  kwok on free loopback ports in a temporary folder, started on first use by each test worker
  and stopped, by PID, when the session ends (also on Ctrl-C; and the engines die with a
  worker that is killed). Without the engines built, every test that asks for it is skipped,
  naming the command that builds them.
- ``namespace``: a namespace of the test's own, made with the labels it asks for.
- ``eks_control_plane`` (session): another control plane whose API server also takes EKS
  bearer tokens, as an EKS cluster named ``EKS_CLUSTER`` does (tests/eks_authenticator.py, a
  TokenReview webhook): a token the program mints with ``EKS_KEYS`` for that cluster is user
  ``eks-lab-admin`` in ``system:masters``. An :class:`EksControlPlane`.

Import the fixtures into a test module: ``from tests.real_cluster import control_plane,
namespace  # noqa: F401``.
"""

from __future__ import annotations

import base64
import itertools
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import pytest

from tests import eks_authenticator
from tests.conftest import PROJECT_DIR

sys.path.insert(0, str(PROJECT_DIR / "engines"))
from control_plane import ControlPlane, Response, engines_folder  # noqa: E402

_counter = itertools.count()


def _missing_tools() -> list[str]:
    return [tool for tool in ("go", "openssl") if shutil.which(tool) is None]


def started(tmp_path_factory, name: str = "control-plane", **options) -> Iterator[ControlPlane]:
    """A control plane for a fixture to yield, stopped when it ends; skips the fixture's tests,
    with the reason, where the engines or the tools they need are missing. ``options`` go to
    ``ControlPlane.start`` (``kwok=False``: no kwok)."""
    missing = _missing_tools()
    if missing:
        pytest.skip(f"the real-engine tier needs {' and '.join(missing)} on PATH")
    folder, why = engines_folder()
    if folder is None:
        # why names what is missing and the command that builds it (build.py --where).
        pytest.skip(f"the real-engine tier needs the engines: {why}")
    plane = ControlPlane.start(folder, tmp_path_factory.mktemp(name), **options)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory) -> Iterator[ControlPlane]:
    yield from started(tmp_path_factory)


#: The EKS cluster name the ``eks_control_plane``'s authenticator accepts tokens for.
EKS_CLUSTER = "lab"
EKS_REGION = "ap-northeast-2"
#: Access key -> secret key the authenticator knows (STS would): AWS's documentation example
#: keys, and the ``testing`` pair moto's docs and the real Pulumi engine's environment use.
EKS_KEYS = {"AKIAIOSFODNN7EXAMPLE": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "testing": "testing"}


@dataclass(frozen=True)
class EksControlPlane:
    plane: ControlPlane
    authenticator: eks_authenticator.Authenticator
    cluster: str = EKS_CLUSTER
    region: str = EKS_REGION

    @property
    def endpoint(self) -> str:
        return self.plane.url

    @property
    def certificate_authority(self) -> str:
        """The API server's CA, base64 (as EKS's ``certificateAuthority.data``)."""
        return base64.b64encode(self.plane.ca_file.read_bytes()).decode()


@pytest.fixture(scope="session")
def eks_control_plane(tmp_path_factory) -> Iterator[EksControlPlane]:
    with eks_authenticator.serving(tmp_path_factory.mktemp("eks-authenticator"),
                                   cluster=EKS_CLUSTER, keys=EKS_KEYS,
                                   region=EKS_REGION) as (config, server):
        for plane in started(tmp_path_factory, name="eks-control-plane", token_webhook=config):
            yield EksControlPlane(plane, server)


@pytest.fixture
def namespace(control_plane: ControlPlane, request) -> Callable[..., str]:
    """``namespace(labels=None)`` makes a namespace of this test's own and returns its name."""

    def make(labels: Optional[dict[str, str]] = None, prefix: str = "t") -> str:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
        name = f"{prefix}-{worker}-{next(_counter)}"[:63]
        answer = control_plane.apply({"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": name, "labels": labels or {}}})
        assert answer.status in (200, 201), answer.body
        return name

    return make


def refused(answer: Response) -> str:
    """The API server's own message for a refused request ('' when it was accepted)."""
    if answer.status < 400:
        return ""
    body = answer.body
    return body.get("message", str(body)) if isinstance(body, dict) else str(body)
