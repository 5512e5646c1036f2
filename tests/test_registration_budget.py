"""The SSM activation's registration budget (components/cleanup/registration_budget.py): a change
that creates more hybrid hosts than the activation has registrations left stops at its check —
which the engine runs at preview, before the hosts that depend on it — naming the activation,
its count and limit, and what to run; and nothing stops a change the activation can register.

The rule, from SSM's: an activation registers at most ``RegistrationLimit`` machines, counted as
``RegistrationsCount`` (registrations made: a deregistered host gives none back; see
docs/hybrid-nodes.md#activation-registrations). Each host a change creates registers once. So a
change may create at most ``limit - count`` hosts, and a new activation (unknown id at preview,
another id at up) has its whole limit left.

The program runs under mocks (offline/); the budget's provider is taken from its registration's
``__provider``, unpickled as the dynamic provider host does, and called with the inputs as the
host hands them over (tests/replacement.py ``as_the_provider_host_passes``). Which hosts a change
replaces comes from tests/replacement.py's port of the engine's rules, for the same transitions
tests/test_replacement.py runs. SSM is tests/fake_ssm_activations.py (moto implements no
activations).
"""

from __future__ import annotations

import base64
from typing import Any, Optional

import dill
import pytest
from pulumi.output import Unknown

from offline.runner import ProgramRun
from tests import fake_ssm_activations
from tests.fake_ssm_activations import install_in_moto
from tests.conftest import PROJECT_DIR, run_lab
from tests.pickled_provider import result_of, run_pickled
from tests.real_pulumi import PulumiEngine, PulumiProject, moto_url, pulumi_bindir  # noqa: F401
from tests.replacement import UNKNOWN, as_the_provider_host_passes, plain
from tests.test_replacement import MATRIX, _transition

BUDGET = "pulumi-python:dynamic/cleanup:SsmRegistrationBudget"
INSTANCE = "aws:ec2/instance:Instance"
HOST_TOKEN = "pulumi-python:dynamic/cleanup:HybridHostToken"
REGION = "ap-northeast-2"
NAME = "hybrid-lab-dev-hybrid-nodes"
ACTIVATION = "3f1c2a7e-5b8d-4c21-9e0f-6a7b8c9d0e1f"
OTHER = "9d8c7b6a-0f1e-4d2c-8b3a-1e2f3a4b5c6d"
FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION, "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.fixture
def ssm(monkeypatch) -> fake_ssm_activations.FakeActivations:
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    for key, value in FAKE_AWS_ENV.items():
        monkeypatch.setenv(key, value)
    return fake_ssm_activations.install(monkeypatch, REGION)


def budget_of(run: ProgramRun):
    found = run.of_type(BUDGET)
    assert len(found) == 1, (f"one registration budget in front of the hosts, found "
                             f"{[r.name for r in found]} (resources of type {BUDGET})")
    return found[0]


def provider_of(reg) -> Any:
    """The provider the engine would call: the one pickled into the registration."""
    provider = dill.loads(base64.b64decode(plain(reg.inputs["__provider"])))
    provider.retry_base_seconds = 0  # no backoff between a test's retries
    return provider


def check(reg, olds: dict, news: dict) -> Optional[str]:
    """The provider's check, as the host calls it: the one failure's reason, or None."""
    result = provider_of(reg).check(as_the_provider_host_passes(olds),
                                    as_the_provider_host_passes(news))
    assert len(result.failures) <= 1
    return result.failures[0].reason if result.failures else None


def previewed(transition) -> dict:
    """The budget's new inputs as the preview of ``transition`` has them: an input flowing from
    a resource being replaced is not known yet (the model's rule, tests/replacement.py plan)."""
    reg = budget_of(transition.new)
    inputs = plain(reg.inputs)
    for prop, sources in reg.property_dependencies.items():
        if prop in inputs and any(s in transition.plan.replaced for s in sources):
            inputs[prop] = UNKNOWN
    return inputs


