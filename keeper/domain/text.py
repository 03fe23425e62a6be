"""Outside text shown back in a message: bounded, so that a megabyte of input never
becomes a megabyte of log line, error body or configuration problem."""

from __future__ import annotations

__all__ = ["clipped", "shown"]


def clipped(text: str, limit: int) -> str:
    """``text`` when it has at most ``limit`` characters, else its first ``limit - 3``
    followed by ``...`` (``limit`` characters in all)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown(value: object) -> str:
    """``value``'s ``repr`` clipped to 80 characters: how a message quotes what it was
    given, so the reader sees the quotes, escapes and type of what was wrong."""
    return clipped(repr(value), 80)
