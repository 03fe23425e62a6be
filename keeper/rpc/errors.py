"""The RPC layer's exceptions: one class per failure kind, each carrying its ``RpcFailure``.

Callers branch on the class (``RateLimitedError``, ``ExecutionRevertedError``,
``NonceTooLowError``...) or on ``RetryableError`` / ``FatalError`` from
``keeper.errors``; never on message text. Messages name the method and the
endpoint *name*, never its URL.
"""

from __future__ import annotations

from typing import Any, Final

from keeper.domain.rpc_errors import FailureKind, RpcFailure
from keeper.errors import FatalError, KeeperError, RetryableError


class RpcError(KeeperError):
    """A JSON-RPC call failed; ``failure`` says how, ``endpoint`` names where."""

    def __init__(
        self, failure: RpcFailure, *, method: str, endpoint: str | None, attempts: int = 1
    ) -> None:
        where = f" via {endpoint}" if endpoint else ""
        detail = f": {failure.message}" if failure.message else ""
        tries = f" (after {attempts} attempts)" if attempts > 1 else ""
        super().__init__(f"{method}{where}: {failure.kind}{detail}{tries}")
        self.failure = failure
        self.method = method
        self.endpoint = endpoint
        self.attempts = attempts

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from its fields, not its message: the fetch process raises these in its
        # parent (keeper.sync.fetch_process), which branches on the class
        return (_rebuild, (type(self), self.failure, self.method, self.endpoint, self.attempts))


def _rebuild(
    cls: type[RpcError], failure: RpcFailure, method: str, endpoint: str | None, attempts: int
) -> RpcError:
    return cls(failure, method=method, endpoint=endpoint, attempts=attempts)


class RpcRetryableError(RpcError, RetryableError):
    """The call may succeed later or elsewhere."""


class RpcFatalError(RpcError, FatalError):
    """Repeating the identical call will not help; the caller must decide."""


class RateLimitedError(RpcRetryableError):
    """HTTP 429 or a provider quota message."""


class RpcTimeoutError(RpcRetryableError):
    """No answer within the request timeout."""


class TransientRpcError(RpcRetryableError):
    """5xx, connection trouble, or a garbage body (not JSON, wrong id, missing result)."""


class UnknownBlockError(RpcRetryableError):
    """The node does not know the block (yet): a lagging replica, or a reorged-out hash."""


class StateUnavailableError(RpcFatalError):
    """The node has the block but keeps no state for it (a full node asked about history)."""


class EndpointRejectedError(RpcRetryableError):
    """401/403/404: this endpoint refuses us (bad key or path); others may not."""


class RangeTooLargeError(RpcFatalError):
    """The provider refused a log query as too large; shrink the range and ask again."""


class AnswerTooLargeError(RangeTooLargeError):
    """An answer passed the size the caller bounded it to, and was dropped unread.

    Our own bound, not the provider's: the node served it, so the range is
    shrunk for this density without teaching the policy anything about the
    provider's limits.
    """


class ExecutionRevertedError(RpcFatalError):
    """The EVM reverted; ``revert_data`` holds the raw revert bytes when the node sent them."""

    @property
    def revert_data(self) -> bytes | None:
        data = self.failure.data
        if data is None or not data.startswith("0x"):
            return None
        try:
            return bytes.fromhex(data[2:])
        except ValueError:
            return None


class NonceTooLowError(RpcFatalError):
    """The nonce is already used on chain."""


class AlreadyKnownError(RpcFatalError):
    """The node already has this exact transaction."""


class UnderpricedError(RpcFatalError):
    """The fee is too low for the pool or for replacing a pending transaction."""


class InsufficientFundsError(RpcFatalError):
    """The sender cannot pay for gas and value: the signer needs funding."""


class InvalidRequestError(RpcFatalError):
    """The node rejected our parameters."""


class MethodNotFoundError(RpcFatalError):
    """The node does not serve this method."""


class RpcParseError(RpcFatalError):
    """The node could not parse our request."""


class PermanentRpcError(RpcFatalError):
    """Any other error the node answered deliberately."""


_CLASSES: Final[dict[FailureKind, type[RpcError]]] = {
    "rate_limited": RateLimitedError,
    "timeout": RpcTimeoutError,
    "transient": TransientRpcError,
    "unknown_block": UnknownBlockError,
    "state_unavailable": StateUnavailableError,
    "endpoint_rejected": EndpointRejectedError,
    "range_too_large": RangeTooLargeError,
    "execution_reverted": ExecutionRevertedError,
    "nonce_too_low": NonceTooLowError,
    "already_known": AlreadyKnownError,
    "underpriced": UnderpricedError,
    "insufficient_funds": InsufficientFundsError,
    "invalid_request": InvalidRequestError,
    "method_not_found": MethodNotFoundError,
    "parse_error": RpcParseError,
    "permanent": PermanentRpcError,
}


def error_for(
    failure: RpcFailure, *, method: str, endpoint: str | None, attempts: int = 1
) -> RpcError:
    """The exception instance for a classified failure."""
    return _CLASSES[failure.kind](failure, method=method, endpoint=endpoint, attempts=attempts)
