"""What the gateway needs of the cluster: Cilium with VTEP on and the L7 proxy off, and the
Pod Identity agent its route writes authenticate through (pure: observations -> checks)."""

from __future__ import annotations

from rehearse.run.outcome import not_read
from rehearse.run.report import FAIL, PASS, Check
from rehearse.commands.verify_gateway.kinds import CHECK_AGENT, CHECK_CILIUM, POD_IDENTITY_AGENT
from rehearse.commands.verify_gateway.observed import Lab


def check_cilium(lab: Lab) -> Check:
    command = 'kubectl -n kube-system get configmap cilium-config -o yaml | grep -E "enable-vtep|enable-l7-proxy"'
    fix = ("set vtep.enabled=true and l7Proxy=false on the Cilium release (components/cilium.py) — "
           "at first install: turning VTEP on by a Helm upgrade has been seen not to apply "
           "(docs/gateway.md#what-it-does) — then `kubectl -n kube-system rollout restart daemonset/cilium`")
    if lab.cilium is None:
        return not_read(CHECK_CILIUM, "cilium-config", lab.events, command)
    if not lab.cilium.get("found"):
        return Check(CHECK_CILIUM, FAIL, "no ConfigMap cilium-config in kube-system: is Cilium installed?",
                     fix, command)
    data = lab.cilium.get("data") or {}
    vtep, l7 = data.get("enable-vtep"), data.get("enable-l7-proxy")
    seen = f"enable-vtep: {vtep!r}, enable-l7-proxy: {l7!r}"
    problems = []
    if str(vtep).lower() != "true":
        problems.append("VTEP is not on")
    # An absent key means Cilium's default, which turns the L7 proxy on.
    if str(l7).lower() != "false":
        problems.append("the L7 proxy is not off")
    if problems:
        return Check(CHECK_CILIUM, FAIL, f"{seen}: {' and '.join(problems)}", fix, command)
    return Check(CHECK_CILIUM, PASS, seen, command=command)


def check_agent(lab: Lab) -> Check:
    command = f"kubectl -n kube-system get daemonset {POD_IDENTITY_AGENT}"
    fix = ("the gateway's route writes use Pod Identity credentials: add the eks-pod-identity-agent "
           "add-on (the cluster layer) and see `aws eks describe-addon --cluster-name <cluster> "
           f"--addon-name {POD_IDENTITY_AGENT}`; then `kubectl -n kube-system describe daemonset "
           f"{POD_IDENTITY_AGENT}`")
    if lab.agent is None:
        return not_read(CHECK_AGENT, "the agent's DaemonSet", lab.events, command)
    if not lab.agent.get("found"):
        return Check(CHECK_AGENT, FAIL, f"no DaemonSet {POD_IDENTITY_AGENT} in kube-system", fix, command)
    status = lab.agent.get("status") or {}
    desired, ready = status.get("desiredNumberScheduled") or 0, status.get("numberReady") or 0
    seen = f"{ready} of {desired} pods ready"
    if desired <= 0 or ready != desired:
        return Check(CHECK_AGENT, FAIL, seen, fix, command)
    return Check(CHECK_AGENT, PASS, seen, command=command)
