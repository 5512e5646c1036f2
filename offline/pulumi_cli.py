"""The Pulumi CLI's own checks of a project and a stack's config, ported so that what the CLI
refuses is refused here too — by the offline plan, the tests and the fake ``pulumi`` the
rehearsal tests drive.

The CLI runs these before ``pulumi preview`` and ``pulumi up`` start the program (and so does
the Automation API, which shells out to the CLI); a stack the CLI refuses never reaches our own
validation in ``stacks/config.py``. Ported from pulumi/pulumi (see ``docs/pulumi-cli.md``):

- ``Project.Validate`` (``sdk/go/common/workspace/project.go``): a key may not declare both
  ``default`` and ``value``; a project key typed ``array`` needs ``items``; a project key's
  ``default`` must be of its declared type (``ValidateConfigValue``); a key of another
  namespace may not declare a ``type`` or a ``default`` and must give a ``value``.
- ``mergeConfig(..., validate=true)`` (``pkg/workspace/config.go``, called from
  ``pkg/cmd/pulumi/operations/up.go`` and ``preview.go`` unless ``--skip-config-validation``):
  keys are visited in sorted order; a project-namespace key with neither ``default`` nor
  ``value`` that the stack does not set is *missing* (all missing keys are reported together,
  after the loop); a key the stack does not set gets its default (or value); a key the stack
  sets is checked, if explicitly typed, by ``validateStackConfigValue``: ``secret: true``
  needs an encrypted stack value, and the value must be of the declared type — the first
  such error stops the command.
- ``ValidateConfigValue``: ``string`` takes any scalar (a YAML ``2`` is the text ``"2"``);
  ``integer`` takes a whole number or text ``strconv.Atoi`` parses; ``boolean`` takes a bool or
  exactly the text ``true``/``false``; ``array`` takes a list whose items pass ``items``.
- How a stack-file value becomes a config value (``sdk/go/common/resource/config/object.go``,
  ``MarshalString``): a string stays itself, a bool or number becomes its JSON text (not an
  object), a list or map becomes JSON text marked *object*, ``{secure: …}`` is a secret.

Not ported: ESC environments (the lab uses none), and YAML 1.1 scalars that PyYAML reads
differently from Go's yaml.v3 (``yes``/``no``/``on``/``off`` are booleans to PyYAML, strings to
yaml.v3): ``load_stack_file`` reads only ``true``/``false`` spellings as booleans, as yaml.v3 does.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml


class CliConfigError(ValueError):
    """What the CLI prints before it refuses to run the program (its own words); ``key`` is
    the configuration key whose value has the wrong type, when that is what it refuses."""

    def __init__(self, message: str, key: Optional[str] = None):
        super().__init__(message)
        self.key = key


class StackFileError(ValueError):
    """A stack or project file that is not YAML at all: one line, the file and where."""


def _one_line(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = " ".join(str(part) for part in (getattr(error, "context", None),
                                           getattr(error, "problem", None)) if part)
    return where + (what or str(error).splitlines()[0])


@dataclass(frozen=True)
class StackValue:
    """One config value as the CLI holds it (``config.Value``): its text, whether it is a
    secret (ciphertext), and whether the text is JSON of a list or map."""

    text: str
    secure: bool = False
    object: bool = False

    def content(self) -> Any:
        """What ``validateStackConfigValue`` checks: the text, or the JSON it holds."""
        return json.loads(self.text) if self.object else self.text


class _GoYamlLoader(yaml.SafeLoader):
    """PyYAML with yaml.v3's booleans: only true/True/TRUE and false/False/FALSE."""


_GoYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _first in "tTfF":
    _GoYamlLoader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), [_first])


def read_yaml(text: str, source: str = "") -> Any:
    """YAML the way the CLI's yaml.v3 reads the scalars that matter here; ``StackFileError``
    (naming ``source``) when it is not YAML."""
    try:
        return yaml.load(text, Loader=_GoYamlLoader)
    except yaml.YAMLError as error:
        raise StackFileError(f"{source or 'YAML'} (not valid YAML: {_one_line(error)})") from None


def stack_value(raw: Any) -> StackValue:
    """A stack-file value as the CLI stores it (``object.MarshalString``)."""
    if isinstance(raw, dict) and len(raw) == 1 and isinstance(raw.get("secure"), str):
        return StackValue(raw["secure"], secure=True)
    if isinstance(raw, bool):
        return StackValue("true" if raw else "false")
    if isinstance(raw, (int, float)):
        return StackValue(json.dumps(raw))
    if isinstance(raw, str):
        return StackValue(raw)
    if raw is None:
        return StackValue("")
    secure = "secure" in json.dumps(raw)  # a nested {secure: …} makes the whole value secret
    return StackValue(json.dumps(raw, separators=(",", ":")), secure=secure, object=True)


