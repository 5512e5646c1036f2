"""User data that joins a simulated on-prem host to EKS as a hybrid node.

The script lives in ``templates/hybrid-host.sh`` (so it can be read, and checked with
``bash -n``, as the shell script it is); this module fills it in. The NodeConfig is built as a
dict and dumped as YAML, so values are quoted correctly whatever they hold.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

import yaml

from components.eks_cluster import CREATE_TIMEOUT_MINUTES
from components.nodeadm import NODEADM_VERSION, nodeadm_url

TEMPLATES = Path(__file__).resolve().parent / "templates"
_PLACEHOLDER = re.compile(r"{{ (\w+) }}")
# Values written into single-quoted shell strings: nothing that could end the quote.
_SHELL_SAFE = re.compile(r"[A-Za-z0-9_.:/-]+")
_IMAGE_SAFE = re.compile(r"[a-z0-9][A-Za-z0-9_.:/@-]*")

NODEADM_ARCH = {"x86_64": "amd64", "arm64": "arm64"}
#: How long a host keeps trying to join, from the start of its script. Pulumi does not make a
#: host wait for the cluster: it boots while EKS creates the control plane, and nodeadm init
#: fails until the cluster is ACTIVE (aws/eks-hybrid internal/node/hybrid/configenricher.go,
#: ensureClusterDetails: "eks cluster is not active") and this node's access entry exists. The
#: control plane's worst case — `pulumi up`'s create timeout for it, beyond which the `up` has
#: failed anyway — plus 10 minutes for what follows it (the access entry and the role's cluster
#: policy, IAM honouring them, the script's next try) bounds the wait; offline/timing.py checks
#: that it covers the cluster's timeout and what follows it (tests/test_awaits.py).
JOIN_DEADLINE_SECONDS = (CREATE_TIMEOUT_MINUTES + 10) * 60
#: Pause between two tries of nodeadm init while the cluster is not ready.
JOIN_RETRY_SECONDS = 20
#: The image prefetch's wait ends this long before the join deadline, and stops the pulls still
#: running: what JOIN_DEADLINE_SECONDS allows after the control plane's create timeout (the
#: access entry, IAM, nodeadm init's tries) is left to the join, so a pull that hangs cannot hold
#: the join past its deadline, and one that ends within the control plane's worst case is waited
#: for.
PREFETCH_RESERVE_SECONDS = JOIN_DEADLINE_SECONDS - CREATE_TIMEOUT_MINUTES * 60
#: Hex digits of a boot generation (48 bits: a collision between two generations of one host
#: is not a practical concern, and the value fits a label next to others).
GENERATION_DIGITS = 12
#: Where the NodeConfig holds the instance id until the script knows it (it is not in the user
#: data: the instance does not exist when the user data is rendered).
INSTANCE_ID_MARK = "@INSTANCE_ID@"


@dataclass(frozen=True)
class HostBootstrap:
    cluster_name: str
    region: str
    kubernetes_version: str
    activation_id: str
    activation_code: str
    #: x86_64 or arm64 (components.instance_types.architecture).
    architecture: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    #: kubelet taints, ``key=value:Effect``.
    node_taints: Sequence[str] = ()
    #: Install the NVIDIA driver and container toolkit before the node joins, and configure the
    #: NVIDIA container runtime after.
    gpu: bool = False
    #: Images pulled into containerd while the host installs, before nodeadm init (the exact
    #: references its pods use; rendered normalized): the pods start without pulling.
    prefetch_images: Sequence[str] = ()
    #: A node label the host sets to its own EC2 instance id (read at boot from cloud-init's
    #: instance data): its Node cleanup selects it, so that a host created again with the same
    #: user data (same token) keeps its Node when the old host's cleanup goes.
    instance_label: str = ""


def normalized_image(reference: str) -> str:
    """``reference`` as the CRI resolves a pod's image (docker/distribution reference,
    ParseNormalizedNamed then TagNameOnly): Docker Hub's domain when the first component is
    not a host name (no "." or ":", not "localhost"), ``library/`` for its one-component names,
    ``:latest`` when neither tag nor digest is given. ctr takes references as they are."""
    name, at, digest = reference.partition("@")
    first, slash, rest = name.partition("/")
    if not slash or ("." not in first and ":" not in first and first != "localhost"):
        domain, path = "docker.io", name
    else:
        domain, path = first, rest
    if domain == "index.docker.io":
        domain = "docker.io"
    if domain == "docker.io" and "/" not in path:
        path = "library/" + path
    if not at and ":" not in path.rsplit("/", 1)[-1]:
        path += ":latest"
    return f"{domain}/{path}{at}{digest}"


@dataclass(frozen=True)
class JoinTiming:
    """How long the join script tries, in seconds from its start (None: the module's values,
    read when rendering). Tests render with short ones; a host boots with the defaults."""
    deadline_seconds: Optional[int] = None
    retry_seconds: Optional[int] = None
    prefetch_reserve_seconds: Optional[int] = None

    def resolved(self) -> tuple[int, int, int]:
        deadline = JOIN_DEADLINE_SECONDS if self.deadline_seconds is None else self.deadline_seconds
        retry = JOIN_RETRY_SECONDS if self.retry_seconds is None else self.retry_seconds
        reserve = (PREFETCH_RESERVE_SECONDS if self.prefetch_reserve_seconds is None
                   else self.prefetch_reserve_seconds)
        for name, value in (("join deadline", deadline), ("join retry pause", retry),
                            ("prefetch reserve", reserve)):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} {value!r} s: must be a whole number of seconds, at least 1")
        if reserve >= deadline:
            raise ValueError(f"prefetch reserve {reserve} s: must be shorter than the join "
                             f"deadline ({deadline} s), or no pull is waited for")
        return deadline, retry, reserve


def node_config(host: HostBootstrap) -> dict:
    """The nodeadm NodeConfig (node.eks.aws/v1alpha1) for SSM hybrid credentials."""
    flags = []
    labels = dict(host.node_labels)
    if host.instance_label:
        labels[host.instance_label] = INSTANCE_ID_MARK
    if labels:
        flags.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in labels.items()))
    if host.node_taints:
        flags.append("--register-with-taints=" + ",".join(host.node_taints))
    spec: dict = {
        "cluster": {"name": host.cluster_name, "region": host.region},
        "hybrid": {"ssm": {"activationCode": host.activation_code,
                           "activationId": host.activation_id}},
    }
    if flags:
        spec["kubelet"] = {"flags": flags}
    return {"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig", "spec": spec}


def _fill(template: str, values: Mapping[str, str]) -> str:
    wanted = set(_PLACEHOLDER.findall(template))
    missing, extra = wanted - set(values), set(values) - wanted
    if missing or extra:
        raise ValueError(f"template placeholders missing {sorted(missing)}, unused {sorted(extra)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def render_user_data(host: HostBootstrap, timing: JoinTiming = JoinTiming()) -> str:
    deadline, retry, reserve = timing.resolved()
    for name in ("cluster_name", "kubernetes_version"):
        if not _SHELL_SAFE.fullmatch(getattr(host, name)):
            raise ValueError(f"{name} {getattr(host, name)!r} is not safe to put in a shell script")
    if host.architecture not in NODEADM_ARCH:
        raise ValueError(f"no nodeadm build for architecture {host.architecture!r}")
    images = [normalized_image(image) for image in host.prefetch_images]
    for image in images:
        if not _IMAGE_SAFE.fullmatch(image):
            raise ValueError(f"image {image!r} is not safe to put in a shell script")
    prefetch_start, prefetch_wait = (
        ((TEMPLATES / "hybrid-host-prefetch.sh").read_text().rstrip().replace(
            "{{ prefetch_images }}", " ".join(f"'{image}'" for image in images)),
         (TEMPLATES / "hybrid-host-prefetch-wait.sh").read_text().rstrip().replace(
             "{{ prefetch_reserve_seconds }}", str(reserve))) if images
        else ("# No image to pull ahead.", "# No image pull to wait for."))
    # The GPU host installs its driver and toolkit before the join and configures the runtime
    # after it (templates/hybrid-host-gpu-install.sh, hybrid-host-gpu.sh).
    gpu_install, gpu_setup = (
        ((TEMPLATES / "hybrid-host-gpu-install.sh").read_text().rstrip(),
         (TEMPLATES / "hybrid-host-gpu.sh").read_text().rstrip()) if host.gpu
        else ("# No GPU on this host.", "# No GPU runtime to configure."))
    return _fill((TEMPLATES / "hybrid-host.sh").read_text(), {
        "cluster_name": host.cluster_name,
        "kubernetes_version": host.kubernetes_version,
        "nodeadm_url": nodeadm_url(NODEADM_VERSION, NODEADM_ARCH[host.architecture]),
        "join_deadline_seconds": str(deadline),
        "join_retry_seconds": str(retry),
        # For the script's output filter only (templates/hybrid-host.sh, redact_output); quoted
        # for the shell whatever they hold.
        "activation_code": shlex.quote(host.activation_code),
        "activation_id": shlex.quote(host.activation_id),
        "node_config": yaml.safe_dump(node_config(host), sort_keys=False).rstrip(),
        "gpu_install": gpu_install,
        "gpu_setup": gpu_setup,
        "prefetch_start": prefetch_start,
        "prefetch_wait": prefetch_wait,
    })


def boot_generation(host: HostBootstrap, **placement: str) -> str:
    """A short hash of what ``host`` boots with: its user data as rendered — the templates'
    bytes, cluster, region, Kubernetes version, architecture, labels, taints, GPU setup, the
    images it pulls ahead and the activation id — with the activation code left out (it is
    secret, and it changes only with the activation id), plus ``placement`` (other inputs that
    replace the instance, such as its subnet).

    Whatever changes the user data replaces the instance (``user_data_replace_on_change``), so
    a new hash means a new host, which registers a new Node; the hash goes into the Node's
    labels, so each generation's Node can be told from the next one's. ``host.node_labels`` must
    not hold the hash itself (it would depend on itself).
    """
    digest = hashlib.sha256(render_user_data(dataclasses.replace(host, activation_code="")).encode())
    for key, value in sorted(placement.items()):
        digest.update(f"\0{key}={value}".encode())
    return digest.hexdigest()[:GENERATION_DIGITS]
