"""The destroy-time SSM cleanup: it deregisters exactly the managed instances of this stack's
activation, survives throttling and already-gone instances, says what is left when it cannot
finish, and still works once pickled and run outside the project.

moto does not implement SSM activations or managed instances, so SSM is a botocore Stubber: each
expected call is listed with its exact parameters, and any other call fails the test. The stubbed
client points at a closed loopback port, so nothing could reach AWS even unstubbed.
"""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from components.cleanup.ssm_registrations import (SsmRegistrationCleanup,
                                                  SsmRegistrationCleanupProvider)
from tests.pickled_provider import result_of, run_pickled

REGION = "ap-northeast-2"
ACTIVATION = "3f1c2a7e-5b8d-4c21-9e0f-6a7b8c9d0e1f"
OTHER_ACTIVATION = "9d8c7b6a-0f1e-4d2c-8b3a-1e2f3a4b5c6d"
MI_A = "mi-0a1b2c3d4e5f60001"
MI_B = "mi-0a1b2c3d4e5f60002"
MI_C = "mi-0a1b2c3d4e5f60003"
NOWHERE = "http://127.0.0.1:9"  # closed port: a call that escaped the stubber fails fast
FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION,
    "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}
PROPS = {"activationId": ACTIVATION, "region": REGION}
RESOURCE_ID = f"ssm-registrations-{ACTIVATION}"


def describe_params(token: str | None = None) -> dict:
    params = {"Filters": [{"Key": "ActivationIds", "Values": [ACTIVATION]}], "MaxResults": 50}
    if token:
        params["NextToken"] = token
    return params


def page(*instances: tuple[str, str], token: str | None = None) -> dict:
    response = {"InstanceInformationList": [
        {"InstanceId": instance_id, "ActivationId": activation_id,
         "ResourceType": "ManagedInstance", "PingStatus": "ConnectionLost"}
        for instance_id, activation_id in instances]}
    if token:
        response["NextToken"] = token
    return response


