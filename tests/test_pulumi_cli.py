"""The Pulumi CLI's own checks, before the program runs: Pulumi.yaml against Pulumi's project
schema, and every stack file through the ported ``mergeConfig`` (``offline/pulumi_cli.py``).

The port is pinned by pulumi/pulumi's own cases (``pkg/workspace/config_project_test.go``, each
named below), and applied where the real CLI would apply it: the offline plan, the stack files
the tests write, and the fake ``pulumi`` the rehearsal drives through the Automation API."""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from offline import plan, pulumi_cli
from stacks.config import SETTINGS
from offline.pulumi_cli import CliConfigError, StackValue, merge_config, read_yaml
from tests import fake_pulumi as fake_pulumi_cli
from tests.conftest import PROJECT_DIR

SHARED_PULUMI = PROJECT_DIR.parent / "shared" / "pulumi" / "project.json"
STACK_FILES = sorted(PROJECT_DIR.glob("Pulumi.*.yaml"))


def project() -> dict:
    return pulumi_cli.load_project(PROJECT_DIR)


def merge_text(project_yaml: str, stack_yaml: str, stack: str = "dev") -> dict[str, str]:
    """Both files as text, through the port; the merged config as the program gets it."""
    proj = read_yaml(project_yaml)
    path = Path(tempfile.mkdtemp()) / f"Pulumi.{stack}.yaml"
    path.write_text(stack_yaml or "{}")
    values = pulumi_cli.load_stack_file(path, proj["name"])
    return pulumi_cli.program_config(merge_config(stack, proj, values))


# --- the project file -------------------------------------------------------------------------

@pytest.mark.skipif(not SHARED_PULUMI.exists(),
                    reason="../shared/pulumi/project.json (Pulumi's project schema) is absent")
def test_pulumi_yaml_is_valid_under_pulumis_own_project_schema():
    import jsonschema

    schema = json.loads(SHARED_PULUMI.read_text())
    document = read_yaml((PROJECT_DIR / "Pulumi.yaml").read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in validator.iter_errors(document)]
    assert problems == []


@pytest.mark.skipif(not SHARED_PULUMI.exists(),
                    reason="../shared/pulumi/project.json (Pulumi's project schema) is absent")
def test_the_project_schema_check_can_fail():
    import jsonschema

    schema = json.loads(SHARED_PULUMI.read_text())
    document = read_yaml((PROJECT_DIR / "Pulumi.yaml").read_text())
    document["config"]["clusterName"]["required"] = True  # not a declaration attribute
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert list(validator.iter_errors(document))


def test_pulumi_yaml_passes_project_validate():
    assert pulumi_cli.project_errors(project()) == []


@pytest.mark.parametrize("declaration,words", [
    ({"type": "array"}, "does not specify the underlying type via the 'items' attribute"),
    ({"type": "integer", "default": "two"}, "is not of the expected type 'integer'"),
    ({"type": "array", "items": {"type": "string"}, "default": "x"},
     "is not of the expected type 'array<string>'"),
    ({"default": 1, "value": 2}, "cannot have both a 'default' and 'value' attribute"),
])
def test_project_validate_rejects_a_bad_declaration(declaration, words):
    broken = copy.deepcopy(project())
    broken["config"]["upToLayer"] = declaration
    assert any(words in p for p in pulumi_cli.project_errors(broken))


def test_another_namespaces_key_may_not_be_typed_in_the_project():
    broken = copy.deepcopy(project())
    broken["config"]["aws:region"] = {"type": "string", "value": "us-east-1"}
    assert pulumi_cli.project_errors(broken) == [
        "Configuration key 'aws:region' is not namespaced by the project and should not define a type"]


# --- the stack files --------------------------------------------------------------------------

