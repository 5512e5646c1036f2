"""The boto3 session a destroy-time cleanup acts with: the stack's ``aws:profile``, its
``aws:assumeRoles`` and its ``aws:allowedAccountIds``, as ``pulumi up``'s provider used them.

``pulumi destroy`` runs a cleanup's ``delete`` with the environment of the shell it is started
from. Without these settings in its outputs, a destroy from a shell pointed at another account
would look there, find nothing, and call the stack clean while its instances run on.

Nothing a call knows is kept on the provider object, not even per thread: each call makes its
account (``_account``) from its own props and hands it down to every helper that calls AWS or
signs a token. The dynamic provider host unpickles a provider once per distinct pickle and gives
that one object to every call (the pulumi SDK's pulumi/dynamic/__main__.py, read at 3.272.0:
``get_provider`` keeps it in ``_PROVIDER_CACHE``), serving the engine's calls on the worker
threads of its gRPC server (``main``: ``futures.ThreadPoolExecutor(max_workers=4)``); and every
cleanup of a class pickles to the same bytes, so the three Karpenter cleanups of a destroy
delete at once on one object. State on the object let them use each other's account (seen under
the real engine: tests/test_real_pulumi_cleanups.py); state kept per thread is lost as soon as
a call hands work to another thread, whose helper then acts with the shell's credentials
(tests/test_cleanup_call_state.py).
"""

from __future__ import annotations

from typing import Any, Optional

from components.cleanup.self_contained import self_contained