def project_default_value(raw: Any) -> StackValue:
    """A project ``default``/``value`` as ``createConfigValue`` turns it into a config value:
    a string, int or bool is formatted with ``%v``; anything else is JSON, an object."""
    if isinstance(raw, bool):
        return StackValue("true" if raw else "false")
    if isinstance(raw, (str, int)):
        return StackValue(str(raw))
    return StackValue(json.dumps(raw, separators=(",", ":")), object=True)


def _namespaced_by_project(project_name: str, key: str) -> bool:
    return ":" not in key or key.startswith(project_name + ":")


def _full_key(project_name: str, key: str) -> str:
    return key if ":" in key else f"{project_name}:{key}"


def value_has_type(type_name: str, items: Optional[Mapping[str, Any]], value: Any) -> bool:
    """``workspace.ValidateConfigValue``."""
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        if isinstance(value, bool):  # Go's bool is not an int
            return False
        if isinstance(value, int):
            return True
        if isinstance(value, float):
            return value == math.trunc(value)
        if isinstance(value, str):
            # strconv.Atoi: an optional sign, then decimal digits only.
            return re.fullmatch(r"[+-]?[0-9]+", value) is not None
        return False
    if type_name == "boolean":
        return value in ("true", "false") if isinstance(value, str) else isinstance(value, bool)
    if type_name == "object":
        return isinstance(value, dict)
    if not isinstance(value, list) or items is None:
        return False
    return all(value_has_type(items.get("type", ""), items.get("items"), item) for item in value)


def full_type_name(type_name: str, items: Optional[Mapping[str, Any]]) -> str:
    """``workspace.InferFullTypeName``: ``array<string>`` and so on."""
    if items is not None:
        return f"array<{full_type_name(items.get('type', ''), items.get('items'))}>"
    return type_name


def _declaration(entry: Any, project_name: str, key: str) -> dict:
    """``RewriteShorthandConfigValues``: a bare scalar or list is a default for a project key
    and a value for another namespace's."""
    if isinstance(entry, dict):
        return entry
    return {"default" if _namespaced_by_project(project_name, key) else "value": entry}


def project_errors(project: Mapping[str, Any]) -> list[str]:
    """``Project.Validate`` over the config declarations (the CLI stops at the first)."""
    name = project.get("name")
    if not isinstance(name, str) or not name:
        return ["project is missing a 'name' attribute"]
    problems = []
    for key, entry in (project.get("config") or {}).items():
        decl = _declaration(entry, name, key)
        has_default, has_value = decl.get("default") is not None, decl.get("value") is not None
        if has_default and has_value:
            problems.append(f"project config '{key}' cannot have both a 'default' and 'value' attribute")
        typed = decl.get("type") is not None
        if _namespaced_by_project(name, key):
            if typed and decl["type"] == "array" and decl.get("items") is None:
                problems.append(f"The configuration key '{key}' declares an array but does not "
                                "specify the underlying type via the 'items' attribute")
            elif typed and has_default and not value_has_type(decl["type"], decl.get("items"),
                                                              decl["default"]):
                problems.append(f"The default value specified for configuration key '{key}' is not "
                                f"of the expected type '{full_type_name(decl['type'], decl.get('items'))}'")
        elif typed:
            problems.append(f"Configuration key '{key}' is not namespaced by the project and "
                            "should not define a type")
        elif has_default:
            problems.append(f"Configuration key '{key}' is not namespaced by the project and should "
                            "not define a default value. Did you mean to use the 'value' attribute "
                            "instead of 'default'?")
        elif not has_value:
            problems.append(f"Configuration key '{key}' is namespaced and must provide an attribute 'value'")
    return problems


def _missing_error(stack: str, keys: list[str]) -> str:
    """``missingStackConfigurationKeysError`` with ``formatMissingKeys``."""
    if len(keys) == 1:
        return f"Stack '{stack}' is missing configuration value '{keys[0]}'"
    keys = sorted(keys)
    listed = "".join(f"'{k}', " for k in keys[:-2]) + f"'{keys[-2]}' and '{keys[-1]}'"
    return f"Stack '{stack}' is missing configuration values {listed}"


