"""The hook through which the RPC layer reports what it does; wired to metrics by the app."""

from __future__ import annotations

from typing import Protocol


class RpcObserver(Protocol):
    """Receives one call per HTTP exchange and per endpoint backoff.

    ``endpoint`` is the configured endpoint name (never its URL); ``outcome``
    is ``"ok"`` or a failure kind from ``keeper.domain.rpc_errors``; ``method``
    is the JSON-RPC method, or ``"batch"``. Keep these cheap: they run inline.
    """

    def on_request(self, endpoint: str, method: str, outcome: str, seconds: float) -> None: ...

    def on_backoff(self, endpoint: str, seconds: float) -> None: ...


class NullObserver:
    """The default observer: ignores everything."""

    def on_request(self, endpoint: str, method: str, outcome: str, seconds: float) -> None:
        return None

    def on_backoff(self, endpoint: str, seconds: float) -> None:
        return None