@pytest.fixture(scope="module", autouse=True)
def fake_aws_env():
    """Fake credentials and no shared config, so nothing can use a real account."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.delenv("AWS_PROFILE", raising=False)
        for key, value in FAKE_AWS_ENV.items():
            monkeypatch.setenv(key, value)
        yield


@pytest.fixture(scope="module")
def aws_session(fake_aws_env):
    # One session for the module: it caches the loaded SSM model, so each client is cheap.
    return boto3.session.Session()


@pytest.fixture
def ssm(monkeypatch, aws_session):
    """A Stubber on the only SSM client the provider can get (for REGION)."""
    client = aws_session.client("ssm", region_name=REGION, endpoint_url=NOWHERE)
    stubber = Stubber(client)

    def fake_client(service, *args, **kwargs):
        assert service == "ssm", service
        assert kwargs.get("region_name") == REGION, kwargs
        assert "endpoint_url" not in kwargs, kwargs
        return client

    monkeypatch.setattr(boto3, "client", fake_client)
    with stubber:
        yield stubber
        stubber.assert_no_pending_responses()


@pytest.fixture
def provider():
    provider = SsmRegistrationCleanupProvider()
    provider.retry_base_seconds = 0
    return provider


def expect_deregister(stubber: Stubber, instance_id: str) -> None:
    stubber.add_response("deregister_managed_instance", {}, {"InstanceId": instance_id})


def test_found_instances_are_deregistered(ssm, provider):
    ssm.add_response("describe_instance_information",
                     page((MI_A, ACTIVATION), (MI_B, ACTIVATION)), describe_params())
    expect_deregister(ssm, MI_A)
    expect_deregister(ssm, MI_B)

    assert provider.delete(RESOURCE_ID, PROPS) is None


def test_secret_props_are_unwrapped(ssm, provider):
    # The engine hands secret values to a dynamic provider wrapped in a signature dict.
    secret = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
              "value": ACTIVATION}
    ssm.add_response("describe_instance_information", page((MI_A, ACTIVATION)),
                     describe_params())
    expect_deregister(ssm, MI_A)

    provider.delete(RESOURCE_ID, {**PROPS, "activationId": secret})


def test_no_instances_is_success(ssm, provider):
    ssm.add_response("describe_instance_information", page(), describe_params())

    provider.delete(RESOURCE_ID, PROPS)


def test_every_page_is_read(ssm, provider):
    ssm.add_response("describe_instance_information",
                     page((MI_A, ACTIVATION), token="page-2"), describe_params())
    ssm.add_response("describe_instance_information",
                     page((MI_B, ACTIVATION), (MI_C, ACTIVATION)), describe_params("page-2"))
    for instance_id in (MI_A, MI_B, MI_C):
        expect_deregister(ssm, instance_id)

    provider.delete(RESOURCE_ID, PROPS)


def test_already_deregistered_is_success(ssm, provider):
    ssm.add_response("describe_instance_information",
                     page((MI_A, ACTIVATION), (MI_B, ACTIVATION)), describe_params())
    ssm.add_client_error("deregister_managed_instance", "InvalidInstanceId",
                         "Instance Id mi-... is not valid.", 400, {"InstanceId": MI_A})
    expect_deregister(ssm, MI_B)

    provider.delete(RESOURCE_ID, PROPS)


def test_throttled_calls_are_retried(ssm, provider):
    ssm.add_client_error("describe_instance_information", "ThrottlingException", "Rate exceeded",
                         400, describe_params())
    ssm.add_response("describe_instance_information", page((MI_A, ACTIVATION)),
                     describe_params())
    ssm.add_client_error("deregister_managed_instance", "TooManyUpdates", "Too many updates",
                         400, {"InstanceId": MI_A})
    ssm.add_client_error("deregister_managed_instance", "InternalServerError", "Oops",
                         500, {"InstanceId": MI_A})
    expect_deregister(ssm, MI_A)

    provider.delete(RESOURCE_ID, PROPS)


def test_backoff_is_exponential_and_bounded(ssm, provider, monkeypatch):
    sleeps = []
    monkeypatch.setattr("time.sleep", sleeps.append)
    provider.retry_base_seconds = 1.0
    ssm.add_response("describe_instance_information", page((MI_A, ACTIVATION)),
                     describe_params())
    for _ in range(provider.attempts):
        ssm.add_client_error("deregister_managed_instance", "ThrottlingException",
                             "Rate exceeded", 400, {"InstanceId": MI_A})

    with pytest.raises(Exception) as raised:
        provider.delete(RESOURCE_ID, PROPS)

    assert MI_A in str(raised.value) and "ThrottlingException" in str(raised.value)
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 16.0]


def test_persistent_failure_names_what_is_left(ssm, provider):
    ssm.add_response("describe_instance_information",
                     page((MI_A, ACTIVATION), (MI_B, ACTIVATION)), describe_params())
    ssm.add_client_error("deregister_managed_instance", "AccessDeniedException",
                         "not authorized to perform ssm:DeregisterManagedInstance", 400,
                         {"InstanceId": MI_A})
    expect_deregister(ssm, MI_B)  # still deregistered after MI_A failed

    with pytest.raises(Exception) as raised:
        provider.delete(RESOURCE_ID, PROPS)

    message = str(raised.value)
    assert ACTIVATION in message and MI_A in message and "AccessDeniedException" in message
    assert MI_B not in message
    assert "aws ssm deregister-managed-instance" in message


def test_listing_failure_still_deregisters_what_was_listed(ssm, provider):
    ssm.add_response("describe_instance_information",
                     page((MI_A, ACTIVATION), token="page-2"), describe_params())
    ssm.add_client_error("describe_instance_information", "AccessDeniedException", "denied",
                         400, describe_params("page-2"))
    expect_deregister(ssm, MI_A)

    with pytest.raises(Exception) as raised:
        provider.delete(RESOURCE_ID, PROPS)

    assert ACTIVATION in str(raised.value) and "describe-instance-information" in str(raised.value)


def test_instances_of_other_activations_are_never_touched(ssm, provider):
    # The filter should make this impossible; the provider must not rely on it.
    ssm.add_response("describe_instance_information",
                     page((MI_A, ACTIVATION), (MI_B, OTHER_ACTIVATION)), describe_params())
    expect_deregister(ssm, MI_A)

    provider.delete(RESOURCE_ID, PROPS)


def test_create_and_diff_touch_no_aws(monkeypatch, provider):
    def no_aws(*args, **kwargs):
        raise AssertionError("create()/diff() must not call AWS")

    monkeypatch.setattr(boto3, "client", no_aws)
    monkeypatch.setattr(boto3.session.Session, "client", no_aws)

    created = provider.create({**PROPS, "__provider": "serialized"})
    assert created.id == RESOURCE_ID
    assert created.outs == PROPS

    olds = {**PROPS, "__provider": "code-v1"}
    same = provider.diff(RESOURCE_ID, olds, dict(olds))
    assert (same.changes, same.replaces) == (False, [])

    new_activation = provider.diff(RESOURCE_ID, olds, {**olds, "activationId": OTHER_ACTIVATION})
    assert new_activation.changes is True
    assert new_activation.replaces == ["activationId"]
    assert new_activation.delete_before_replace is False

    new_region = provider.diff(RESOURCE_ID, olds, {**olds, "region": "us-west-2"})
    assert (new_region.changes, new_region.replaces) == (True, ["region"])

    # Only the provider code changed: an in-place update, so the state gets the new delete().
    new_code = provider.diff(RESOURCE_ID, olds, {**olds, "__provider": "code-v2"})
    assert (new_code.changes, new_code.replaces) == (True, [])
    assert provider.update(RESOURCE_ID, olds, {**olds, "__provider": "code-v2"}).outs == PROPS


def test_create_rejects_a_missing_activation(provider):
    with pytest.raises(ValueError, match="activationId"):
        provider.create({"activationId": "", "region": REGION})


def test_pickled_provider_deletes_in_a_fresh_process():
    prelude = f"""
        import atexit, boto3
        from botocore.stub import Stubber
        client = boto3.client("ssm", region_name={REGION!r}, endpoint_url={NOWHERE!r})
        stubber = Stubber(client)
        stubber.add_response(
            "describe_instance_information",
            {{"InstanceInformationList": [{{"InstanceId": {MI_A!r},
                                             "ActivationId": {ACTIVATION!r}}}]}},
            {describe_params()!r})
        stubber.add_response("deregister_managed_instance", {{}}, {{"InstanceId": {MI_A!r}}})
        stubber.activate()

        def stubbed_client(service, *args, **kwargs):
            assert service == "ssm" and kwargs.get("region_name") == {REGION!r}, kwargs
            return client

        boto3.client = stubbed_client

        def no_pending_responses():
            stubber.assert_no_pending_responses()
            print("NO PENDING RESPONSES")

        atexit.register(no_pending_responses)
    """
    done = run_pickled(SsmRegistrationCleanupProvider(), "delete", RESOURCE_ID, PROPS,
                       prelude=prelude, env=FAKE_AWS_ENV)

    assert result_of(done) is None
    assert "NO PENDING RESPONSES" in done.stdout.splitlines(), done.stderr


def test_resource_type_token():
    assert SsmRegistrationCleanup._resource_type_name == "dynamic/cleanup:SsmRegistrations"
