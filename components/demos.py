"""The demo workloads as Kubernetes objects (plain dicts), hardened as docs/demo-guide.md
(#the-style-the-demo-workloads-follow) sets out: Pod Security "restricted" (non-root, RuntimeDefault seccomp, no privilege escalation, every
capability dropped), read-only root filesystems, requests and limits, probes, pinned images."""

from __future__ import annotations

from typing import Any, Optional, Sequence

#: Images pinned by digest (docs/demo-guide.md#the-style-the-demo-workloads-follow).
NGINX = ("nginxinc/nginx-unprivileged:1.30.4@sha256:"
         "cb92301e719d6639028de775fe8b28e15f58343aca5e5372001311958aafb300")
BUSYBOX = ("busybox:1.37.0@sha256:"
           "9db7b59979c38555a39def84a31fb98b5296952f9e3afd4f6f11f05b07adfab0")
#: The OpenAI-compatible vLLM server; about 10 GB, so it is pulled ahead of the talk.
VLLM = "vllm/vllm-openai:v0.11.0"
#: The user name the vLLM process goes by (its UID has none in the image).
VLLM_USER = "vllm"

HYBRID_TAINT_TOLERATION = {"key": "eks.amazonaws.com/compute-type", "operator": "Equal",
                           "value": "hybrid", "effect": "NoSchedule"}
GPU_TAINT_TOLERATION = {"key": "gpu", "operator": "Equal", "value": "true",
                        "effect": "NoSchedule"}
ON_HYBRID = {"key": "eks.amazonaws.com/compute-type", "operator": "In", "values": ["hybrid"]}
# Cloud nodes carry no compute-type label; NotIn also matches a missing label.
OFF_HYBRID = {"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["hybrid"]}
#: The label Karpenter puts on every node it launches: the name of the NodePool it came from.
NODEPOOL_LABEL = "karpenter.sh/nodepool"
#: The burst NodePool's name when the caller gives none (stacks/layers/karpenter.py
#: ``NODE_POOL``; tests/test_demo.py holds the two equal).
BURST_POOL = "cloud-burst"


def restricted_namespace(name: str) -> dict:
    """A namespace whose pods must meet Pod Security "restricted"."""
    return {"name": name, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/audit": "restricted",
    }}


def container_security() -> dict:
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}


def pod_security(uid: int) -> dict:
    return {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"}}


def required_affinity(*expressions: dict) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}}}


def deployment(name: str, *, replicas: int, containers: Sequence[dict], uid: int,
               affinity: Optional[dict] = None, tolerations: Sequence[dict] = (),
               volumes: Sequence[dict] = (), strategy: Optional[dict] = None,
               annotations: Optional[dict] = None, grace_seconds: int = 30) -> dict:
    """A Deployment spec (apps/v1) whose pod is restricted-compliant."""
    labels = {"app": name}
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "securityContext": pod_security(uid),
        "terminationGracePeriodSeconds": grace_seconds,
        "containers": list(containers),
    }
    if affinity:
        pod["affinity"] = affinity
    if tolerations:
        pod["tolerations"] = list(tolerations)
    if volumes:
        pod["volumes"] = list(volumes)
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels, **({"annotations": annotations} if annotations else {})},
                     "spec": pod},
    }
    if strategy:
        spec["strategy"] = strategy
    return spec


def _http_probes(path: str, port: int, *, startup_failures: int = 30,
                 startup_period: int = 2) -> dict:
    get = {"httpGet": {"path": path, "port": port}}
    return {
        "startupProbe": {**get, "periodSeconds": startup_period, "failureThreshold": startup_failures},
        "readinessProbe": {**get, "periodSeconds": 5},
        "livenessProbe": {**get, "periodSeconds": 20, "failureThreshold": 3},
    }


