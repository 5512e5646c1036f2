"""The stack's ``aws:`` settings: the account settings the lab passes on to every tool
(``aws:profile``, ``aws:allowedAccountIds``, ``aws:assumeRoles``: ``aws_account_settings``),
the ones it refuses because it cannot (``unapplied_provider_settings``), and the keys the AWS
provider does not know (``unknown_provider_keys``). ``load_config`` (stacks/config.py) judges
them with the lab's own settings, so every problem is reported at once.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from components.aws_account import AssumedRole, AwsAccount
from stacks.violation import ROLE_ARN, Violation

#: The one provider whose settings the lab's stack files set (``aws:region``, and the account
#: settings of ``HONOURED``).
AWS_NAMESPACE = "aws"


@functools.lru_cache(maxsize=1)
def aws_provider_keys() -> frozenset[str]:
    """The settings the installed AWS provider reads: the keys its own config module,
    ``pulumi_aws/config/vars.py``, asks ``pulumi.Config('aws')`` for. Read from the source,
    not imported, so nothing of the provider's runs."""
    spec = importlib.util.find_spec("pulumi_aws.config.vars")
    source = Path(spec.origin).read_text() if spec and spec.origin else ""
    return frozenset(re.findall(r"__config__\.get\w*\('([A-Za-z0-9]+)'\)", source))


#: The aws: settings the lab passes on by hand to its explicit provider and to every other tool
#: that calls AWS (components/aws_account.py), besides aws:region.
HONOURED = ("profile", "allowedAccountIds", "assumeRoles")

#: The command that pins a stack to its account. ``--type string``: with ``--path`` the CLI
#: stores a value that looks like an integer as a number (pulumi config set --help), and an
#: account id may start with 0.
PIN_COMMAND = "pulumi config set --path 'aws:allowedAccountIds[0]' {account} --type string"

#: Why each refused setting cannot be honoured, and what to do instead.
_CREDENTIAL_IN_STACK = ("a credential in the stack file would have to be copied into the "
                        "kubeconfig and the cleanups' outputs in the state; put it in a profile "
                        "(aws configure --profile <name>) and set aws:profile <name>")
_INSTEAD = {
    "accessKey": _CREDENTIAL_IN_STACK,
    "secretKey": _CREDENTIAL_IN_STACK,
    "token": _CREDENTIAL_IN_STACK,
    "sharedCredentialsFiles": "the kubeconfig's aws eks get-token and the lab's tools read the "
                              "files the environment names; export AWS_SHARED_CREDENTIALS_FILE "
                              "instead",
    "sharedConfigFiles": "the kubeconfig's aws eks get-token and the lab's tools read the files "
                         "the environment names; export AWS_CONFIG_FILE instead",
    "assumeRoleWithWebIdentity": "the kubeconfig's aws eks get-token cannot take it; use a "
                                 "profile with web_identity_token_file and role_arn and set "
                                 "aws:profile",
    "forbiddenAccountIds": "the lab's tools check only aws:allowedAccountIds; pin the account "
                           "the stack is for with it",
}


def unapplied_provider_settings(others: Mapping[str, Any]) -> list[Violation]:
    """The ``aws:`` settings the lab would silently not apply: every AWS setting but
    ``aws:region`` and the account settings of ``HONOURED``. The lab makes its AWS provider
    explicitly (stacks/layers: its region and the lab's default tag), and an explicit provider
    takes only its arguments, not the stack's ``aws:`` config
    (docs/pulumi-cli.md#an-explicit-provider-reads-no-stack-config): the lab passes on what it
    can pass on to every tool (``aws_account_settings``) and refuses the rest, with the reason
    and what to do instead. Keys the provider does not read at all are only warned about
    (``unknown_provider_keys``)."""

    known = aws_provider_keys()
    found = []
    for key in sorted(others):
        namespace, _, name = key.partition(":")
        name = name.split(".")[0]
        if namespace != AWS_NAMESPACE or name == "region" or name in HONOURED \
                or name not in known:
            continue
        instead = _INSTEAD.get(name, "the lab's provider sets only the region, its default tag "
                                     "and the account settings (aws:profile, "
                                     "aws:allowedAccountIds, aws:assumeRoles); leave it out")
        # Never the value: besides the credentials themselves, settings such as a proxy URL
        # with a password or a web identity token hold secrets, decrypted under pulumi up.
        found.append(Violation(
            key, "(set; value not shown)",
            f"is not applied: the lab's AWS provider is explicit and reads no aws: config, so "
            f"the lab passes on only aws:region, aws:profile, aws:allowedAccountIds and "
            f"aws:assumeRoles; {instead}"))
    return found


