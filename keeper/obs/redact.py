"""Turning secret-bearing URLs into something safe to print.

An RPC URL routinely carries an API key (``/v3/<key>``, ``?apikey=``, or
``user:pass@``), and a verdict source URL may carry a token, so neither is
ever printed whole. This sits apart from ``keeper.rpc`` and ``keeper.config``
so both can use it without one depending on the other.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["redact_template", "redact_url"]


def redact_url(url: str, *, marks: bool = False) -> str:
    """``scheme://host[:port]`` of a URL: no credentials, path, query or fragment.

    The default endpoint name (and so a metrics label) uses the bare form. With
    ``marks`` (the printed configuration), ``***@`` and ``/…`` show an operator
    that credentials or a path were there and hidden. Unparsable input yields
    ``"<redacted>"`` rather than echoing it back.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return "<redacted>"
    if not parts.scheme or not host:
        return "<redacted>"
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc = f"{netloc}:{port}"
    if not marks:
        return f"{parts.scheme}://{netloc}"
    userinfo = "***@" if "@" in parts.netloc else ""
    hidden = bool(parts.path.strip("/") or parts.query or parts.fragment)
    return f"{parts.scheme}://{userinfo}{netloc}{'/…' if hidden else ''}"


def redact_template(url: str) -> str:
    """A verdict source template keeps its path (it carries ``{jobId}``) but loses credentials."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    if "@" in parts.netloc:
        netloc = f"***@{netloc}"
    query = "***" if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
