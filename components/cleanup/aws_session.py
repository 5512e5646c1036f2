"""The boto3 session a destroy-time cleanup acts with: the stack's ``aws:profile``, its
``aws:assumeRoles`` and its ``aws:allowedAccountIds``, as ``pulumi up``'s provider used them.

``pulumi destroy`` runs a cleanup's ``delete`` with the environment of the shell it is started
from. Without these settings in its outputs, a destroy from a shell pointed at another account
would look there, find nothing, and call the stack clean while its instances run on.
"""

from __future__ import annotations

from typing import Any, Optional

from components.cleanup.self_contained import self_contained


@self_contained
class AwsSession:
    """A mixin for dynamic providers (pickled by value with them, hence ``@self_contained``).

    ``_account_props`` is called with every call's props (each provider's ``check_props``, or
    ``delete`` itself): it returns the account outputs to store and remembers them for this
    call's sessions, so the mixins' helpers that get only a cluster name and a region
    (``_bearer_token``, ``_cluster_is_gone``) act in the same account. Props without the keys
    (a state stored before they existed) mean the environment's credentials, as before.

    What a call remembers is kept per thread, never on the provider object itself: the dynamic
    provider host unpickles a provider once per distinct pickle and shares that object between
    the engine's concurrent calls (pulumi/dynamic/__main__.py, ``_PROVIDER_CACHE``), and every
    cleanup of a class pickles to the same bytes. Seen under the real engine: of three
    Karpenter cleanups deleting at once, the one pinned to another account terminated its
    instances with a session another call had checked (tests/test_real_pulumi_cleanups.py).
    The host serves each call on one thread of its gRPC server, start to end.
    """

    def _this_call(self) -> Any:
        """The calling thread's state: its account settings and its sessions."""
        import threading

        local = self.__dict__.get("_calls")
        if local is None:
            # setdefault is one step under the GIL: two first calls get the same object.
            local = self.__dict__.setdefault("_calls", threading.local())
        return local

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
        """The account settings among ``props``, checked (raises ValueError), remembered."""
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
        call = self._this_call()
        call.account = outs
        call.sessions = {}
        return outs

    def _aws_session(self, region: str, check_account: bool = True) -> Any:
        """The session for ``region``: the profile's credentials (the environment's when
        there is none), each role assumed in turn, and — when the stack pins its account —
        the caller's account checked first. Raises RuntimeError rather than act in an
        account the stack does not name. Made once per region and call."""
        import boto3

        call = self._this_call()
        sessions = getattr(call, "sessions", None)
        if sessions is None:
            sessions = call.sessions = {}
        key = (region, check_account)
        if key in sessions:
            return sessions[key]
        account = getattr(call, "account", None) or {}
        session = boto3.session.Session(profile_name=account.get("awsProfile") or None,
                                        region_name=region)
        # STS is called here directly, not through AwsCalls' retries: the SDK's two tries.
        sts_config = self._client_config(attempts=2)
        for role in account.get("assumeRoles") or []:
            answer = session.client("sts", region_name=region, config=sts_config).assume_role(
                RoleArn=role["roleArn"], RoleSessionName=role.get("sessionName") or "eks-hybrid-lab")
            credentials = answer["Credentials"]
            session = boto3.session.Session(
                aws_access_key_id=credentials["AccessKeyId"],
                aws_secret_access_key=credentials["SecretAccessKey"],
                aws_session_token=credentials["SessionToken"], region_name=region)
        allowed = account.get("allowedAccountIds") or []
        if allowed and check_account:
            seen = session.client("sts", region_name=region,
                                  config=sts_config).get_caller_identity()["Account"]
            if seen not in allowed:
                raise self._not_allowed(seen, allowed, account.get("awsProfile"))
        sessions[key] = session
        return session

    def _not_allowed(self, seen: str, allowed: list[str], profile: Optional[str]) -> Exception:
        # A RuntimeError: a pickled provider cannot import an exception class of this project.
        source = f"profile {profile}" if profile else "the environment's credentials"
        message = (f"the AWS credentials ({source}) are for account {seen}, and this stack is "
                   f"pinned to {', '.join(allowed)} (aws:allowedAccountIds): nothing was done in "
                   f"{seen}. Use credentials for {', '.join(allowed)} and run the command again.")
        return RuntimeError(message)

    def _has_account(self) -> bool:
        """Whether this call's props name a profile, roles or allowed accounts."""
        return any((getattr(self._this_call(), "account", None) or {}).values())

    def _aws_client(self, service: str, region: str, config: Any = None) -> Any:
        """A client of this call's session (see ``_aws_session``). Without account settings,
        boto3's default session: the environment's credentials, exactly as before they
        existed."""
        import boto3

        options = {"config": self._client_config(config)}
        if not self._has_account():
            return boto3.client(service, region_name=region, **options)
        return self._aws_session(region).client(service, region_name=region, **options)