_ACCOUNT_ID = re.compile(r"\d{12}")
_SESSION_NAME = re.compile(r"[\w+=,.@-]{2,64}")
#: Why each field of an aws:assumeRoles item the lab does not pass on is refused: every tool
#: must act as the program does, and the kubeconfig's ``aws eks get-token`` takes only
#: ``--role-arn``.
_ROLE_FIELDS_REFUSED = {
    "externalId": "aws eks get-token (the kubeconfig) cannot pass an external id, so kubectl "
                  "and the Kubernetes provider could not assume the role",
    "policy": "aws eks get-token (the kubeconfig) cannot pass a session policy, so the cluster "
              "would be reached with more rights than the program has",
    "policyArns": "aws eks get-token (the kubeconfig) cannot pass session policies, so the "
                  "cluster would be reached with more rights than the program has",
    "tags": "aws eks get-token (the kubeconfig) cannot tag its session",
    "transitiveTagKeys": "aws eks get-token (the kubeconfig) cannot tag its session",
    "sourceIdentity": "aws eks get-token (the kubeconfig) cannot set a source identity",
    "duration": "the lab's cleanups and tools assume the role for the default hour; leave it out",
}
_ROLE_INSTEAD = ("; or put the role in a profile (role_arn, source_profile, external_id, "
                 "duration_seconds: every tool reads those) and set aws:profile")


