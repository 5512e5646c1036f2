"""The Helm releases whose pods need AWS credentials through EKS Pod Identity are installed
only after their association has had time to take effect (components/propagation.py): the
EKS Pod Identity webhook gives a pod credentials when it is created, and an association is
eventually consistent ("several seconds", EKS API reference)."""

from __future__ import annotations

import time

import pytest

from components.propagation import POD_IDENTITY_SETTLE_SECONDS, PropagationWaitProvider
from offline import timing

WAIT = "pulumi-python:dynamic/wait:Propagation"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
RELEASE = "kubernetes:helm.sh/v3:Release"

#: release name -> its association (the two charts whose pods call AWS).
GUARDED = {"gateway-gateway-release": "gateway-gateway-pod-identity",
           "karpenter-karpenter-controller-release": "karpenter-karpenter-pod-identity"}


def named(run, name):
    [found] = [r for r in run.registrations if r.name == name]
    return found


@pytest.mark.parametrize("release_name,association_name", GUARDED.items())
def test_the_release_waits_for_its_association_to_take_effect(dev_run, release_name, association_name):
    release, association = named(dev_run, release_name), named(dev_run, association_name)
    [wait] = [w for w in dev_run.of_type(WAIT)
              if association.urn in w.property_dependencies.get("trigger", [])]
    assert wait.inputs["trigger"] == association.outputs["associationId"]
    assert wait.inputs["seconds"] == POD_IDENTITY_SETTLE_SECONDS == 30
    assert wait.urn in release.explicit_dependencies
    # Not the association directly: a release that depends on it alone would start at once.
    assert association.urn not in release.explicit_dependencies


def test_every_association_guards_a_release(dev_run):
    """No association is left without a wait (a new chart with Pod Identity must get one)."""
    waited = {urn for w in dev_run.of_type(WAIT) for urn in w.property_dependencies.get("trigger", [])}
    assert {a.urn for a in dev_run.of_type(ASSOCIATION)} == waited


def test_the_timing_model_counts_the_wait(dev_run):
    assert timing.DURATIONS[WAIT].create == POD_IDENTITY_SETTLE_SECONDS


def test_the_wait_sleeps_and_only_a_new_association_waits_again():
    provider = PropagationWaitProvider()
    started = time.monotonic()
    created = provider.create({"trigger": "a-0123456789abcdefg", "seconds": 0.2})
    assert time.monotonic() - started >= 0.2
    same = provider.diff(created.id, {**created.outs, "__provider": "old"},
                         {"trigger": "a-0123456789abcdefg", "seconds": 10, "__provider": "new"})
    assert not same.changes and not same.replaces
    new = provider.diff(created.id, created.outs, {"trigger": "a-other", "seconds": 0.2})
    assert new.replaces == ["trigger"] and not new.delete_before_replace


def test_a_wait_without_a_trigger_is_refused():
    with pytest.raises(ValueError, match="a trigger"):
        PropagationWaitProvider().create({"trigger": "", "seconds": 1})
