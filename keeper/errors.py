"""One exception hierarchy, split by what the caller should do about it.

Retryable errors are worth another attempt (a flaky endpoint, a rate limit);
fatal ones are not (bad config, corrupted state, a deep reorg). Callers branch
on the class, never on message text.
"""

from __future__ import annotations


class KeeperError(Exception):
    """Base of every error this package raises on purpose."""


class RetryableError(KeeperError):
    """A transient failure: the same call may succeed later."""


class DatabaseUnavailableError(RetryableError):
    """The PostgreSQL server went away; what the statement's transaction did is rolled back."""


class FatalError(KeeperError):
    """A failure that no retry fixes; the operation (or the daemon) must stop."""


class ConfigError(FatalError):
    """The configuration is invalid; the message names the offending key."""


class StateCorruptedError(FatalError):
    """Our own database contradicts itself or the chain beyond repair: halt loudly."""


class DeepReorgError(FatalError):
    """A reorg reaches below the persisted block window; never repaired silently."""

    def __init__(self, message: str, *, depth_at_least: int) -> None:
        super().__init__(message)
        self.depth_at_least = depth_at_least