def replaced_or_created_hosts(transition) -> set[str]:
    """The hybrid hosts whose instance the engine replaces or creates, by the model."""
    plan = transition.plan
    return {r.name.removeprefix("hybrid-hosts-") for r in transition.new.of_type(INSTANCE)
            if r.name.startswith("hybrid-hosts-")
            and (r.urn in plan.replaced or r.urn in plan.created)}


def inputs(hosts: dict, activation: Any = ACTIVATION, limit: int = 6,
           generation: int = 1) -> dict:
    return {"activationId": activation, "activationName": NAME, "registrationLimit": limit,
            "activationGeneration": generation, "region": REGION, "hostNames": sorted(hosts),
            "hosts": dict(hosts)}


TWO = {"node-0": "aaaa00000000", "node-1": "bbbb00000000"}
EDITED = {"node-0": "aaaa11111111", "node-1": "bbbb11111111"}


# --- the program ----------------------------------------------------------------------------------


def test_every_hybrid_host_waits_for_the_budget_and_the_budget_for_the_activation():
    run = run_lab(gpuEnabled=True)
    budget = budget_of(run)
    [activation] = run.of_type("aws:ssm/activation:Activation")
    assert budget.property_dependencies["activationId"] == [activation.urn]
    hosts = [r for r in run.of_type(INSTANCE) if r.name.startswith("hybrid-hosts-")]
    assert {r.name for r in hosts} == {"hybrid-hosts-node-0", "hybrid-hosts-node-1",
                                       "hybrid-hosts-gpu"}
    for host in hosts:
        assert budget.urn in host.dependencies, host.name


def test_the_fingerprints_are_the_hosts_generations():
    run = run_lab(gpuEnabled=True)
    budget = budget_of(run)
    generations = {r.name.removeprefix("hybrid-hosts-").removesuffix("-token"):
                   r.inputs["generation"] for r in run.of_type(HOST_TOKEN)}
    assert budget.inputs["hosts"] == generations
    assert budget.inputs["hostNames"] == sorted(generations)
    assert budget.inputs["registrationLimit"] == 6 and budget.inputs["activationName"] == NAME


@pytest.mark.parametrize("key", [m[0] for m in MATRIX])
def test_the_budget_counts_exactly_the_hosts_the_engine_replaces_or_creates(key,
                                                                         tmp_path_factory):
    t = _transition(key, tmp_path_factory)
    counted = provider_of(budget_of(t.new)).created_hosts(
        as_the_provider_host_passes(plain(budget_of(t.old).inputs)),
        as_the_provider_host_passes(previewed(t)))
    assert set(counted) == replaced_or_created_hosts(t)


def test_an_edit_of_the_join_script_stops_at_preview_once_the_activation_is_used_up(
        ssm, tmp_path_factory):
    """Two hosts, limit 6: the first up registers 2, each edit of the join script 2 more. At 4
    of 6 an edit passes (2 left, 2 created); at 6 of 6 (after two edits) it stops, and so it
    does at 5 of 6 (1 left)."""
    t = _transition("join-script", tmp_path_factory)
    old, new = budget_of(t.old), budget_of(t.new)
    activation = plain(old.inputs["activationId"])
    ssm.add(activation, NAME, limit=6, count=4)
    assert check(new, plain(old.inputs), previewed(t)) is None
    for count in (5, 6):
        ssm.activations[activation].count = count
        reason = check(new, plain(old.inputs), previewed(t))
        assert reason == (
            f"SSM activation {activation} ({NAME}, {REGION}) has {6 - count} of its 6 "
            f"registrations left ({count} used: SSM counts every registration made, a "
            "deregistered host's too), and this change creates 2 hybrid hosts (node-0, node-1), "
            "each of which registers once. Past the limit a host's registration fails inside "
            "nodeadm and it never joins. Start a new activation first: pulumi config set "
            "activationGeneration 2 (a new activation with 6 registrations; every hybrid host "
            "is re-pointed to it and replaced), then run pulumi up again")
    assert [c["Filters"] for c in ssm.calls] == [
        [{"FilterKey": "ActivationIds", "FilterValues": [activation]}]] * 3


