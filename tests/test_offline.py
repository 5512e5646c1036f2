"""The offline runner itself: it records what registers, refuses unknown invokes, and each run
starts from a clean slate."""

from __future__ import annotations

import textwrap

import pytest

from offline.fake_cloud import FakeCloud, UnknownInvoke
from offline.runner import Secret, run_program
from tests.conftest import independent_run, lab_config, run_lab


def write_program(tmp_path, body: str):
    path = tmp_path / "__main__.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_unknown_invoke_fails_the_run(tmp_path):
    program = write_program(tmp_path, """
        import pulumi_aws as aws
        aws.ec2.get_ami(most_recent=True, owners=["amazon"])
    """)
    with pytest.raises(Exception) as caught:
        run_program(lab_config(), program=program)
    assert "does not answer invoke aws:ec2/getAmi:getAmi" in str(caught.value)


def test_fake_cloud_refuses_unknown_tokens_directly():
    from pulumi.runtime import MockCallArgs
    with pytest.raises(UnknownInvoke):
        FakeCloud("ap-northeast-2").call(MockCallArgs("aws:iam/getRole:getRole", {}, ""))


def test_records_secrets_options_and_dependencies(tmp_path):
    program = write_program(tmp_path, """
        import pulumi
        import pulumi_aws as aws
        vpc = aws.ec2.Vpc("v", cidr_block="10.0.0.0/16")
        aws.ssm.Parameter("p", type="SecureString", value=pulumi.Output.secret("hunter2"),
            opts=pulumi.ResourceOptions(depends_on=[vpc], additional_secret_outputs=["value"],
                                        custom_timeouts=pulumi.CustomTimeouts(delete="20m")))
        aws.ec2.Subnet("s", vpc_id=vpc.id, cidr_block="10.0.0.0/24")
    """)
    run = run_program(lab_config(), program=program)
    param = run.one("aws:ssm/parameter:Parameter", "p")
    assert param.inputs["value"] == Secret("hunter2")
    assert "hunter2" not in repr(param.inputs)
    assert "value" in param.additional_secret_outputs
    assert param.custom_timeouts == {"delete": "20m"}
    vpc = run.one("aws:ec2/vpc:Vpc", "v")
    assert param.explicit_dependencies == {vpc.urn}
    subnet = run.one("aws:ec2/subnet:Subnet", "s")
    assert subnet.property_dependencies["vpcId"] == [vpc.urn]
    assert subnet.explicit_dependencies == set()
    assert subnet.inputs["vpcId"] == vpc.id and vpc.id.startswith("vpc-0")


def test_runs_are_independent(tmp_path):
    first = write_program(tmp_path, """
        import pulumi
        pulumi.export("only_first", 1)
    """)
    run_program(lab_config(), program=first)
    second = write_program(tmp_path, """
        import pulumi
        pulumi.export("second", 2)
    """)
    run = run_program(lab_config(), program=second)
    assert run.outputs == {"second": 2}
    assert run.registrations == []


def test_the_real_program_gives_the_same_answer_twice():
    # Two runs, not one reused: b is made here and shared with no other caller of run_lab.
    a, b = run_lab(), independent_run()
    assert a is not b
    # Registration order follows asyncio scheduling; what registers, and with what, does not.
    assert {r.urn: r.inputs for r in a.registrations} == {r.urn: r.inputs for r in b.registrations}
    assert len(a.registrations) == len(b.registrations)
    assert a.outputs == b.outputs
