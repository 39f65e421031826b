"""Request bodies the API reads: JSON in UTF-8 only (RFC 8259, section 8.1), nothing guessed.

Starlette's ``Request.json`` hands the bytes to ``json.loads``, which guesses
UTF-16 and UTF-32 from the first bytes: a body in another encoding than the
one JSON allows was read.  :class:`Utf8JsonRoute` gives every route a request
whose ``json()`` decodes strict UTF-8 (a byte-order mark refused too); FastAPI
turns its refusal into the 400 of a body that is not JSON.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Coroutine

from fastapi import Request, Response
from fastapi.routing import APIRoute


class NotUtf8Error(ValueError):
    """The body is not UTF-8 text."""


def decode_json(body: bytes) -> Any:
    """The JSON value of ``body``, which must be UTF-8 without a byte-order mark."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8Error(f"the request body is not UTF-8 (byte {exc.start})") from None
    if text.startswith("\ufeff"):
        raise NotUtf8Error("the request body starts with a byte-order mark; JSON is UTF-8 without one")
    return json.loads(text)


class Utf8JsonRequest(Request):
    """A request whose JSON body is read as UTF-8 only."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = decode_json(await self.body())
        return self._json


class Utf8JsonRoute(APIRoute):
    """An API route that reads its JSON body with :class:`Utf8JsonRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(Utf8JsonRequest(request.scope, request.receive))

        return handle