def test_the_fix_it_names_passes_a_used_up_activation(ssm, tmp_path_factory):
    """activationGeneration 2: a new activation, unknown at preview: its whole limit is left
    for the hosts, and nothing is read."""
    t = _transition("activation-generation", tmp_path_factory)
    ssm.add(plain(budget_of(t.old).inputs["activationId"]), NAME, limit=6, count=6)
    assert previewed(t)["activationId"] == UNKNOWN
    assert check(budget_of(t.new), plain(budget_of(t.old).inputs), previewed(t)) is None
    assert ssm.calls == []


def test_an_unchanged_stack_passes_without_reading_ssm(ssm):
    run = run_lab()
    budget = budget_of(run)
    ssm.add(plain(budget.inputs["activationId"]), NAME, limit=6, count=6)
    assert check(budget, plain(budget.inputs), plain(budget.inputs)) is None
    assert ssm.calls == []


# --- the rule -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reg():
    return budget_of(run_lab())


def test_a_host_switched_on_counts(ssm, reg):
    with_gpu = {**TWO, "gpu": "cccc00000000"}
    ssm.add(ACTIVATION, NAME, limit=6, count=5)
    assert check(reg, inputs(TWO), inputs(with_gpu)) is None
    ssm.activations[ACTIVATION].count = 6
    reason = check(reg, inputs(TWO), inputs(with_gpu))
    assert "has 0 of its 6 registrations left (6 used" in reason
    assert "creates 1 hybrid host (gpu)" in reason


def test_a_fingerprint_not_known_at_preview_counts(ssm, reg):
    ssm.add(ACTIVATION, NAME, limit=6, count=5)
    reason = check(reg, inputs(TWO), inputs({"node-0": TWO["node-0"], "node-1": UNKNOWN}))
    assert reason is None
    reason = check(reg, inputs(TWO), {**inputs(TWO), "hosts": UNKNOWN})
    assert "creates 2 hybrid hosts (node-0, node-1)" in reason


def test_a_new_activation_at_up_is_not_read(ssm, reg):
    # At up the replaced activation's id is known, and it is another one than before.
    assert check(reg, inputs(TWO), inputs(EDITED, activation=OTHER)) is None
    assert ssm.calls == []


def test_a_new_activation_too_small_for_the_hosts_says_so(ssm, reg):
    reason = check(reg, inputs(TWO), inputs(EDITED, activation=UNKNOWN, limit=1))
    assert reason == (f"the new SSM activation {NAME} allows 1 registrations and this change "
                      "creates 2 hybrid hosts (node-0, node-1): raise its registration limit "
                      "(stacks/layers/hybrid.py)")


def test_an_expired_activation_stops_a_change(ssm, reg):
    ssm.add(ACTIVATION, NAME, limit=6, count=2, expired=True)
    reason = check(reg, inputs(TWO), inputs(EDITED, generation=3))
    assert reason.startswith(f"SSM activation {ACTIVATION} ({NAME}, {REGION}) expired (")
    assert "pulumi config set activationGeneration 4" in reason


def test_an_activation_that_is_gone_stops_a_change(ssm, reg):
    reason = check(reg, inputs(TWO), inputs(EDITED))
    assert reason.startswith(f"SSM activation {ACTIVATION} ({NAME}, {REGION}) does not exist in "
                             f"{REGION}")
    assert "Run pulumi refresh, or start a new activation: pulumi config set" in reason


def test_an_unreadable_count_stops_a_change_after_retries(ssm, reg):
    ssm.add(ACTIVATION, NAME, limit=6, count=0)
    ssm.failures = ["ThrottlingException"] * 3
    reason = check(reg, inputs(TWO), inputs(EDITED))
    assert reason.startswith(f"SSM activation {ACTIVATION} ({NAME}, {REGION}): its "
                             "registrations could not be read (ThrottlingException: ")
    assert len(ssm.calls) == 3  # the provider's three tries
    ssm.failures = ["AccessDeniedException"]
    assert "AccessDeniedException" in check(reg, inputs(TWO), inputs(EDITED))


