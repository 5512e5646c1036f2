"""What the lab deploys for demo 3 (components/demos.py, stacks/layers/demo.py) and what
`python -m rehearse verify gpu` asks by default: the collector and the analysis both read them."""

GPU_RESOURCE = "nvidia.com/gpu"
#: The GPU host labels itself with it when it joins (stacks/layers/hybrid.py).
GPU_LABEL = "nvidia.com/gpu.present"
HYBRID_LABEL, HYBRID_VALUE = "eks.amazonaws.com/compute-type", "hybrid"
SIDECAR = "istio-proxy"
#: components/nvidia_device_plugin.NAMESPACE (not imported: it would import Pulumi).
DEVICE_PLUGIN_NAMESPACE = "nvidia-device-plugin"
#: The names demo 3's objects have where the stack's ``demo3`` output leaves one out (it
#: names them; these keep a stack that exports fewer readable).
DEFAULT_NAMES = {"deployment": "vllm", "service": "vllm", "port": 8000,
                 "clientDeployment": "vllm-client"}
#: What the cloud client asks (components/demos.vllm_client), so the one completion here is
#: the same request.
PROMPT, MAX_TOKENS = "EKS Hybrid Nodes are", 16
#: The client calls every 30 s, each call bounded by wget -T 60.
CLIENT_PERIOD_SECONDS, CALL_TIMEOUT_SECONDS = 30, 60

#: The demo guide (docs/demo-guide.md#demo-3-gpu-inference-on-a-hybrid-node): the ~10 GB vLLM image took 4m28s to pull (g6.xlarge, 2026-10-15).
SEED_PULL = "4m28s (268 s) in the demo guide, ~10 GB"
GUIDE_PULL_SECONDS = 4 * 60 + 28

DEFAULT_WINDOW_MINUTES = 10.0
#: 95 %: ten minutes hold about 20 calls, and 19 of 20 passes. One failed call in ten minutes
#: (the call in flight while a pod was replaced, one slow first request) is tolerated; two is
#: a pattern. The latest call must succeed whatever the rate: that is the state on stage.
DEFAULT_MIN_SUCCESS_RATE = 95.0
#: Five calls (two and a half minutes of a running client) before a rate means anything; below
#: 20 calls a 95 % threshold already allows no failure at all.
DEFAULT_MIN_CALLS = 5