@self_contained
class AwsSession:
    """A mixin for dynamic providers (pickled by value with them, hence ``@self_contained``).

    ``_account_props`` checks the account settings among a call's props and returns the ones
    to store in its outputs. ``_account`` makes a call's account from them: the settings and a
    cache of the sessions made with them, for that call alone. Each call (``create``,
    ``update``, ``delete``) that calls AWS makes one and passes it to ``_aws_session``,
    ``_aws_client``, ``_bearer_token``, ``_cluster_is_gone`` and its own helpers. Props without
    the keys (a state stored before they existed) mean the environment's credentials, as before.
    """

    #: Seconds to connect to an AWS endpoint and to wait for its answer. botocore's defaults
    #: (60 s each, every request retried by the SDK) kept a delete waiting about half an hour
    #: per request on an endpoint that accepts and never answers (a black-holed proxy); the
    #: AWS calls the cleanups make answer in well under a second.
    connect_timeout_seconds: float = 5.0
    read_timeout_seconds: float = 20.0
    #: Tries per request by the SDK itself (AwsCalls, which retries on top, makes it 1).
    sdk_attempts: int = 2

    def _client_config(self, config: Any = None, attempts: Optional[int] = None) -> Any:
        """The bounded botocore config of every client a cleanup makes (``attempts`` SDK
        tries, ``sdk_attempts`` unless given), with ``config``'s settings (if any) on top."""
        from botocore.config import Config

        bounded = Config(connect_timeout=self.connect_timeout_seconds,
                         read_timeout=self.read_timeout_seconds,
                         retries={"mode": "standard",
                                  "total_max_attempts": attempts or self.sdk_attempts})
        return bounded.merge(config) if config is not None else bounded

    #: The outputs' keys, in the order they are stored.
    _account_keys = ("awsProfile", "allowedAccountIds", "assumeRoles")

    def _account_props(self, props: dict[str, Any]) -> dict[str, Any]:
        """The account settings among ``props``, checked (raises ValueError): what to store in
        the outputs. Nothing is remembered (``_account`` makes the call's account)."""
        import re

        outs: dict[str, Any] = {}
        problems = []
        profile = props.get("awsProfile")
        if profile is not None and profile != "":
            if isinstance(profile, str):
                outs["awsProfile"] = profile
            else:
                problems.append(f"awsProfile must be a string, got {profile!r}")
        allowed = props.get("allowedAccountIds")
        if allowed:
            if isinstance(allowed, (list, tuple)) and all(
                    isinstance(a, str) and re.fullmatch(r"\d{12}", a) for a in allowed):
                outs["allowedAccountIds"] = list(allowed)
            else:
                problems.append(f"allowedAccountIds must be 12-digit account ids, got {allowed!r}")
        roles = props.get("assumeRoles")
        if roles:
            if isinstance(roles, (list, tuple)) and all(
                    isinstance(r, dict) and isinstance(r.get("roleArn"), str) for r in roles):
                outs["assumeRoles"] = [
                    {k: r[k] for k in ("roleArn", "sessionName") if r.get(k)} for r in roles]
            else:
                problems.append(f"assumeRoles must be a list of {{roleArn, sessionName}}, "
                                f"got {roles!r}")
        if problems:
            raise ValueError("AWS account settings: " + "; ".join(problems))
        return outs

    def _account(self, props: dict[str, Any]) -> Any:
        """This call's account: the settings among ``props``, checked (``_account_props``), and
        an empty cache of its sessions. Immutable (the cache is the call's own); never stored.
        A named tuple made here: a class of this module would be pickled by reference."""
        import collections
        import types

        settings = self._account_props(props)
        call_account = collections.namedtuple("CallAccount", ("settings", "sessions"))
        return call_account(types.MappingProxyType(settings), {})

    def _aws_session(self, region: str, account: Any, check_account: bool = True) -> Any:
        """The session of ``account`` (``_account``) for ``region``: the profile's credentials
        (the environment's when there is none), each role assumed in turn, and — when the stack
        pins its account — the caller's account checked first. Raises RuntimeError rather than
        act in an account the stack does not name. Made once per region and call (the
        account's cache)."""
        import boto3

        key = (region, check_account)
        if key in account.sessions:
            return account.sessions[key]
        settings = account.settings
        session = boto3.session.Session(profile_name=settings.get("awsProfile") or None,
                                        region_name=region)
        # STS is called here directly, not through AwsCalls' retries: the SDK's two tries.
        sts_config = self._client_config(attempts=2)
        for role in settings.get("assumeRoles") or []:
            answer = session.client("sts", region_name=region, config=sts_config).assume_role(
                RoleArn=role["roleArn"], RoleSessionName=role.get("sessionName") or "eks-hybrid-lab")
            credentials = answer["Credentials"]
            session = boto3.session.Session(
                aws_access_key_id=credentials["AccessKeyId"],
                aws_secret_access_key=credentials["SecretAccessKey"],
                aws_session_token=credentials["SessionToken"], region_name=region)
        allowed = settings.get("allowedAccountIds") or []
        if allowed and check_account:
            seen = session.client("sts", region_name=region,
                                  config=sts_config).get_caller_identity()["Account"]
            if seen not in allowed:
                raise self._not_allowed(seen, allowed, settings.get("awsProfile"))
        account.sessions[key] = session
        return session

    def _not_allowed(self, seen: str, allowed: list[str], profile: Optional[str]) -> Exception:
        # A RuntimeError: a pickled provider cannot import an exception class of this project.
        source = f"profile {profile}" if profile else "the environment's credentials"
        message = (f"the AWS credentials ({source}) are for account {seen}, and this stack is "
                   f"pinned to {', '.join(allowed)} (aws:allowedAccountIds): nothing was done in "
                   f"{seen}. Use credentials for {', '.join(allowed)} and run the command again.")
        return RuntimeError(message)

    def _has_account(self, account: Any) -> bool:
        """Whether ``account``'s props named a profile, roles or allowed accounts."""
        return any(account.settings.values())

    def _aws_client(self, service: str, region: str, account: Any, config: Any = None) -> Any:
        """A client of ``account``'s session (see ``_aws_session``). Without account settings,
        boto3's default session: the environment's credentials, exactly as before they
        existed."""
        import boto3

        options = {"config": self._client_config(config)}
        if not self._has_account(account):
            return boto3.client(service, region_name=region, **options)
        return self._aws_session(region, account).client(service, region_name=region, **options)
