"""A pause after a change that AWS applies eventually, before what depends on it is created.

EKS Pod Identity associations are eventually consistent: "they may take several seconds to be
effective after the initial API call returns successfully" (EKS API reference,
CreatePodIdentityAssociation). The EKS Pod Identity webhook gives a pod credentials only when
the pod is *created*, so a pod that starts before its service account's association has taken
effect runs without AWS credentials until it is restarted — Karpenter then cannot launch a
node, and the gateway leader cannot write its route. Nothing reports when an association has
taken effect, so the Helm releases wait on this resource: created right after the association
(in parallel with everything else the release waits for), it returns ``seconds`` later.

Chosen over restarting the pods once after install: a restart would need a Kubernetes call
after the release, and a rollout of the gateway moves its leader — the very thing demo 1
measures. The pause is off the critical path unless the association is the last thing the
release waits for (raising ``upToLayer`` back to ``karpenter`` is that case).
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi.dynamic as dynamic

from components.cleanup.self_contained import self_contained

#: Twice the 15 s the eksctl maintainers advise to wait after creating an association
#: (eksctl-io/eksctl #7709); "several seconds" in the EKS API reference.
POD_IDENTITY_SETTLE_SECONDS = 30


@self_contained
class PropagationWaitProvider(dynamic.ResourceProvider):
    """``create`` sleeps; a new ``trigger`` (a replaced association) replaces it, so it waits
    again; nothing happens at delete."""

    def sleep(self, seconds: float) -> None:
        # A seam: the offline runner replaces it on its unpickled copy, so plans do not wait.
        import time

        time.sleep(seconds)

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        seconds = float(props["seconds"])
        trigger = str(props["trigger"])
        if seconds < 0 or not trigger:
            raise ValueError(f"a propagation wait needs seconds >= 0 and a trigger, got {props}")
        self.sleep(seconds)
        return dynamic.CreateResult(id_=f"waited-{trigger}",
                                    outs={"seconds": seconds, "trigger": trigger})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        # Only a new trigger means a new change to wait for; new code or another duration does
        # not (it would replace the wait, and make the release it guards wait, for nothing).
        replaces = ["trigger"] if str(olds.get("trigger")) != str(news.get("trigger")) else []
        return dynamic.DiffResult(changes=bool(replaces), replaces=replaces,
                                  delete_before_replace=False)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None


class PropagationWait(dynamic.Resource, module="wait", name="Propagation"):
    """Created ``seconds`` after ``trigger`` (an output of the change to wait for) is known."""

    trigger: pulumi.Output[str]

    def __init__(self, name: str, trigger: pulumi.Input[str], seconds: float,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(PropagationWaitProvider(), name,
                         {"trigger": trigger, "seconds": seconds}, opts)
