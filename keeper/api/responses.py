"""HTTP responses of the API: JSON bodies, stable JSON errors, HTML pages, the error middleware.

Errors are JSON with a stable shape: ``{"error": code, "message": ...,
"parameter": ...}``; an unexpected failure is a bare 500 whose detail goes to
the log only, never to the client.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from aiohttp import web
from aiohttp.helpers import ETAG_ANY

from keeper.api.params import BadParam
from keeper.domain.text import clipped
from keeper.errors import DatabaseUnavailableError
from keeper.obs.logging import get_logger

__all__ = [
    "MAX_SUBMISSION_BYTES",
    "errors",
    "html",
    "json_error",
    "json_response",
    "json_text",
    "tagged_json",
]

MAX_SUBMISSION_BYTES = 1 << 20
_log = get_logger(__name__)
_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
_PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'"


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=partial(json.dumps, separators=(",", ":")))


def json_text(text: str) -> web.Response:
    """A body already encoded as JSON text (by SQLite)."""
    return web.Response(body=text.encode(), content_type="application/json", charset="utf-8")


def tagged_json(request: web.Request, text: str, tag: str) -> web.Response:
    """A JSON body with its entity tag, or 304 without a body when the client holds it.

    ``no-cache`` instead of ``no-store``: a client may keep the body, and
    must ask again (``If-None-Match``) before each use.
    """
    headers = {"ETag": f'"{tag}"', "Cache-Control": "no-cache"}
    held = request.if_none_match
    if held and any(e.value in (tag, ETAG_ANY) for e in held):  # weak comparison (RFC 9110)
        return web.Response(status=304, headers=headers)
    response = json_text(text)
    response.headers.update(headers)
    return response


def json_error(
    status: int,
    code: str,
    message: str,
    parameter: str | None = None,
    pointer: str | None = None,
) -> web.Response:
    body: dict[str, Any] = {"error": code, "message": message}
    if parameter is not None:
        body["parameter"] = parameter
    if pointer is not None:
        body["pointer"] = pointer
    return json_response(body, status)


def html(text: str, status: int = 200) -> web.Response:
    response = web.Response(text=text, status=status, content_type="text/html", charset="utf-8")
    response.headers["Content-Security-Policy"] = _PAGE_CSP
    return response


@web.middleware
async def errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        response = await handler(request)
    except BadParam as exc:
        response = json_error(400, "bad_parameter", exc.message, exc.param)
    except web.HTTPNotFound:
        response = json_error(404, "not_found", f"no route for {clipped(request.path, 200)}")
    except web.HTTPMethodNotAllowed as exc:
        response = json_error(405, "method_not_allowed", f"{exc.method} is not allowed here")
    except web.HTTPRequestEntityTooLarge:
        response = json_error(413, "too_large", f"request body over {MAX_SUBMISSION_BYTES} bytes")
    except web.HTTPException:
        raise
    except (sqlite3.OperationalError, DatabaseUnavailableError) as exc:
        _log.warning("api_database_unavailable", path=request.path, error=str(exc))
        response = json_error(503, "database_unavailable", "the database cannot be read right now")
    except Exception:
        _log.exception("api_internal_error", path=request.path)
        response = json_error(500, "internal", "internal error")
    for name, value in _SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response
