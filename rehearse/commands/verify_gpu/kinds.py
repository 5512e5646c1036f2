"""The names `python -m rehearse verify gpu` records (events.jsonl's kinds) and reports (its
title, its checks and measurements, which the tests and report.json readers key on): replays of
recorded runs read them, so their values never change."""

TITLE = "check demo 3: vLLM on the hybrid GPU host, called from the cloud"

SETTINGS = "gpu.settings"
NODES = "gpu.nodes"
DEPLOYMENT = "gpu.deployment"
SERVER_PODS = "gpu.server_pods"
POD_EVENTS = "gpu.pod_events"
CLIENT_PODS = "gpu.client_pods"
CLIENT_LOG = "gpu.client_log"
COMPLETION = "gpu.completion"

CHECK_GPU = "nvidia.com/gpu allocatable on the hybrid GPU host"
CHECK_POD = "vLLM pod Ready on the GPU host"
CHECK_SIDECAR = "no istio-proxy container in the vLLM pod"
CHECK_HOST_NETWORK = "hostNetwork off on the vLLM pod"
CHECK_CLIENT = "the cloud client's calls succeed"
CHECK_COMPLETION = "one completion through the vLLM Service"

M_SUCCESS = "client success rate"
M_P50 = "client latency p50"
M_P95 = "client latency p95"
M_PULL = "vLLM image pull (kubelet)"
M_SCHEDULED_TO_STARTED = "vLLM pod scheduled → container started"
M_COMPLETION = "completion through the API server"