def test_the_first_check_reads_once_and_lets_an_unreadable_count_through(ssm, reg):
    """No olds: the activation was made in this very update (its preview, with the id
    unknown, judged it new) or before the budget existed; the second is read, once."""
    ssm.add(ACTIVATION, NAME, limit=6, count=5)
    assert "has 1 of its 6 registrations left" in check(reg, {}, inputs(TWO))
    ssm.failures = ["InternalServerError"]
    calls = len(ssm.calls)
    assert check(reg, {}, inputs(TWO)) is None
    assert len(ssm.calls) == calls + 1


@pytest.mark.parametrize("bad, message", [
    ({"registrationLimit": 0}, "registrationLimit must be a whole number from 1 to 1000 (SSM's "
                               "range), got 0"),
    ({"hostNames": "node-0"}, "hostNames must be a list of host names, got 'node-0'"),
    ({"region": ""}, "region must be set (the activation's region)"),
])
def test_bad_input_is_one_clear_line(reg, bad, message):
    assert check(reg, inputs(TWO), {**inputs(TWO), **bad}) == message


def test_create_and_update_store_the_hosts_and_call_nothing(reg):
    provider = provider_of(reg)
    created = provider.create(inputs(TWO))
    assert created.outs == inputs(TWO)
    assert provider.diff("id", created.outs, inputs(TWO)).changes is False
    changed = provider.diff("id", created.outs, inputs(EDITED))
    assert changed.changes is True and changed.replaces == []
    assert provider.update("id", created.outs, inputs(EDITED)).outs == inputs(EDITED)
    assert provider.diff("id", created.outs, {**inputs(TWO), "hosts": Unknown()}).changes


def test_the_pickled_check_reads_ssm_outside_the_project(reg):
    """Run as Pulumi runs it: unpickled in a process where the project is not importable, SSM
    answered by a Stubber on the client the provider makes."""
    prelude = f"""
        import boto3, datetime
        from botocore.stub import Stubber
        real = boto3.client
        def client(service, *args, **kwargs):
            made = real(service, *args, endpoint_url="http://127.0.0.1:9", **kwargs)
            stub = Stubber(made)
            stub.add_response("describe_activations", {{"ActivationList": [{{
                "ActivationId": "{ACTIVATION}", "RegistrationLimit": 6,
                "RegistrationsCount": 6, "Expired": False}}]}},
                {{"Filters": [{{"FilterKey": "ActivationIds",
                               "FilterValues": ["{ACTIVATION}"]}}]}})
            stub.activate()
            return made
        boto3.client = client
    """
    done = run_pickled(provider_of(reg), "verdict", inputs(TWO), inputs(EDITED),
                       prelude=prelude, env=FAKE_AWS_ENV)
    assert "has 0 of its 6 registrations left (6 used" in result_of(done)


def test_the_plan_shows_the_limit_and_what_a_first_up_registers():
    import io

    from offline.plan import render_activation

    out = io.StringIO()
    render_activation(run_lab(gpuEnabled=True), out)
    assert out.getvalue() == (
        f"\nSSM hybrid activation {NAME} (docs/hybrid-nodes.md#activation-registrations)\n"
        "  registration limit 6; a first pulumi up registers 3 (gpu, node-0, node-1), leaving 3: "
        "1 replacement of every host (an edit of the join script) before preview asks for a new "
        "activationGeneration\n")