def test_there_is_a_stack_file_to_check():
    assert PROJECT_DIR / "Pulumi.dev.yaml" in STACK_FILES


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_every_shipped_stack_file_passes_the_clis_checks(path):
    """`pulumi preview` on this stack would start the program: no required key is missing, and
    every value is of its declared type. (With clusterName declared without a default, as it
    once was, this fails: Stack 'dev' is missing configuration value 'clusterName'.)"""
    stack = path.name.split(".")[1]
    values = pulumi_cli.load_stack_file(path, project()["name"])
    merged = merge_config(stack, project(), values)
    # Every setting reaches the program, from the stack or as the project's default.
    assert {f"eks-hybrid-lab:{s.key}" for s in SETTINGS} <= set(merged)


def test_a_key_with_neither_default_nor_value_is_required():
    """The defect this port exists for: clusterName typed, no default, left out of the stack."""
    broken = copy.deepcopy(project())
    del broken["config"]["clusterName"]["default"]
    values = pulumi_cli.load_stack_file(PROJECT_DIR / "Pulumi.dev.yaml", "eks-hybrid-lab")
    with pytest.raises(CliConfigError) as refused:
        merge_config("dev", broken, values)
    assert str(refused.value) == "Stack 'dev' is missing configuration value 'clusterName'"


def test_the_plan_refuses_what_the_cli_refuses(monkeypatch, capsys):
    broken = copy.deepcopy(project())
    del broken["config"]["clusterName"]["default"]
    monkeypatch.setattr(pulumi_cli, "load_project", lambda _dir: broken)
    assert plan.main(["--stack", "dev"]) == 1
    err = capsys.readouterr().err
    assert "the Pulumi CLI would refuse this stack" in err
    assert "Stack 'dev' is missing configuration value 'clusterName'" in err


def test_a_wrongly_typed_stack_value_stops_the_plan_with_the_clis_words(tmp_path, capsys):
    stack = yaml.safe_load((PROJECT_DIR / "Pulumi.dev.yaml").read_text())
    stack["config"]["eks-hybrid-lab:availabilityZoneCount"] = "two"
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(yaml.safe_dump(stack))
    assert plan.main(["--stack-file", str(path)]) == 1
    assert ("Stack 'dev' with configuration key 'availabilityZoneCount' must be of type 'integer'"
            in capsys.readouterr().err)


