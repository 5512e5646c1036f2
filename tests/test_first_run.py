"""What a newcomer meets first on a fresh clone: the command lines (no option prefixes, a bare
`python -m rehearse` that lists its commands), an ``--outputs`` file that lacks an output, the
one resource count, and a misspelt ``aws:`` key."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import json
import re
from pathlib import Path

import pytest

from offline.plan import render
from rehearse import cli
from rehearse.lab import outputs
from rehearse.run.errors import RunError
from offline.runner import run_program
from stacks.config import ConfigError, aws_provider_keys, unknown_provider_keys
from tests.conftest import PROJECT_DIR, lab_config, run_lab

# --- every parser refuses an option prefix -----------------------------------------------------


def _script(relative: str):
    """A script that is no package's module, loaded from its file."""
    spec = importlib.util.spec_from_file_location(Path(relative).stem, PROJECT_DIR / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _main_of(name):
    return lambda argv: importlib.import_module(name).main(argv)


#: Each file that makes an ArgumentParser, and how to make its parsers (``--help`` stops each
#: main right after parsing, before it does anything).
PARSER_MAKERS = {
    "rehearse/cli.py": lambda argv: cli.build_parser().parse_args(argv),
    "offline/plan.py": _main_of("offline.plan"),
    "offline/chart_render.py": _main_of("offline.chart_render"),
    "ops/preflight/cli.py": _main_of("ops.preflight.cli"),
    "ops/leftovers/cli.py": _main_of("ops.leftovers.cli"),
    "benchmarks/bench.py": lambda argv: _script("benchmarks/bench.py").main(argv),
    "engines/build.py": lambda argv: _script("engines/build.py").main(argv),
}


def _files_making_parsers() -> set[str]:
    found = set()
    for path in PROJECT_DIR.rglob("*.py"):
        relative = path.relative_to(PROJECT_DIR)
        if relative.parts[0] in ("tests", "venv", ".venv") or relative.parts[0].startswith("."):
            continue
        # A call or a subclass: either makes parsers.
        if re.search(r"ArgumentParser\(|class \w+\((?:argparse\.)?ArgumentParser\)",
                     path.read_text()):
            found.add(relative.as_posix())
    return found


def test_every_parser_in_the_repository_is_covered_here():
    assert _files_making_parsers() == set(PARSER_MAKERS)


def _parsers_made_by(make, monkeypatch) -> list[argparse.ArgumentParser]:
    made = []
    init = argparse.ArgumentParser.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(argparse.ArgumentParser, "__init__", recording)
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit) as done:
        make(["--help"])
    assert done.value.code == 0
    return made


@pytest.mark.parametrize("source", sorted(PARSER_MAKERS))
def test_every_parser_refuses_an_option_prefix(source, monkeypatch):
    parsers = _parsers_made_by(PARSER_MAKERS[source], monkeypatch)
    assert parsers
    for parser in parsers:
        options = [o for o in parser._option_string_actions if o.startswith("--")]
        assert options, parser.prog
        for option in options:
            prefix = option[:-1]
            if prefix in parser._option_string_actions or len(prefix) < 3:
                continue
            # argparse's own lookup: a prefix it takes for the option comes back with its action.
            action = parser._parse_optional(prefix)[0]
            assert action is None, f"{parser.prog} takes {prefix} for {option}"


def test_rehearse_subcommands_refuse_a_prefix_of_outputs(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["predict", "--replicas", "3", "--out", str(tmp_path / "x.json")])
    assert done.value.code == 2
    assert "python -m rehearse predict: error: no option --out;" in capsys.readouterr().err


# --- a bare `python -m rehearse` -------------------------------------------------------------------


