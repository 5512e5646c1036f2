"""Demo 3, vLLM on the hybrid GPU host called from the cloud: what the demo
guide's demo3-gpu/verify.sh checked (docs/demo-guide.md#demo-3-gpu-inference-on-a-hybrid-node), made exact and measured.

Checks: nvidia.com/gpu allocatable on the hybrid GPU host; the vLLM pod Ready there, with no
istio-proxy container and hostNetwork off; the cloud client's calls succeeding over a window of
its log; one completion through the Service, asked through the API server's service proxy.
Numbers: the client's success rate and p50/p95 latency (nearest rank), the image pull time from
the kubelet's Pulled event beside the demo guide's 4m28s, the completion's time.

The collector records what it saw (events.jsonl); the analysis is pure over those events, so
`python -m rehearse report <folder>` replays a run.
"""

# The command's face, what rehearse.cli reads (a run command, rehearse.run.command): its
# docstring is its --help description; the work is in collect (and analyse).
from rehearse.commands.verify_gpu.collect import TITLE, add_arguments, check_inputs, collect, analyse

__all__ = ["TITLE", "add_arguments", "check_inputs", "collect", "analyse"]
