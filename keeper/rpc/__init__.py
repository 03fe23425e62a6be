"""The RPC edge: JSON-RPC transport, endpoint pool, retries, validation, log scans.

The only layer that retries. Everything it returns is validated and
normalised; everything it raises is an ``RpcError`` subclass carrying a
classified ``RpcFailure``. Endpoint URLs are secrets and never leave it.
"""

from keeper.domain.rpc_errors import RpcFailure
from keeper.rpc.client import BlockRef, RpcClient, block_param, tx_hash_of
from keeper.rpc.config import EndpointConfig, redact_url
from keeper.rpc.errors import (
    AlreadyKnownError,
    AnswerTooLargeError,
    EndpointRejectedError,
    ExecutionRevertedError,
    InsufficientFundsError,
    InvalidRequestError,
    MethodNotFoundError,
    NonceTooLowError,
    PermanentRpcError,
    RangeTooLargeError,
    RateLimitedError,
    RpcError,
    RpcFatalError,
    RpcParseError,
    RpcRetryableError,
    RpcTimeoutError,
    StateUnavailableError,
    TransientRpcError,
    UnderpricedError,
    UnknownBlockError,
)
from keeper.rpc.observer import NullObserver, RpcObserver
from keeper.rpc.scan import LogSource, scan_logs
from keeper.rpc.validate import InvalidResponse

__all__ = [
    "AlreadyKnownError",
    "AnswerTooLargeError",
    "BlockRef",
    "EndpointConfig",
    "EndpointRejectedError",
    "ExecutionRevertedError",
    "InsufficientFundsError",
    "InvalidRequestError",
    "InvalidResponse",
    "LogSource",
    "MethodNotFoundError",
    "NonceTooLowError",
    "NullObserver",
    "PermanentRpcError",
    "RangeTooLargeError",
    "RateLimitedError",
    "RpcClient",
    "RpcError",
    "RpcFailure",
    "RpcFatalError",
    "RpcObserver",
    "RpcParseError",
    "RpcRetryableError",
    "RpcTimeoutError",
    "StateUnavailableError",
    "TransientRpcError",
    "UnderpricedError",
    "UnknownBlockError",
    "block_param",
    "redact_url",
    "scan_logs",
    "tx_hash_of",
]