def _readme_rehearsal_order() -> list[str]:
    """The commands of the README's rehearsal, in its order (its "Rehearse" block)."""
    section = (PROJECT_DIR / "README.md").read_text().split("\n## Rehearse\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    order = []
    for line in block.splitlines():
        words = line.split("#", 1)[0].split()
        if words[:3] == ["python", "-m", "rehearse"]:
            command = words[3] + (f" {words[4]}" if words[3] == "verify" else "")
            order.append(command)
    return order


def _commands_of_the_parser() -> set[str]:
    parser = cli.build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found = set()
    for name, child in sub.choices.items():
        nested = [a for a in child._actions if isinstance(a, argparse._SubParsersAction)]
        found |= {f"{name} {target}" for target in nested[0].choices} if nested else {name}
    return found


def test_a_bare_rehearse_lists_every_command_in_the_order_of_a_rehearsal(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "the following arguments are required" not in err
    listed = err.split("in the order of a rehearsal:\n", 1)[1].splitlines()
    rows = [re.fullmatch(r"  (\S+(?: \S+)?)  +(\S.*)", line) for line in listed]
    commands = [row.group(1) for row in rows if row]
    assert commands == _readme_rehearsal_order()
    assert set(commands) == _commands_of_the_parser()
    assert all(row.group(2) for row in rows if row)


# --- an --outputs file that lacks an output --------------------------------------------------------


def test_an_outputs_file_without_an_output_names_the_file_and_how_to_write_it(tmp_path, capsys):
    empty = tmp_path / "empty-outputs.json"
    empty.write_text("{}")
    assert cli.main(["failover", "--outputs", str(empty), "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: the outputs file {empty} has no outputs region, kubeconfig, "
                   "gatewayNamespace, gatewayLeaseName, gatewayRouteTableIds, hybridPodCidr, demo1 "
                   "(from the cluster, demo, gateway and network layers), which failover reads: "
                   "write it from a stack that has them with `pulumi stack output --json "
                   f"--show-secrets > {empty}`")
    assert not (tmp_path / "runs").exists()


def test_an_outputs_file_without_a_layer_names_the_file(tmp_path):
    path = tmp_path / "lab.json"
    path.write_text(json.dumps({"layers": ["network"]}))
    with pytest.raises(RunError, match=re.escape(f"the outputs file {path} records no demo layer")):
        outputs.from_file(path).require_layer("demo", "demo 1's probers")
    # Read through the Automation API, the outputs are a stack's, and said so.
    with pytest.raises(RunError, match="the stack dev has no output region: build the network"):
        outputs.StackOutputs("dev", {}).get("region")


# --- one resource count ----------------------------------------------------------------------------


def test_the_resource_count_says_what_it_counts(dev_run):
    counts = dev_run.counts()
    custom = [r for r in dev_run.registrations if r.custom]
    assert counts.resources == len(custom)
    # The lab's two explicit providers: the stack's AWS provider and the cluster's Kubernetes one.
    assert {r.name for r in custom if r.type.startswith("pulumi:providers:")} == {"aws",
                                                                                  "cluster-k8s"}
    assert counts.providers == 2
    assert counts.components == sum(1 for r in dev_run.registrations if not r.custom)
    # The plan's first line prints it (tests/test_plan.py, the dev plan).


def test_no_document_copies_a_resource_count_that_can_drift(dev_run):
    """The README and docs quote no count but the plan's own (the plan and the benchmark print
    it); the benchmark reads the same function."""
    for document in [PROJECT_DIR / "README.md", *sorted((PROJECT_DIR / "docs").glob("*.md"))]:
        for number in re.findall(r"(\d+) resources\b", document.read_text()):
            assert int(number) == dev_run.counts().resources, f"{document.name}: {number}"
    bench = (PROJECT_DIR / "benchmarks" / "bench.py").read_text()
    assert "counts = run.counts()" in bench and "counts.describe()" in bench
    assert "len(run.resources())" not in bench


# --- an aws: key the AWS provider does not read ------------------------------------------------------


def test_the_aws_provider_keys_are_read_from_the_installed_provider():
    # Keys its pulumi_aws/config/vars.py asks pulumi.Config('aws') for.
    assert {"region", "profile", "defaultTags", "skipCredentialsValidation",
            "maxRetries"} <= aws_provider_keys()


def test_a_misspelt_aws_key_is_warned_about_naming_the_nearest():
    assert unknown_provider_keys(["aws:regon", "aws:region", "aws:defaultTags",
                                  "kubernetes:context", "eks-hybrid-lab:clusterName"]) == [
        "aws:regon is not a setting of the AWS provider (pulumi_aws/config/vars.py lists those "
        "it reads), so it is ignored; did you mean aws:region?"]


#: A misspelt aws: key and another provider's key in one config: neither may be refused, and
#: the misspelling alone is warned about (one run serves the tests of both).
UNJUDGED = {"aws:regon": "ap-northeast-1", "kubernetes:context": "elsewhere"}


def test_the_program_warns_about_a_misspelt_aws_key_in_the_plan():
    run = run_lab(**UNJUDGED)
    [warning] = [w for w in run.warnings if "aws:regon" in w]
    assert "did you mean aws:region?" in warning
    out = io.StringIO()
    render(run, out)
    assert f"  ! {warning}" in out.getvalue().split("\nWarnings\n", 1)[1]


# --- an aws: setting the lab's explicit provider would not apply ----------------------------------


def test_an_aws_setting_the_lab_cannot_pass_on_is_refused_before_anything_registers():
    """The lab's AWS provider is explicit, so it reads no aws: config but what it is given: the
    region and the account settings (tests/test_accounts.py). Another setting would be ignored
    without a word, so it is refused, saying why and what to do instead."""
    with pytest.raises(ConfigError) as caught:
        run_program(lab_config(**{"aws:sharedCredentialsFiles": '["/elsewhere/credentials"]'}))
    [found] = caught.value.violations
    assert found.key == "aws:sharedCredentialsFiles" and "/elsewhere" not in str(caught.value)
    assert "export AWS_SHARED_CREDENTIALS_FILE" in found.rule and "not applied" in found.rule
    assert caught.value.registrations == []


def test_a_credential_setting_is_refused_without_printing_its_value():
    with pytest.raises(ConfigError) as caught:
        run_program(lab_config(**{"aws:secretKey": "wJalrXUtnFEMI/K7MDENG", "aws:maxRetries": "5",
                                  "aws:httpsProxy": "http://alice:S3cretPw@proxy:3128"}))
    assert sorted(v.key for v in caught.value.violations) == [
        "aws:httpsProxy", "aws:maxRetries", "aws:secretKey"]
    assert "wJalrXUtnFEMI" not in str(caught.value) and "S3cretPw" not in str(caught.value)
    [secret_key] = [v for v in caught.value.violations if v.key == "aws:secretKey"]
    assert "set aws:profile" in secret_key.rule


def test_the_region_and_other_namespaces_are_not_judged_and_an_unknown_aws_key_is_only_warned():
    # aws:region is what the provider is given; kubernetes: keys are that provider's to judge;
    # aws:regon is not an AWS setting at all (warned, see above), so it is not refused.
    run = run_lab(**UNJUDGED)
    assert run.registrations
    assert not [w for w in run.warnings if "kubernetes:context" in w]


def test_the_plan_refuses_a_stack_file_with_static_keys(tmp_path, capsys):
    from offline import plan

    stack_file = tmp_path / "Pulumi.other.yaml"
    stack_file.write_text("config:\n  aws:region: ap-northeast-2\n  aws:accessKey: AKIAEXAMPLEKEY\n")
    assert plan.main(["--stack-file", str(stack_file)]) == 1
    err = capsys.readouterr().err
    assert "aws:accessKey" in err and "AKIAEXAMPLEKEY" not in err and "aws:profile" in err
