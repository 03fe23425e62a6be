"""``python -m bench.bare_api PORT KEEPER-ARGS...``: the daemon, and the HTTP limit beside it.

Runs ``keeper KEEPER-ARGS...`` (``run -c ...``) in this process, and before
it a bare aiohttp handler on PORT, served the way the daemon serves its API:
on its own thread and event loop (:class:`keeper.api.serve.ApiThread`), in
the process whose indexer holds the GIL between requests. Every GET answers
a pre-serialised JSON body: no database, no row building, no encoding.
``POST /_bare/size/{n}`` sets that body to ``n`` bytes, the size of the route
benchmark 4 measures next; ``wrk`` then runs against it with the same
settings, script and path as against the route, while the daemon indexes.
"""

from __future__ import annotations

import json
import sys

from aiohttp import web

from keeper.api.serve import ApiThread
from keeper.cli import main as keeper_main


def body_of(size: int) -> bytes:
    """A JSON object of exactly ``size`` bytes (at least 8, the size of ``{"p":""}``)."""
    pad = max(0, size - len(b'{"p":""}'))
    return json.dumps({"p": "x" * pad}, separators=(",", ":")).encode()


def make_app() -> web.Application:
    body = [body_of(8)]

    async def answer(_request: web.Request) -> web.Response:
        return web.Response(body=body[0], content_type="application/json")

    async def resize(request: web.Request) -> web.Response:
        body[0] = body_of(int(request.match_info["size"]))
        return web.Response(text=str(len(body[0])))

    app = web.Application()
    app.router.add_post("/_bare/size/{size:\\d+}", resize)
    app.router.add_get("/{tail:.*}", answer)
    return app


def main(argv: list[str]) -> int:
    bare = ApiThread(make_app, "127.0.0.1", int(argv[0]))
    bare.start()
    try:
        return keeper_main(argv[1:])
    finally:
        bare.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
