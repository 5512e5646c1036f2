"""Calling AWS from a destroy-time cleanup: retried where another try can help, with every
failure turned into a reason the cleanup can report."""

from __future__ import annotations

from typing import Any, Optional

from components.cleanup.aws_session import AwsSession
from components.cleanup.self_contained import self_contained


@self_contained
class AwsCalls(AwsSession):
    """A mixin for dynamic providers (pickled by value with them, hence ``@self_contained``).
    Clients come from ``AwsSession._aws_client``: the stack's account, not the shell's."""

    #: Tries per request. This loop is the one retry layer: the SDK makes one try per try
    #: here (AwsSession's client config), or its retries would multiply the waits.
    attempts: int = 6
    sdk_attempts: int = 1
    #: Tries per request when the endpoint did not answer in time (connect or read timeout):
    #: one more, not ``attempts`` — an endpoint silent for a whole timeout is not a blip, and
    #: each try costs the full timeout (AwsSession's ``read_timeout_seconds``).
    timeout_attempts: int = 2
    #: First backoff between tries (doubles each time); tests set it to 0 on the instance.
    retry_base_seconds: float = 1.0
    #: Longest single backoff.
    retry_max_seconds: float = 20.0

    def _aws_call(self, method: Any, gone_codes: tuple[str, ...] = (),
                  **request: Any) -> tuple[dict[str, Any], Optional[str]]:
        """Calls ``method(**request)``, retrying throttling, server and connection errors with
        bounded exponential backoff. Returns (response, None) on success — an error code in
        ``gone_codes`` counts as success with an empty response — or ({}, why) once it gives
        up; ``why`` starts with the error code."""
        import time

        from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
        from botocore.exceptions import ConnectionError as BotoConnectionError
        from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError

        # A tuple, not a set: this code is pickled into the state by value, and a set's order
        # (so the pickle) changes with each process's hash seed — every preview would then see
        # a changed provider and update every cleanup.
        retryable_codes = ("Throttling", "ThrottlingException", "RequestLimitExceeded",
                           "TooManyRequestsException", "RequestThrottled", "TooManyUpdates",
                           "InternalError", "InternalFailure", "InternalServerError",
                           "ServiceUnavailable", "Unavailable")
        why = "not attempted"
        timeouts = 0
        for attempt in range(self.attempts):
            if timeouts >= self.timeout_attempts:
                return {}, f"{why} (gave up after {timeouts} tries that were not answered)"
            if attempt:
                time.sleep(min(self.retry_max_seconds,
                               self.retry_base_seconds * 2 ** (attempt - 1)))
            try:
                return method(**request), None
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code", "")
                status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
                if code in gone_codes:
                    return {}, None
                message = error.response.get("Error", {}).get("Message", "")
                why = f"{code or 'error'}: {message or error}"
                if code not in retryable_codes and status != 429 and status < 500:
                    return {}, why
            except (BotoConnectionError, HTTPClientError) as error:
                # Endpoint unreachable, connection reset, timeouts: worth another try.
                why = f"{type(error).__name__}: {error}"
                timeouts += isinstance(error, (ConnectTimeoutError, ReadTimeoutError))
            except BotoCoreError as error:
                # Missing credentials and the like: retrying will not help.
                return {}, f"{type(error).__name__}: {error}"
        return {}, f"{why} (gave up after {self.attempts} attempts)"