def merge_config(stack: str, project: Mapping[str, Any],
                 stack_config: Mapping[str, StackValue]) -> dict[str, StackValue]:
    """``mergeConfig(validate=true)``: the config the program is started with — the stack's
    values with the project's defaults applied — or ``CliConfigError`` with the CLI's message.
    ``stack_config`` is keyed by full key (``eks-hybrid-lab:upToLayer``, ``aws:region``)."""
    problems = project_errors(project)
    if problems:
        raise CliConfigError(problems[0])
    name = project["name"]
    merged = dict(stack_config)
    missing: list[str] = []
    declared = project.get("config") or {}
    for key in sorted(declared):
        decl = _declaration(declared[key], name, key)
        full = _full_key(name, key)
        has_default, has_value = decl.get("default") is not None, decl.get("value") is not None
        found = full in merged
        if not found and not has_value and not has_default and full.split(":", 1)[0] == name:
            missing.append(key)
            continue
        if not found and (has_value or has_default):
            merged[full] = project_default_value(decl["default"] if has_default else decl["value"])
            continue
        if found and decl.get("type") is not None:
            value = merged[full]
            if decl.get("secret") and not value.secure:
                raise CliConfigError(f"Stack '{stack}' with configuration key '{key}' must be "
                                     "encrypted as it's secret")
            # A secret's plaintext is what the CLI checks; offline we have only its ciphertext,
            # which is text: a typed secret of another type cannot be checked here.
            if not value.secure and not value_has_type(decl["type"], decl.get("items"),
                                                       value.content()):
                raise CliConfigError(
                    f"Stack '{stack}' with configuration key '{key}' must be of type "
                    f"'{full_type_name(decl['type'], decl.get('items'))}'", key=full)
    if missing:
        raise CliConfigError(_missing_error(stack, missing))
    return merged


def load_project(project_dir: Path) -> dict:
    return read_yaml((Path(project_dir) / "Pulumi.yaml").read_text(), "Pulumi.yaml") or {}


def load_stack_file(path: Path, project_name: str) -> dict[str, StackValue]:
    """The ``config:`` of a stack file, keyed by full key, as ``LoadProjectStack`` reads it:
    a key without a namespace belongs to the project."""
    data = read_yaml(Path(path).read_text(), f"{Path(path).name}: not a Pulumi stack file") or {}
    if not isinstance(data, dict):
        raise CliConfigError(f"{Path(path).name}: not a Pulumi stack file (a YAML map with config:)")
    values = data.get("config") or {}
    if not isinstance(values, dict):
        raise CliConfigError(f"{Path(path).name}: config: must be a map of keys to values")
    result = {}
    for key, raw in values.items():
        key = str(key)
        # config.ParseKey: <namespace>:<name>, or the old <namespace>:config:<name>.
        if key.count(":") == 2 and key.split(":")[1] == "config":
            key = key.replace(":config:", ":", 1)
        elif ":" not in key:
            key = f"{project_name}:{key}"
        if key.count(":") != 1:
            raise CliConfigError(
                f"{Path(path).name}: could not parse {key} as a configuration key (configuration "
                "keys should be of the form `<namespace>:<name>`)")
        result[key] = stack_value(raw)
    return result


def written_values(path: Path, project_name: str) -> dict[str, str]:
    """Each config value of a stack file as its text there (``"20"`` quoted, ``20`` not), keyed
    as ``load_stack_file`` keys it, for messages that show a value as the user wrote it. A
    value written over several lines is left out (it does not fit a one-line message)."""
    text = Path(path).read_text()
    try:
        root = yaml.compose(text, Loader=_GoYamlLoader)
    except yaml.YAMLError:
        return {}
    if not isinstance(root, yaml.MappingNode):
        return {}
    config = next((v for k, v in root.value if k.value == "config"), None)
    if not isinstance(config, yaml.MappingNode):
        return {}
    found = {}
    for key_node, value_node in config.value:
        key = str(key_node.value)
        if key.count(":") == 2 and key.split(":")[1] == "config":
            key = key.replace(":config:", ":", 1)
        elif ":" not in key:
            key = f"{project_name}:{key}"
        source = text[value_node.start_mark.index:value_node.end_mark.index].strip()
        if source and "\n" not in source:
            found[key] = source
    return found


#: How a value of each YAML type is named, and what to write instead, for a value whose type
#: the CLI refuses.
_YAML_TYPES = ((bool, "a boolean"), (int, "a number"), (float, "a number"), (str, "a string"),
               (list, "a list"), (dict, "a map"), (type(None), "empty"))
_INSTEAD = {"integer": "a whole number such as 2", "boolean": "true or false",
            "string": "text", "array": "a list such as []"}


def wrong_type(key: str, written: str, type_name: str) -> str:
    """``hybridNodeCount: "two" is a string; write a whole number such as 2``: the value as
    the file writes it, its YAML type, and what the declared type wants."""
    try:
        loaded = read_yaml(written)
    except StackFileError:
        loaded = written
    kind = next(name for cls, name in _YAML_TYPES if isinstance(loaded, cls)) \
        if isinstance(loaded, tuple(cls for cls, _ in _YAML_TYPES)) else "a value"
    instead = _INSTEAD.get(type_name.split("<")[0], f"a value of type '{type_name}'")
    return f"{key.split(':', 1)[-1]}: {written} is {kind}; write {instead}"


def program_config(merged: Mapping[str, StackValue]) -> dict[str, str]:
    """The strings the program is started with (``PULUMI_CONFIG``): each value's text."""
    return {key: value.text for key, value in merged.items()}
