"""The real Pulumi engine itself, as engines/pulumi_engine.py runs it: a project up and down
with the engine's events read back, and the ways it must fail — a plugin that is not built, a
command past its deadline, an engine folder without the binaries — each one line naming the
thing, with no process left behind.

The tier: it runs where ``python3 engines/build.py all`` has built the Pulumi parts; elsewhere
each test is skipped with that command."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.real_pulumi import (EngineError, PulumiEngine, PulumiProject,  # noqa: F401
                               pulumi_bindir, pulumi_engine)

#: A dynamic provider whose create and delete write a line to a file, and a delete that can
#: be made slow, so a test can see what ran and in which order.
PROGRAM = '''
import os, time
import pulumi
import pulumi.dynamic as dyn

class Recorder(dyn.ResourceProvider):
    def create(self, props):
        with open(props["log"], "a") as f:
            f.write(f"create {props['tag']}\\n")
        return dyn.CreateResult(id_=props["tag"], outs=props)
    def delete(self, _id, props):
        time.sleep(float(props.get("pause", 0)))
        with open(props["log"], "a") as f:
            f.write(f"delete {props['tag']}\\n")

class Thing(dyn.Resource):
    def __init__(self, name, props, opts=None):
        super().__init__(Recorder(), name, props, opts)

cfg = pulumi.Config()
log = cfg.require("log")
base = Thing("base", {"tag": "base", "log": log})
top = Thing("top", {"tag": "top", "log": log, "pause": cfg.get("pause") or "0",
                    "secret": cfg.require_secret("token")},
            opts=pulumi.ResourceOptions(depends_on=[base]))
pulumi.export("tag", top.id)
'''


def project(tmp_path: Path) -> PulumiProject:
    return PulumiProject.program(tmp_path / "project", "recorder", PROGRAM, packages=())


def test_up_and_destroy_run_the_program_and_report_the_engine_s_steps(pulumi_engine, tmp_path):
    stack = pulumi_engine.stack(project(tmp_path), "t")
    log = tmp_path / "ops.log"
    stack.set_config({"recorder:log": str(log), "recorder:token": "s3cr3t-value-42"},
                     secret=("recorder:token",))

    up = stack.up()
    assert up.ok, up.error
    assert stack.outputs() == {"tag": "top"}
    created = [s.name for s in up.steps() if s.op == "create" and s.type.startswith("pulumi-python")]
    assert created == ["base", "top"]
    # The secret is encrypted in the state the engine wrote; the plain value is nowhere in it.
    assert stack.state() and "s3cr3t-value-42" not in stack.state()

    down = stack.destroy()
    assert down.ok, down.error
    assert log.read_text().splitlines() == ["create base", "create top", "delete top", "delete base"]
    deleted = [urn.rsplit("::", 1)[-1] for urn in down.order("delete")]
    assert deleted.index("top") < deleted.index("base")


def test_a_plugin_that_is_not_built_is_an_error_naming_it_and_nothing_is_downloaded(pulumi_engine, tmp_path):
    main = "import pulumi_aws as aws\naws.s3.Bucket('b')\n"
    proj = PulumiProject.program(tmp_path / "aws", "needs-aws", main, packages=())
    run = pulumi_engine.stack(proj, "t").preview()
    assert not run.ok
    assert "aws" in run.error and "plugin" in run.error.lower(), run.error
    # PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION: nothing was fetched into the engine's home.
    assert not list((pulumi_engine.home / "plugins").glob("resource-aws*"))


def test_a_command_past_its_deadline_is_stopped_with_every_process_it_started(pulumi_bindir, tmp_path):
    with PulumiEngine(pulumi_bindir, tmp_path / "engine", deadline=8) as engine:
        stack = engine.stack(project(tmp_path), "t")
        stack.set_config({"recorder:log": str(tmp_path / "ops.log"), "recorder:token": "x",
                          "recorder:pause": "60"}, secret=("recorder:token",))
        assert stack.up().ok
        started = time.monotonic()
        with pytest.raises(EngineError, match=r"did not finish in 8 s"):
            stack.destroy()
        assert time.monotonic() - started < 30
    left = subprocess.run(["pgrep", "-af", str(tmp_path)], capture_output=True, text=True).stdout
    assert left == "", f"processes left: {left}"


def test_an_engine_folder_without_the_binaries_is_refused_naming_them(tmp_path):
    with pytest.raises(EngineError, match=r"lacks pulumi, pulumi-language-python.*engines/build.py all"):
        PulumiEngine(tmp_path, tmp_path / "engine")


def test_the_engine_s_environment_keeps_the_caller_s_aws_and_pulumi_settings_out(pulumi_engine, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "production")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://ec2.us-east-1.amazonaws.com")
    monkeypatch.setenv("PULUMI_ACCESS_TOKEN", "pul-0000")
    main = ("import os, pulumi\n"
            "for key in ('AWS_PROFILE', 'AWS_ENDPOINT_URL', 'PULUMI_ACCESS_TOKEN'):\n"
            "    pulumi.export(key, os.environ.get(key, '-'))\n")
    proj = PulumiProject.program(tmp_path / "env", "env", main, packages=())
    stack = pulumi_engine.stack(proj, "t")
    assert stack.up().ok
    # What the program saw, in the process the engine started for it.
    seen = stack.outputs()
    assert seen["AWS_PROFILE"] == "-" and seen["PULUMI_ACCESS_TOKEN"] == "-"
    assert seen["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9"


def test_without_the_pulumi_binaries_the_tier_names_the_missing_one_and_the_build_command(tmp_path, monkeypatch):
    import pulumi_engine

    for name in ("pulumi", "pulumi-language-python", "pulumi-language-python-exec",
                 "pulumi-resource-pulumi-python"):
        (tmp_path / name).write_text("")
    monkeypatch.setattr(pulumi_engine, "engines_folder", lambda *groups: (tmp_path, ""))
    folder, why = pulumi_engine.pulumi_engine_folder()
    assert folder is None
    assert "pulumi-resource-kubernetes" in why and why.endswith("python3 engines/build.py all"), why
    assert "\n" not in why