def nginx_container(name: str, cpu_request: str, cpu_limit: str) -> dict:
    """nginx-unprivileged serving / on 8080 as UID 101; /tmp is its only write."""
    return {
        "name": name,
        "image": NGINX,
        "ports": [{"name": "http", "containerPort": 8080}],
        "resources": {"requests": {"cpu": cpu_request, "memory": "64Mi"},
                      "limits": {"cpu": cpu_limit, "memory": "128Mi"}},
        "securityContext": container_security(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        **_http_probes("/", 8080),
    }


TMP_VOLUME = {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}


def echo_server(name: str, *, on_hybrid: bool) -> dict:
    """Demo 1: a web server on cloud or on hybrid nodes, to reach through the gateway."""
    return deployment(
        name, replicas=2, uid=101,
        containers=[nginx_container("echo", "50m", "200m")],
        affinity=required_affinity(ON_HYBRID if on_hybrid else OFF_HYBRID),
        tolerations=[HYBRID_TAINT_TOLERATION] if on_hybrid else (),
        volumes=[TMP_VOLUME],
    )


#: Seconds one probe may take in all, name lookup included: short, so a failover's gap is
#: measured to about a second.
PROBE_TIMEOUT_SECONDS = 1


def loop_script(body: str, period_seconds: int) -> str:
    """A shell loop that runs ``body`` every ``period_seconds`` and touches /tmp/alive on every
    turn. /tmp/alive is touched once before the first turn too, so the startup probe does not
    depend on how long the first request takes."""
    return (f"touch /tmp/alive; while true; do {body}; touch /tmp/alive; "
            f"sleep {period_seconds}; done")


def _loop_container(name: str, body: str, *, period_seconds: int, stale_minutes: int,
                    startup_period: int, startup_failures: int, readiness_period: int) -> dict:
    """A busybox shell loop (``loop_script``); its probes check that it still turns (a loop
    stuck for ``stale_minutes`` is restarted)."""
    alive = ["test", "-e", "/tmp/alive"]
    # find prints nothing (and still exits 0) when the file is stale: test its output.
    fresh = ["/bin/sh", "-c", f'test -n "$(find /tmp/alive -mmin -{stale_minutes})"']
    return {
        "name": name,
        "image": BUSYBOX,
        "command": ["/bin/sh", "-c", loop_script(body, period_seconds)],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                      "limits": {"cpu": "100m", "memory": "32Mi"}},
        "securityContext": container_security(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        "startupProbe": {"exec": {"command": alive}, "periodSeconds": startup_period,
                         "failureThreshold": startup_failures},
        "livenessProbe": {"exec": {"command": fresh}, "periodSeconds": 30},
        "readinessProbe": {"exec": {"command": alive}, "periodSeconds": readiness_period},
    }


def prober(name: str, service_url: str, pod_url: str, *, on_hybrid: bool,
           probe_timeout_seconds: float = PROBE_TIMEOUT_SECONDS) -> dict:
    """Demo 1: every second, requests the echo servers on the other side twice — through their
    ClusterIP Service (``service_url``) and straight at a pod (``pod_url``, a headless Service's
    name, which resolves to the pods' own addresses) — and logs one line for each:
    ``HH:MM:SS svc ok``, ``HH:MM:SS pod FAIL``. The kubelet's timestamps on those lines are what
    the failover is measured with (``python -m rehearse failover``). ``probe_timeout_seconds``
    is there for a test that times the bound without waiting a whole second per request."""
    # `timeout` bounds each request whole: wget's -T covers the connection, not the name
    # lookup, and a DNS query to an unreachable server waits far longer than a second.
    probes = "; ".join(
        f"if timeout {probe_timeout_seconds} wget -q -T 1 -O /dev/null {url}; then r=ok; "
        f'else r=FAIL; fi; echo "$(date +%T) {path} $r"'
        for path, url in (("svc", service_url), ("pod", pod_url)))
    container = _loop_container("prober", probes, period_seconds=1, stale_minutes=1,
                                startup_period=2, startup_failures=15, readiness_period=10)
    return deployment(
        name, replicas=1, uid=1000, containers=[container],
        affinity=required_affinity(ON_HYBRID if on_hybrid else OFF_HYBRID),
        tolerations=[HYBRID_TAINT_TOLERATION] if on_hybrid else (),
        volumes=[TMP_VOLUME])


def burst_affinity(burst_pool: str) -> dict:
    """Where burst pods may run, and where first: REQUIRED on a hybrid node or a node of the
    ``burst_pool`` NodePool (the terms are ORed) — never on the system or gateway node groups,
    whatever room they have — and PREFERRED (weight 100) on hybrid, so hybrid fills first.

    The order of the terms matters to Karpenter, which reads them one at a time: it asks for
    the first term with the hybrid preference, and when that fits nowhere it drops the FIRST
    TERM (a required term goes before any preference), then the preference
    (offline/karpenter_affinity.py cites its source). Hybrid's term first: hybrid, then the pool
    with the preference (no node is both), then the pool alone, and Karpenter launches a pool
    node. The pool's term first would be dropped on the first try, and Karpenter would never
    launch one (tests/test_scheduling.py plants it)."""
    on_pool = {"key": NODEPOOL_LABEL, "operator": "In", "values": [burst_pool]}
    return {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [ON_HYBRID]}, {"matchExpressions": [on_pool]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [ON_HYBRID]}}]}}


def burst(name: str, replicas: int, cpu_request_m: int,
          extra_tolerations: Sequence[dict] = (), burst_pool: str = BURST_POOL) -> dict:
    """Demo 2: runs only on hybrid nodes or the ``burst_pool`` NodePool's nodes, hybrid
    preferred (``burst_affinity``), and tolerates the hybrid taint, so hybrid fills first and
    the overflow goes to the cloud-burst NodePool (whose taint ``extra_tolerations`` lets it
    onto, and nothing else). ``cpu_request_m`` is sized so exactly four pods fit on a default
    hybrid node (``components.capacity.burst_cpu_request_m``)."""
    return deployment(
        name, replicas=replicas, uid=101,
        containers=[nginx_container("web", f"{cpu_request_m}m", "1")],
        affinity=burst_affinity(burst_pool),
        tolerations=[HYBRID_TAINT_TOLERATION, *extra_tolerations],
        volumes=[TMP_VOLUME],
        grace_seconds=10,
    )


