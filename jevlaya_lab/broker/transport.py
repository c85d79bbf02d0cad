"""``Transport``: where a chat request goes and how it is sent.

One per broker. It owns the broker's :class:`~jevlaya_lab.broker.wire.Wire` (its connection
pools are made on the first request, on the event loop that sends it, so a broker made outside a
loop holds no loop-bound object) and the
loopback servers of embedded ``local://`` models (:mod:`jevlaya_lab.broker.embedded`). It knows
nothing of pools, journals or retries: it turns (entry, key, body) into a
:class:`~jevlaya_lab.broker.http.Reply` or an open streaming response, or raises a classified
:class:`~jevlaya_lab.broker.http.Failure` (the split httpx makes between a client and its
transport: the caller decides what a failure means, the transport only sends).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from jevlaya_lab.broker.config import LLMConfig
from jevlaya_lab.broker.embedded import EmbeddedServer
from jevlaya_lab.broker.http import Failure, Reply, open_stream, post_chat
from jevlaya_lab.broker.keys import redact
from jevlaya_lab.broker.wire import Response, Wire


class Transport:
    """Sends requests to http(s) endpoints and to the embedded models (see the module
    docstring). ``aclose()`` closes the HTTP connections; ``embedded.stop()`` the servers."""

    def __init__(self, embedded: EmbeddedServer | None = None) -> None:
        self.embedded = embedded if embedded is not None else EmbeddedServer()
        self.wire = Wire()

    async def base_url(self, entry: LLMConfig) -> str:
        """The URL serving ``entry``; an embedded model is started first (a failure to start
        is a ``cannot_start`` :class:`Failure`, whose detail is the loader's message)."""
        if entry.is_local:
            try:
                return await self.embedded.base_url(entry)
            except Exception as exc:  # noqa: BLE001 - any loading failure: it cannot start
                raise Failure("cannot_start", redact(f"{type(exc).__name__}: {exc}")) from None
        return entry.base_url.rstrip("/")

    def post(self, url: str, key: str | None, body: dict[str, Any]) -> Coroutine[Any, Any, Reply]:
        """One non-streaming request (raises :class:`Failure`), to await: ``post_chat``'s own
        coroutine, so each resumption of the request passes one frame fewer."""
        return post_chat(self.wire, url, key, body)

    async def open_stream(self, url: str, key: str | None,
                          body: dict[str, Any]) -> Response:
        """A streaming request's open 200 response (raises :class:`Failure`)."""
        return await open_stream(self.wire, url, key, body)

    async def aclose(self) -> None:
        await self.wire.aclose()
