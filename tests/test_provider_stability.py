"""A dynamic resource's provider code is pickled into its inputs (``__provider``), and the
cleanups treat a changed provider as an update, so that a fix reaches stacks whose inputs stay
the same. Every `pulumi preview` is a new process with a new hash seed: if the pickle depended
on it (a set's order does), every preview of an unchanged stack would show every cleanup as
changed. Each `pulumi up` here is stood in for by a fresh interpreter with its own seed."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dill

from offline.runner import Secret
from tests.conftest import PROJECT_DIR

_PROGRAM = """
import hashlib, importlib, json, pkgutil, sys
sys.path.insert(0, {project!r})
import pulumi.dynamic
from pulumi.dynamic.dynamic import serialize_provider
import components.cleanup, components.expiry, components.propagation
for module in pkgutil.iter_modules(components.cleanup.__path__):
    importlib.import_module("components.cleanup." + module.name)

def providers(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from providers(sub)

# In the order asked for: pickling one class must not change how another pickles (the lab
# registers them in no fixed order).
every = sorted(set(providers(pulumi.dynamic.ResourceProvider)), key=lambda c: c.__name__)
if sys.argv[1:] == ["reversed"]:
    every.reverse()
print(json.dumps({{cls.__name__: hashlib.sha256(serialize_provider(cls()).encode()).hexdigest()
                  for cls in every}}))
"""


def provider_digests(seeds: list[str], project: Path = PROJECT_DIR,
                     **env: str) -> list[dict[str, str]]:
    """Each dynamic provider class of the lab, pickled the way Pulumi stores it, in one fresh
    interpreter per seed."""
    script = _PROGRAM.format(project=str(project))
    # Every other process pickles the classes in the reverse order.
    processes = [subprocess.Popen(
        [sys.executable, "-c", script, *(["reversed"] if i % 2 else [])], cwd=project, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PULUMI_"))},
             "PYTHONHASHSEED": seed, **env}) for i, seed in enumerate(seeds)]
    found = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        found.append(json.loads(out))
    return found


def test_every_dynamic_provider_pickles_the_same_in_every_process(lab):
    first, second = provider_digests(["1", "2"])
    # Every dynamic resource the lab registers (GPU on, scenario C: all of them) is covered.
    run = lab(gpuEnabled=True, burstScenario="C")
    registered = {type(dill.loads(base64.b64decode(_plain(r.inputs["__provider"])))).__name__
                  for r in run.registrations if r.type.startswith("pulumi-python:dynamic")}
    assert registered and registered <= set(first), registered - set(first)
    changed = sorted(name for name in first if first[name] != second.get(name))
    assert changed == [], f"these providers pickle differently per process: {changed}"


def _plain(value):
    return value.value if isinstance(value, Secret) else value


def test_every_dynamic_provider_pickles_the_same_from_source_and_from_bytecode(tmp_path):
    """After a fresh checkout the modules are compiled from source; later runs load their
    ``.pyc`` files, each written by whichever process imported the module first (the first
    preview, a test worker). The pickle must not tell the two apart: it showed which strings
    are one object, and the names of comprehensions are one object across modules only when
    compiled in the same process (components/cleanup/self_contained.py)."""
    project = tmp_path / "project"
    shutil.copytree(PROJECT_DIR / "components", project / "components",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    from_source, _ = provider_digests(["1", "1"], project, **env)
    # Each module's bytecode written by a process of its own, as separate processes leave it.
    for module in sorted((project / "components").rglob("*.py")):
        subprocess.run([sys.executable, "-c", f"import py_compile; py_compile.compile({str(module)!r}, doraise=True)"],
                       check=True, timeout=60)
    assert list((project / "components" / "cleanup" / "__pycache__").glob("*.pyc"))
    from_bytecode, _ = provider_digests(["1", "1"], project, **env)
    changed = sorted(name for name in from_source if from_source[name] != from_bytecode.get(name))
    assert changed == [], f"these providers pickle differently from bytecode: {changed}"