def _json_or_text(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def aws_account_settings(others: Mapping[str, Any]) -> tuple[AwsAccount, list[Violation]]:
    """The stack's account settings (``aws:profile``, ``aws:allowedAccountIds``,
    ``aws:assumeRoles``, as Pulumi hands them over: objects and lists as JSON text) and a
    violation for each broken rule. None of these values is a credential, so they are shown."""

    found: list[Violation] = []
    profile = others.get("aws:profile")
    if profile is not None:
        if not isinstance(profile, str) or not profile.strip() or profile != profile.strip():
            found.append(Violation("aws:profile", profile,
                                   "must be the name of a profile of the AWS config or "
                                   "credentials file (aws configure list-profiles)"))
            profile = None
        profile = profile or None

    allowed: list[str] = []
    raw = others.get("aws:allowedAccountIds")
    if raw is not None:
        value = _json_or_text(raw)
        how = PIN_COMMAND.format(account="<account>")
        if not isinstance(value, list):
            found.append(Violation("aws:allowedAccountIds", raw,
                                   f"must be a list of 12-digit account ids; set it with {how}"))
        for item in value if isinstance(value, list) else []:
            # A number: the CLI stores `config set --path` values that look like integers as
            # numbers, and a leading 0 is lost on the way; an account id has 12 digits.
            if isinstance(item, int) and not isinstance(item, bool) and 0 <= item < 10 ** 12:
                item = f"{item:012d}"
            if isinstance(item, str) and _ACCOUNT_ID.fullmatch(item):
                allowed.append(item)
            else:
                found.append(Violation("aws:allowedAccountIds", raw,
                                       f"item {json.dumps(item)} is not a 12-digit AWS account "
                                       f"id; set them with {how}"))

    roles: list[AssumedRole] = []
    raw = others.get("aws:assumeRoles")
    if raw is not None:
        value = _json_or_text(raw)
        if not isinstance(value, list) or not all(isinstance(r, dict) for r in value):
            found.append(Violation(
                "aws:assumeRoles", raw, "must be a list of {roleArn, sessionName} objects; set "
                "it with pulumi config set --path 'aws:assumeRoles[0].roleArn' <role ARN>"))
            value = []
        if len(value) > 1:
            found.append(Violation(
                "aws:assumeRoles", [r.get("roleArn") for r in value],
                "may name one role: the kubeconfig's aws eks get-token assumes one "
                "(--role-arn), straight from the base credentials, so a chain would reach the "
                "cluster as another identity than the program's" + _ROLE_INSTEAD))
        for index, role in enumerate(value[:1]):
            key = f"aws:assumeRoles[{index}]"
            arn = role.get("roleArn")
            if not isinstance(arn, str) or not ROLE_ARN.fullmatch(arn):
                found.append(Violation(f"{key}.roleArn", arn,
                                       "must be an IAM role ARN (arn:aws:iam::<account>:role/"
                                       "<name>)"))
            session = role.get("sessionName")
            if session is not None and (not isinstance(session, str)
                                        or not _SESSION_NAME.fullmatch(session)):
                found.append(Violation(f"{key}.sessionName", session,
                                       "must be 2-64 letters, digits and +=,.@_- (STS "
                                       "RoleSessionName)"))
                session = None
            for field_name in sorted(set(role) - {"roleArn", "sessionName"}):
                why = _ROLE_FIELDS_REFUSED.get(field_name, "it is not a field of an assumed role")
                found.append(Violation(f"{key}.{field_name}", "(set; value not shown)",
                                       f"is not applied: {why}" + _ROLE_INSTEAD))
            if isinstance(arn, str) and ROLE_ARN.fullmatch(arn):
                roles.append(AssumedRole(arn, session or None))
    return AwsAccount(profile=profile, allowed_account_ids=tuple(allowed),
                      assume_roles=tuple(roles)), found


def account_violations(account: AwsAccount, caller_account: str) -> list[Violation]:
    """The caller's account (sts:GetCallerIdentity) outside ``aws:allowedAccountIds``: checked
    before any resource registers. (The provider checks it too, but only once it configures,
    in a message of its own; this one says which credentials and what to do.)"""

    if not account.pinned or caller_account in account.allowed_account_ids:
        return []
    source = f"profile {account.profile}" if account.profile else "the environment's credentials"
    return [Violation(
        "aws:allowedAccountIds", list(account.allowed_account_ids),
        f"the AWS credentials ({source}) are for account {caller_account}, which this stack is "
        "not pinned to: nothing was done. Use credentials for the stack's account, or pin it "
        "to this one if it is right (" + PIN_COMMAND.format(account=caller_account) + ")")]


def account_warnings(account: AwsAccount) -> list[str]:
    """What the plan and preflight say about a stack that pins no account."""
    if account.pinned:
        return []
    return ["aws:allowedAccountIds is not set, so nothing stops pulumi up or destroy from acting "
            "in whichever account the shell's credentials are for (a destroy there finds "
            "nothing, and drops the stack's resources from the state while they run on); pin "
            "the stack to its account: " + PIN_COMMAND.format(account="<account>")]


def unknown_provider_keys(keys: Iterable[str]) -> list[str]:
    """A warning for each ``aws:`` key the AWS provider does not read (a misspelt ``aws:regon``
    is otherwise ignored without a word), naming the nearest one it does. Only warned, not
    refused: a newer provider may read a key this one does not know. Other providers'
    namespaces are theirs to judge, and this project's own keys are refused by load_config."""
    known = aws_provider_keys()
    warnings = []
    for key in sorted(keys):
        namespace, _, name = key.partition(":")
        if namespace != AWS_NAMESPACE or not known or name.split(".")[0] in known:
            continue
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {AWS_NAMESPACE}:{close[0]}?" if close else ""
        warnings.append(f"{key} is not a setting of the AWS provider (pulumi_aws/config/vars.py "
                        f"lists those it reads), so it is ignored{hint}")
    return warnings
