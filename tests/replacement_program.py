"""A Pulumi program of ``pulumi.dynamic`` resources laid out as a graph spec says, the one program
that both the real engine (tests/test_real_pulumi_replacement.py) and tests/replacement.py's port
(run offline with ``offline.runner.run_program``) are given, so the two answer for the same
registrations: the same dependencies, property dependencies, options and the same provider
``diff`` code (the port unpickles each resource's ``__provider`` as the dynamic provider host does).

The spec is JSON in the config key ``diff:spec``: a list of resources, in registration order,
each ``{"name", "props", "replace_keys", "replace_if", "provider_dbr", "unknown_diff",
"depends_on", "delete_before_replace", "replace_on_changes", "ignore_changes", "deleted_with",
"retain_on_delete"}``. A prop is a literal, ``{"ref": <name>, "out": <output>}`` or
``{"join": [part, ...]}`` (a string made of literals and refs), so what flows from which
resource is a property dependency, as in the lab. The provider stands in for one the lab has:
``replace_keys`` are the inputs whose change replaces (ForceNew, a cleanup's replace keys),
``replace_if`` an input that replaces only when another is truthy (``userData`` under
``userDataReplaceOnChange``), ``provider_dbr`` a diff asking for delete-before-replace,
``unknown_diff`` a provider without a diff of its own (DIFF_UNKNOWN: the engine diffs the inputs),
``quiet_keys`` inputs its diff does not look at (as a cleanup's diff looks at named keys only).
Every create gets a new id and ``serial``, as a real re-created resource does.
"""

PROGRAM = r'''
import json, uuid
import pulumi
import pulumi.dynamic as dyn

OUTPUT_ONLY = ("serial",)

class Stand(dyn.ResourceProvider):
    def __init__(self, replace_keys, replace_if, provider_dbr, unknown_diff, quiet_keys):
        self.quiet_keys = list(quiet_keys)
        self.replace_keys = list(replace_keys)
        self.replace_if = dict(replace_if)
        self.provider_dbr = provider_dbr
        self.unknown_diff = unknown_diff

    def new_token(self):
        # A new serial per create, as a re-created resource gets new ids; the offline cloud
        # sets this to a function of the name so its runs repeat (offline/fake_cloud.py).
        return uuid.uuid4().hex[:12]

    def create(self, props):
        serial = self.new_token()
        return dyn.CreateResult(id_=f"{props['label']}-{serial}", outs={**props, "serial": serial})

    def diff(self, _id, olds, news):
        keys = (set(olds) | set(news)) - {"__provider", *OUTPUT_ONLY, *self.quiet_keys}
        changed = sorted(k for k in keys if olds.get(k) != news.get(k))
        if self.unknown_diff:
            return dyn.DiffResult(changes=None)
        replaces = [k for k in changed if k in self.replace_keys or
                    (k in self.replace_if and news.get(self.replace_if[k]))]
        return dyn.DiffResult(changes=bool(changed), replaces=replaces,
                              delete_before_replace=self.provider_dbr)

    def update(self, _id, olds, news):
        return dyn.UpdateResult(outs={**news, "serial": olds["serial"]})

    def delete(self, _id, _props):
        return None


class Node(dyn.Resource):
    serial: pulumi.Output[str]

    def __init__(self, name, spec, props, opts):
        provider = Stand(spec.get("replace_keys", ()), spec.get("replace_if", {}),
                         spec.get("provider_dbr", False), spec.get("unknown_diff", False),
                         spec.get("quiet_keys", ()))
        super().__init__(provider, name, {**props, "serial": None}, opts)


made = {}

def value(prop):
    if isinstance(prop, dict) and "ref" in prop:
        node = made[prop["ref"]]
        return node.id if prop.get("out", "id") == "id" else getattr(node, prop["out"])
    if isinstance(prop, dict) and "join" in prop:
        return pulumi.Output.concat(*[value(p) for p in prop["join"]])
    return prop

for spec in json.loads(pulumi.Config("diff").require("spec")):
    opts = pulumi.ResourceOptions(
        depends_on=[made[d] for d in spec.get("depends_on", ())],
        delete_before_replace=spec.get("delete_before_replace"),
        replace_on_changes=spec.get("replace_on_changes"),
        ignore_changes=spec.get("ignore_changes"),
        deleted_with=made[spec["deleted_with"]] if spec.get("deleted_with") else None,
        retain_on_delete=spec.get("retain_on_delete"))
    props = {"label": spec["name"], **{k: value(v) for k, v in spec.get("props", {}).items()}}
    made[spec["name"]] = Node(spec["name"], spec, props, opts)
'''
