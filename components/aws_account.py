"""Which AWS account and credentials the lab acts with: the stack's ``aws:profile``,
``aws:allowedAccountIds`` and ``aws:assumeRoles``, in one typed value every tool is handed.

The lab makes its AWS provider explicitly, and an explicit provider reads no ``aws:`` stack
config (docs/pulumi-cli.md#an-explicit-provider-reads-no-stack-config), so the settings are
passed on by hand, to everything that calls AWS: the provider (``provider_args``), the
kubeconfig's ``aws eks get-token`` (``kubeconfig_exec``), the destroy-time cleanups (their
``account`` inputs, read back by ``components/cleanup/aws_session.py``) and the tools that run
outside Pulumi (``boto3_session``). None of it is secret: a profile's name, role ARNs and
account ids name credentials, they are not credentials.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

#: The session name the cleanups and the tools give an assumed role when the stack names none.
DEFAULT_SESSION_NAME = "eks-hybrid-lab"


@dataclass(frozen=True)
class AssumedRole:
    role_arn: str
    #: Names the role session (CloudTrail shows it); what the role may do does not depend on it.
    session_name: Optional[str] = None


@dataclass(frozen=True)
class AwsAccount:
    """The credentials' source and the accounts they may belong to. All empty: the
    environment's credentials, in whichever account they are for (the lab's old behaviour)."""

    profile: Optional[str] = None
    allowed_account_ids: tuple[str, ...] = ()
    #: At most one (stacks/config.py refuses a chain: ``aws eks get-token`` assumes one role).
    assume_roles: tuple[AssumedRole, ...] = ()

    @property
    def pinned(self) -> bool:
        return bool(self.allowed_account_ids)

    def describe(self) -> str:
        """One line: where the credentials come from and which account they must be in."""
        source = f"profile {self.profile}" if self.profile else "the environment's credentials"
        for role in self.assume_roles:
            source += f", then role {role.role_arn}"
        if self.pinned:
            return f"{source}; pinned to account {', '.join(self.allowed_account_ids)}"
        return f"{source}; no account pinned (aws:allowedAccountIds is not set)"

    # --- the explicit AWS provider ------------------------------------------------------------

    def provider_args(self) -> dict[str, Any]:
        """Keyword arguments for ``aws.Provider``: what the default provider would have read
        from the stack's config."""
        import pulumi_aws as aws

        args: dict[str, Any] = {}
        if self.profile:
            args["profile"] = self.profile
        if self.allowed_account_ids:
            args["allowed_account_ids"] = list(self.allowed_account_ids)
        if self.assume_roles:
            args["assume_roles"] = [
                aws.ProviderAssumeRoleArgs(role_arn=role.role_arn, session_name=role.session_name)
                for role in self.assume_roles]
        return args

    # --- the kubeconfig -------------------------------------------------------------------------

    def kubeconfig_exec(self) -> tuple[list[str], list[dict[str, str]]]:
        """Extra ``aws eks get-token`` arguments and the exec's ``env``. The profile goes in
        both: ``--profile`` makes it explicit, so credentials exported in the shell
        (AWS_ACCESS_KEY_ID) do not take its place (botocore's credential resolver drops the
        environment provider only for an explicit profile); ``AWS_PROFILE`` is for anything
        else the exec starts. A role becomes ``--role-arn``, the one role get-token can
        assume."""
        args: list[str] = []
        env: list[dict[str, str]] = []
        if self.profile:
            args += ["--profile", self.profile]
            env.append({"name": "AWS_PROFILE", "value": self.profile})
        for role in self.assume_roles:
            args += ["--role-arn", role.role_arn]
        return args, env

    # --- the destroy-time cleanups -------------------------------------------------------------

    def cleanup_inputs(self) -> dict[str, Any]:
        """The inputs a cleanup stores in its outputs, so that ``delete`` acts with the same
        credentials as ``pulumi up`` (components/cleanup/aws_session.py reads them). Empty for
        an account with no settings, so such a stack's cleanups register as they did."""
        inputs: dict[str, Any] = {}
        if self.profile:
            inputs["awsProfile"] = self.profile
        if self.allowed_account_ids:
            inputs["allowedAccountIds"] = list(self.allowed_account_ids)
        if self.assume_roles:
            inputs["assumeRoles"] = [
                {"roleArn": role.role_arn, **({"sessionName": role.session_name}
                                              if role.session_name else {})}
                for role in self.assume_roles]
        return inputs

    # --- the tools that run outside Pulumi --------------------------------------------------------

    def boto3_session(self, region: str, *, check_account: bool = True) -> Any:
        """A boto3 session made as the cleanups make theirs: the profile, then the roles, then
        (``check_account``) the caller's account checked against the allowed ones. Raises
        RuntimeError (an account outside the allowed ones) or botocore's errors."""
        from components.cleanup.aws_session import AwsSession

        maker = AwsSession()
        return maker._aws_session(region, maker._account(self.cleanup_inputs()),
                                  check_account=check_account)