def cpu_requested_m(spec: dict) -> int:
    """The CPU a Deployment spec asks for in all (replicas x the pod's containers), in
    millicores: what it takes from the nodes it lands on."""
    def millis(quantity: str) -> int:
        return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)

    pod = spec["template"]["spec"]
    per_pod = sum(millis(c["resources"]["requests"]["cpu"]) for c in pod["containers"])
    return spec["replicas"] * per_pod


def vllm_server(name: str, model: str) -> dict:
    """Demo 3: vLLM's OpenAI-compatible server on the hybrid GPU host, one GPU."""
    cache = "/cache"
    container = {
        "name": "vllm",
        "image": VLLM,
        "args": ["--model", model, "--port", "8000", "--max-model-len", "4096",
                 "--gpu-memory-utilization", "0.85"],
        "ports": [{"name": "http", "containerPort": 8000}],
        # The root filesystem is read-only: every cache vLLM, Hugging Face, Triton and torch
        # write goes to the cache volume.
        "env": [{"name": k, "value": v} for k, v in {
            "HOME": cache, "HF_HOME": f"{cache}/huggingface", "XDG_CACHE_HOME": cache,
            "VLLM_CACHE_ROOT": f"{cache}/vllm", "TRITON_CACHE_DIR": f"{cache}/triton",
            "TORCHINDUCTOR_CACHE_DIR": f"{cache}/torchinductor",
            # UID 1000 has no passwd entry in the image, and the torch it ships asks
            # getpass.getuser() for a user name when its compile cache loads (whatever
            # TORCHINDUCTOR_CACHE_DIR says): without USER/LOGNAME that raises KeyError.
            "USER": VLLM_USER, "LOGNAME": VLLM_USER,
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}.items()],
        "resources": {"requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"},
                      "limits": {"cpu": "3", "memory": "12Gi", "nvidia.com/gpu": "1"}},
        "securityContext": container_security(),
        "volumeMounts": [{"name": "cache", "mountPath": cache},
                         {"name": "shm", "mountPath": "/dev/shm"},
                         {"name": "tmp", "mountPath": "/tmp"}],
        # Patient: the first start downloads the model and compiles kernels (the image pull
        # itself, 4 min 28 s in docs/demo-guide.md#demo-3-gpu-inference-on-a-hybrid-node, happens
        # before probes start).
        **_http_probes("/health", 8000, startup_failures=90, startup_period=10),
    }
    return deployment(
        name, replicas=1, uid=1000, containers=[container],
        affinity=required_affinity(ON_HYBRID, {"key": "nvidia.com/gpu.present",
                                               "operator": "In", "values": ["true"]}),
        tolerations=[HYBRID_TAINT_TOLERATION, GPU_TAINT_TOLERATION],
        volumes=[{"name": "cache", "emptyDir": {"sizeLimit": "30Gi"}},
                 {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
                 {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
        # One GPU: the old pod must release it before the new one can start.
        strategy={"type": "Recreate"},
        annotations={"sidecar.istio.io/inject": "false"},
        grace_seconds=60,
    )


def vllm_client(name: str, url: str, model: str) -> dict:
    """Demo 3: a cloud pod that asks the model for a completion every 30 s and logs how long it
    took, to the hundredth of a second (a small model answers in well under one)."""
    body = ('{"model": "%s", "prompt": "EKS Hybrid Nodes are", "max_tokens": 16}' % model)
    # /proc/uptime counts hundredths of a second; busybox `date` has no sub-second format.
    now = "cut -d' ' -f1 /proc/uptime"
    request = (
        f"start=$({now}); "
        f"if wget -q -T 60 -O - --header 'Content-Type: application/json' --post-data '{body}' "
        f"{url}/v1/completions; then r=ok; else r=FAIL; fi; end=$({now}); "
        'echo; echo "$(date +%T) $r in $(awk -v a="$start" -v b="$end" '
        "'BEGIN { printf \"%.2f\", b - a }')s\""
    )
    container = _loop_container("client", request, period_seconds=30, stale_minutes=5,
                                startup_period=10, startup_failures=90, readiness_period=30)
    return deployment(name, replicas=1, uid=1000, containers=[container],
                      affinity=required_affinity(OFF_HYBRID), volumes=[TMP_VOLUME])


def cluster_ip_service(name: str, port: int, target_port: int) -> dict:
    return {"type": "ClusterIP", "selector": {"app": name},
            "ports": [{"name": "http", "port": port, "targetPort": target_port}]}


def headless_service(name: str, port: int) -> dict:
    """A Service without a cluster IP: its DNS name resolves to the pods' own addresses, so a
    request to it goes pod to pod, with no service NAT on the way."""
    return {"clusterIP": "None", "selector": {"app": name},
            "ports": [{"name": "http", "port": port, "targetPort": port}]}


def hybrid_co_tenant_cpu_m() -> int:
    """CPU demo 1's hybrid-side pods ask for in all: what shares the hybrid nodes with burst."""
    return (cpu_requested_m(echo_server("echo-hybrid", on_hybrid=True))
            + cpu_requested_m(prober("prober-hybrid", "http://echo-cloud", "http://echo-cloud-pods",
                                     on_hybrid=True)))