def test_a_stack_file_that_is_not_yaml_is_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "Pulumi.broken.yaml"
    path.write_text("config:\n  aws:region: [ap-northeast-2\n  eks-hybrid-lab:upToLayer: demo\n")
    assert plan.main(["--stack-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: Pulumi.broken.yaml: not a Pulumi stack file (not valid YAML: line ")


def test_the_program_gets_the_projects_defaults_for_what_the_stack_leaves_out(tmp_path):
    from offline.runner import load_stack_config

    path = tmp_path / "Pulumi.alice.yaml"
    path.write_text("config:\n  aws:region: eu-west-1\n")
    config = load_stack_config("alice", path=path)
    assert config["eks-hybrid-lab:clusterName"] == ""
    assert config["eks-hybrid-lab:availabilityZoneCount"] == "2"
    assert config["eks-hybrid-lab:adminCidrs"] == "[]"
    assert config["eks-hybrid-lab:gpuEnabled"] == "false"


# --- the port, pinned by pulumi/pulumi's own cases (config_project_test.go) -------------------

def test_stack_config_is_inherited_from_project_config():
    """TestStackConfigIsInheritedFromProjectConfig"""
    merged = merge_text("name: test\nruntime: dotnet\nconfig:\n  instanceSize: t3.micro\n"
                        "  instanceCount: 20\n  protect: true",
                        "config:\n  test:instanceSize: t4.large")
    assert merged == {"test:instanceSize": "t4.large", "test:instanceCount": "20",
                      "test:protect": "true"}


def test_namespaced_config_values_are_inherited_correctly():
    """TestNamespacedConfigValuesAreInheritedCorrectly"""
    merged = merge_text("name: test\nruntime: dotnet\nconfig:\n  aws:region: us-west-1\n"
                        "  pulumi:disable-default-providers: [\"*\"]\n  instanceSize: t3.micro",
                        "config:\n  test:instanceSize: t4.large")
    assert merged == {"test:instanceSize": "t4.large", "aws:region": "us-west-1",
                      "pulumi:disable-default-providers": "[\"*\"]"}


def test_loading_stack_config_without_namespacing_the_project():
    """TestLoadingStackConfigWithoutNamespacingTheProject"""
    merged = merge_text("name: test\nruntime: dotnet\nconfig:\n  aws:region: us-west-1\n"
                        "  instanceSize: t3.micro", "config:\n  instanceSize: t4.large")
    assert merged == {"test:instanceSize": "t4.large", "aws:region": "us-west-1"}


def test_untyped_project_config_values_are_not_validated():
    """TestUntypedProjectConfigValuesAreNotValidated"""
    merged = merge_text("name: test\nruntime: dotnet\nconfig:\n  instanceSize: t3.micro\n"
                        "  aws:region: us-west-1", "config:\n  instanceSize: 9999\n  aws:region: 42")
    assert merged == {"test:instanceSize": "9999", "aws:region": "42"}


def test_untyped_project_config_values_with_only_default_or_only_value():
    """TestUntypedProjectConfigValuesWithOnlyDefaultOrOnlyValue"""
    merged = merge_text("name: test\nruntime: dotnet\nconfig:\n  instanceSize:\n    default: t3.micro\n"
                        "  region:\n    value: us-west-1", "config:\n  aws:answer: 42")
    assert merged == {"test:instanceSize": "t3.micro", "test:region": "us-west-1", "aws:answer": "42"}


def test_untyped_project_config_object_values_passed_down_to_stack():
    """TestUntypedProjectConfigObjectValuesPassedDownToStack"""
    merged = merge_text("name: test\nruntime: dotnet\nconfig:\n  instanceSize:\n    value:\n"
                        "      hello: world\n  aws:config:\n    value:\n      region: us-west-1",
                        "config:\n  aws:whatever: 42")
    assert merged == {"test:instanceSize": '{"hello":"world"}', "aws:config": '{"region":"us-west-1"}',
                      "aws:whatever": "42"}


@pytest.mark.parametrize("project_yaml,stack_yaml,message", [
    # TestStackConfigErrorsWhenStackValueIsNotCorrectlyTyped
    ("name: test\nruntime: dotnet\nconfig:\n  values:\n    type: array\n    items:\n      type: string\n"
     "    default: [value]", "config:\n  test:values: someValue\n",
     "Stack 'dev' with configuration key 'values' must be of type 'array<string>'"),
    # TestStackConfigIntegerTypeIsCorrectlyValidated
    ("name: test\nruntime: dotnet\nconfig:\n  importantNumber:\n    type: integer\n",
     "config:\n  test:importantNumber: hello\n",
     "Stack 'dev' with configuration key 'importantNumber' must be of type 'integer'"),
    # TestStackConfigErrorsWhenMissingStackValueForConfigTypeWithNoDefault
    ("name: test\nruntime: dotnet\nconfig:\n  values:\n    type: array\n    items:\n      type: string",
     "", "Stack 'dev' is missing configuration value 'values'"),
    # TestStackConfigErrorsWhenMissingTwoStackValueForConfigTypeWithNoDefault
    ("name: test\nruntime: dotnet\nconfig:\n  another:\n    type: string\n  values:\n    type: array\n"
     "    items:\n      type: string", "", "Stack 'dev' is missing configuration values 'another' and 'values'"),
    # TestStackConfigErrorsWhenMissingMultipleStackValueForConfigTypeWithNoDefault
    ("name: test\nruntime: dotnet\nconfig:\n  hello:\n    type: integer\n  values:\n    type: array\n"
     "    items:\n      type: string\n  world:\n    type: string", "",
     "Stack 'dev' is missing configuration values 'hello', 'values' and 'world'"),
    # TestStackConfigSecretIsCorrectlyValidated (the plaintext half)
    ("name: test\nruntime: dotnet\nconfig:\n  importantNumber:\n    type: integer\n    secret: true\n",
     "config:\n  test:importantNumber: 20\n",
     "Stack 'dev' with configuration key 'importantNumber' must be encrypted as it's secret"),
])
def test_the_clis_refusals(project_yaml, stack_yaml, message):
    with pytest.raises(CliConfigError) as refused:
        merge_text(project_yaml, stack_yaml)
    assert str(refused.value) == message


def test_valid_values_pass():
    """TestStackConfigIntegerTypeIsCorrectlyValidated (valid half), StackConfigSecret (valid
    half), TestStackConfigDoesNotErrorWhenProjectHasNotDefinedConfig."""
    assert merge_text("name: test\nruntime: dotnet\nconfig:\n  importantNumber:\n    type: integer\n",
                      "config:\n  test:importantNumber: 20\n") == {"test:importantNumber": "20"}
    assert merge_text("name: test\nruntime: dotnet\nconfig:\n  importantNumber:\n    type: integer\n"
                      "    secret: true\n", "config:\n  test:importantNumber:\n    secure: MjA=\n")
    assert merge_text("name: test\nruntime: dotnet", "config:\n  hello: 21\n  world: 42")


@pytest.mark.parametrize("type_name,value,ok", [
    ("integer", "20", True), ("integer", "-3", True), ("integer", "2.5", False),
    ("integer", "0x10", False), ("boolean", "true", True), ("boolean", "True", False),
    ("boolean", "yes", False), ("string", "1.35", True),
])
def test_validate_config_value_as_the_cli_does(type_name, value, ok):
    assert pulumi_cli.value_has_type(type_name, None, value) is ok


def test_yaml_scalars_become_the_text_the_cli_stores():
    """object.MarshalString: numbers and bools their JSON text, lists JSON marked object; and
    yaml.v3's booleans (yes/on are strings there)."""
    data = read_yaml("a: 2\nb: true\nc: [x]\nd: yes\ne: '1.35'\nf: 1.35\n")
    values = {k: pulumi_cli.stack_value(v) for k, v in data.items()}
    assert values == {"a": StackValue("2"), "b": StackValue("true"),
                      "c": StackValue('["x"]', object=True), "d": StackValue("yes"),
                      "e": StackValue("1.35"), "f": StackValue("1.35")}


# --- the fake `pulumi` refuses what the real one refuses --------------------------------------

def _work_dir(tmp_path: Path, project_text: str) -> Path:
    work = tmp_path / "project"
    work.mkdir()
    (work / "Pulumi.yaml").write_text(project_text)
    shutil.copy(PROJECT_DIR / "Pulumi.dev.yaml", work / "Pulumi.dev.yaml")
    return work


@pytest.fixture
def fake_pulumi(tmp_path, monkeypatch):
    return fake_pulumi_cli.install(tmp_path, monkeypatch, {"selected": "dev", "stacks": {"dev": {
        "outputs": {}, "config": {}}}})


def test_the_fake_pulumi_runs_up_on_the_shipped_project(fake_pulumi, tmp_path):
    from pulumi import automation

    work = _work_dir(tmp_path, (PROJECT_DIR / "Pulumi.yaml").read_text())
    stack = automation.select_stack(stack_name="dev", work_dir=str(work))
    assert stack.up().summary.result == "succeeded"


def test_the_fake_pulumi_refuses_a_stack_missing_a_required_key(fake_pulumi, tmp_path):
    from pulumi import automation

    broken = read_yaml((PROJECT_DIR / "Pulumi.yaml").read_text())
    del broken["config"]["clusterName"]["default"]
    work = _work_dir(tmp_path, yaml.safe_dump(broken))
    stack = automation.select_stack(stack_name="dev", work_dir=str(work))
    with pytest.raises(automation.errors.CommandError) as refused:
        stack.up()
    assert "Stack 'dev' is missing configuration value 'clusterName'" in str(refused.value)


def test_the_fake_pulumi_type_checks_what_config_set_wrote(fake_pulumi, tmp_path):
    from pulumi import automation

    work = _work_dir(tmp_path, (PROJECT_DIR / "Pulumi.yaml").read_text())
    stack = automation.select_stack(stack_name="dev", work_dir=str(work))
    stack.set_config("eks-hybrid-lab:burstReplicas", automation.ConfigValue("many"))
    with pytest.raises(automation.errors.CommandError) as refused:
        stack.up()
    assert "configuration key 'burstReplicas' must be of type 'integer'" in str(refused.value)


def test_the_fake_pulumi_writes_the_event_requests_the_sdk_reads():
    """The fake encodes a preview's EventRequests itself (it does not import the SDK): the
    bytes must be the SDK's own messages, for lengths of one, two and three varint bytes."""
    from pulumi.runtime.proto import events_pb2

    for event in ({"cancelEvent": {}}, {"summaryEvent": {"x": "y" * 200}}, {"x": "é" * 9000}):
        text = json.dumps(event)
        wire = fake_pulumi_cli.event_request(event)
        assert wire == events_pb2.EventRequest(event=text).SerializeToString()
        assert events_pb2.EventRequest.FromString(wire).event == text


def test_the_fake_pulumi_reads_and_writes_json_as_the_json_module_does():
    """The fake's json (made from the C scanner and encoder, to start without re) must write
    the json module's bytes and read back what it reads, refusing what it refuses."""
    values = [{"a": [1, 2.5, None, True, False, "é☃\n\"\\x"], "b": {"c": {}}, "d": []},
              "text", 3, -0.0, 1e100, 12345678901234567890, [float("inf"), float("-inf")]]
    for value in values:
        assert fake_pulumi_cli.json.dumps(value) == json.dumps(value)
        assert fake_pulumi_cli.json.loads(json.dumps(value)) == value
    for text in (' {"a": 1}\n', json.dumps(values[0], indent=2), "NaN"):
        assert repr(fake_pulumi_cli.json.loads(text)) == repr(json.loads(text))
    for bad in ("", '{"a": 1} x', "{", "[1,]"):
        with pytest.raises(ValueError):
            json.loads(bad)
        with pytest.raises(ValueError):
            fake_pulumi_cli.json.loads(bad)
    with pytest.raises(TypeError):
        fake_pulumi_cli.json.dumps({"a": object()})


def test_the_fake_pulumi_streams_its_events_to_the_sdk_s_own_event_server():
    """The fake speaks gRPC over HTTP/2 by hand (it does not import grpcio): the Automation API's
    own event server must get every event, in order, also for a stream beyond the first
    flow-control windows (64 KiB) and a frame (16 KiB); a server that is gone or answers with a
    failed status fails the call."""
    from pulumi import automation

    steps = fake_pulumi_cli.program_steps("dev", {}, {fake_pulumi_cli.SCENARIO_KEY: "C"})
    events = fake_pulumi_cli._events("dev", steps)
    big = [{"sequence": 100 + i, "timestamp": 0, "diagnosticEvent": {
        "message": "é" * 9000, "color": "never", "severity": "info"}} for i in range(12)]
    for sent in (events, events + big):
        received = []
        target, *_, server = automation.Stack._setup_event_log(None, "preview", received.append, "3.210.0")
        try:
            fake_pulumi_cli._send_events(target, sent)
        finally:
            server.stop(None)
        assert [e.sequence for e in received] == [e["sequence"] for e in sent]
        assert [e.resource_pre_event.metadata.urn for e in received if e.resource_pre_event][1:] == \
            [step["urn"] for step in steps]
    summary = [e.summary_event for e in received if e.summary_event]
    assert summary[0].resource_changes == fake_pulumi_cli._change_summary(steps)
    assert [e.diagnostic_event.message for e in received if e.diagnostic_event] == ["é" * 9000] * 12
    with pytest.raises(OSError):
        fake_pulumi_cli._send_events(target, events)

    import grpc
    from concurrent import futures

    def refuse(requests, context):
        list(requests)
        context.abort(grpc.StatusCode.INTERNAL, "refused")

    refusing = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    refusing.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "pulumirpc.Events", {"StreamEvents": grpc.stream_unary_rpc_method_handler(refuse)})])
    port = refusing.add_insecure_port("127.0.0.1:0")
    refusing.start()
    try:
        with pytest.raises(ConnectionError, match="without a response"):
            fake_pulumi_cli._send_events(f"tcp://127.0.0.1:{port}", events)
    finally:
        refusing.stop(None)
