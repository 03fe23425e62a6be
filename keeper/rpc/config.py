"""Endpoint configuration, and keeping endpoint URLs out of every message.

An RPC URL routinely carries an API key (``/v3/<key>``, ``?apikey=``, or
``user:pass@``), so it is a secret: logs, metrics and exceptions name an
endpoint by its ``name`` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from keeper.obs.redact import redact_url

__all__ = ["EndpointConfig", "redact_url", "scrub"]


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """Replace every occurrence of a secret (and its path-bearing parts) in ``text``.

    Providers sometimes echo the request URL back in an error body; this keeps
    such echoes from reaching an exception message.
    """
    for secret in secrets:
        if not secret:
            continue
        text = text.replace(secret, "<redacted>")
        try:
            parts = urlsplit(secret)
        except ValueError:
            continue
        for piece in (parts.path, parts.query, parts.username or "", parts.password or ""):
            if len(piece) >= 8:  # short pieces ("/", "v1") are not secret and too common
                text = text.replace(piece, "<redacted>")
    return text


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """One JSON-RPC endpoint.

    ``rate`` requests per ``period`` seconds is the client-side throttle for
    this endpoint (providers meter per key, so per endpoint). The URL is kept
    out of ``repr`` so a logged config cannot leak it.
    """

    name: str
    url: str = field(repr=False)
    rate: float = 25.0
    period: float = 1.0

    @classmethod
    def from_url(cls, url: str, *, name: str | None = None, rate: float = 25.0) -> EndpointConfig:
        """An endpoint named after its redacted URL unless a name is given."""
        return cls(name=name or redact_url(url), url=url, rate=rate)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("endpoint name must not be empty")
        if self.rate <= 0 or self.period <= 0:
            raise ValueError(f"endpoint {self.name}: rate and period must be positive")