def test_the_check_acts_in_the_stacks_pinned_account(reg):
    """With aws:allowedAccountIds, the caller's account is checked before SSM is read: moto's
    STS answers 123456789012, the stack is pinned to another."""
    from moto import mock_aws

    with pytest.MonkeyPatch.context() as monkeypatch:
        for key, value in FAKE_AWS_ENV.items():
            monkeypatch.setenv(key, value)
        with mock_aws():
            reason = check(reg, inputs(TWO), {**inputs(EDITED),
                                              "allowedAccountIds": ["111122223333"]})
    # The refusal every cleanup gives (aws_session.py ``_not_allowed``).
    assert ("its registrations could not be read (RuntimeError: the AWS credentials (the "
            "environment's credentials) are for account 123456789012, and this stack is pinned "
            "to 111122223333 (aws:allowedAccountIds): nothing was done in 123456789012") in reason


def test_the_pickled_check_reads_the_moto_servers_stand_in(reg, moto_url, monkeypatch):  # noqa: F811
    """The plumbing of the real-engine test below: the provider, unpickled in its own process,
    reads DescribeActivations from the moto server (install_in_moto's table)."""
    table = install_in_moto(monkeypatch)
    table.add(ACTIVATION, NAME, limit=6, count=5)
    done = run_pickled(provider_of(reg), "verdict", inputs(TWO), inputs(EDITED),
                       env={**FAKE_AWS_ENV, "AWS_ENDPOINT_URL": moto_url})
    assert "has 1 of its 6 registrations left (5 used" in result_of(done)
    assert len(table.calls) == 1


# --- the real engine ------------------------------------------------------------------------------

ENGINE_PROGRAM = '''
import pulumi

from components.cleanup.registration_budget import RegistrationBudget
from components.expiry import Expiry

config = pulumi.Config()
budget = RegistrationBudget(
    "budget", activation_id=config.require("activationId"), activation_name="lab-hybrid-nodes",
    registration_limit=6, activation_generation=1, region=config.require("region"),
    hosts={"node-0": config.require("fingerprint") + "-0",
           "node-1": config.require("fingerprint") + "-1"})
# Stands in for a host: it depends on the budget and is replaced when the fingerprint changes.
host = Expiry("host", days=1, generation=config.require_int("generation"),
              opts=pulumi.ResourceOptions(depends_on=[budget]))
pulumi.export("host", host.id)
'''


def test_the_real_engine_stops_the_preview_with_the_message(pulumi_bindir, moto_url,  # noqa: F811
                                                           monkeypatch, tmp_path):
    table = install_in_moto(monkeypatch)
    table.add(ACTIVATION, "lab-hybrid-nodes", limit=6, count=2)
    project = PulumiProject.program(tmp_path / "project", "budget", ENGINE_PROGRAM,
                                    source=PROJECT_DIR)
    with PulumiEngine(pulumi_bindir, tmp_path / "engine", aws_endpoint=moto_url,
                      deadline=180) as engine:
        stack = engine.stack(project, "t")
        stack.set_config({"budget:activationId": ACTIVATION, "budget:region": REGION,
                          "budget:fingerprint": "g1", "budget:generation": "1"})
        first = stack.up()
        assert first.ok, first.error
        host = stack.outputs()["host"]
        # Two edits of the join script: 2 + 2 + 2 = 6 of 6; the next one creates 2 more.
        table.activations[ACTIVATION].count = 6
        stack.set_config({"budget:fingerprint": "g2", "budget:generation": "2"})
        preview = stack.preview()
        assert not preview.ok
        wanted = (f"SSM activation {ACTIVATION} (lab-hybrid-nodes, {REGION}) has 0 of its 6 "
                  "registrations left (6 used")
        assert any(wanted in d and "pulumi config set activationGeneration 2" in d
                   for d in preview.diagnostics()), preview.diagnostics()
        refused = stack.up()
        assert not refused.ok
        assert stack.outputs()["host"] == host  # nothing behind the budget was replaced
        # 4 of 6: the edit fits, and goes through.
        table.activations[ACTIVATION].count = 4
        assert stack.preview().ok
        second = stack.up()
        assert second.ok, second.error
        assert stack.outputs()["host"] != host
        calls = len(table.calls)
        # Nothing changes: nothing is read.
        assert stack.preview().ok and len(table.calls) == calls
        assert stack.destroy().ok
