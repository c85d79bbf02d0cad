"""What one client may cost the local server: time to send a request, connections, body size.

A server that takes requests from any local process must not let one of them hold threads or
memory without bound (a half-sent request, a flood of connections, a huge or deeply nested
body). The limits, and the decisions behind them (chosen here, where a client has no standard to rely on):

- ``read_timeout`` (default 30 s): the time a connection has to deliver a *whole* request, from
  the end of the previous answer (or the connect) to the last byte of its body, and the longest
  a single read or write may wait. A trickle of one byte a second cannot stretch it. A request
  that started but did not finish gets a 408; a silent idle connection is simply closed.
- ``max_connections`` (default 128): open connections served at once; the next ones get an
  immediate 503 with ``Retry-After`` (and are closed), so threads stay bounded.
- ``MAX_BODY_BYTES`` (8 MiB): the largest request body (413 beyond it); the body is read in
  ``READ_CHUNK_BYTES`` pieces, and the prompt is counted in bounded pieces before it is
  tokenized (``ChatModel.prompt_ids``), so a request costs memory in proportion to what the
  model can read, not to what the client sent.
- ``MAX_JSON_DEPTH`` (64): nesting of the request JSON; real requests nest about 6 levels.
- ``MAX_JSON_OBJECTS`` (10,000): JSON objects in one body, counted while it is parsed, so that
  a body of a quarter of a million empty messages is refused after the first ten thousand in a
  few milliseconds instead of costing seconds and hundreds of MB; ``validation.MAX_MESSAGES``
  (2,048) bounds the messages themselves.
- Idle connections (connected, waiting for their next request, not one byte of it sent) do not
  hold a place: when every place is taken, a new connection takes the place of the one that has
  been idle longest, which is closed. Only connections in the middle of a request or an answer
  count against ``max_connections`` for the 503.
"""

from __future__ import annotations

import io
import json
import socket
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer  # the buffer types socket.recv_into accepts

DEFAULT_READ_TIMEOUT_S = 30.0
DEFAULT_MAX_CONNECTIONS = 128
MAX_BODY_BYTES = 8 * 1024 * 1024
READ_CHUNK_BYTES = 64 * 1024
MAX_JSON_DEPTH = 64
MAX_JSON_OBJECTS = 10_000
BUSY_RETRY_AFTER_S = 1


class DeadlineReader(io.RawIOBase):
    """The socket as a raw stream whose reads fail with ``TimeoutError`` past a deadline.

    ``start(seconds)`` opens a request's deadline; ``finish()`` ends it (later reads and writes
    wait at most ``timeout`` each). ``received`` counts the bytes read since ``start``, which
    tells a half-sent request from an idle connection.
    """

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        super().__init__()
        self._sock = sock
        self.timeout = timeout
        self.deadline: float | None = None
        self.received = 0
        self.idle_since = time.monotonic()

    def readable(self) -> bool:
        return True

    def start(self) -> None:
        self.idle_since = time.monotonic()
        self.deadline = self.idle_since + self.timeout
        self.received = 0

    @property
    def idle(self) -> bool:
        """Waiting for a request of which not one byte has come: safe to close."""
        return self.deadline is not None and self.received == 0

    def finish(self) -> None:
        self.deadline = None
        self._sock.settimeout(self.timeout)

    def readinto(self, buffer: WriteableBuffer) -> int:
        wait = self.timeout
        if self.deadline is not None:
            wait = min(wait, self.deadline - time.monotonic())
            if wait <= 0:
                raise TimeoutError("the request did not arrive in time")
        self._sock.settimeout(wait)
        n = self._sock.recv_into(buffer)
        self.received += n
        return n


class TooManyObjects(ValueError):
    """A request body holds more JSON objects than ``MAX_JSON_OBJECTS``."""


def parse_bounded(body: bytes | str, max_objects: int = MAX_JSON_OBJECTS) -> Any:
    """``json.loads(body)``, stopped with ``TooManyObjects`` at the first object past ``max_objects``.

    The count runs inside the parser (an ``object_pairs_hook``), so the work done on a hostile
    body is bounded by the limit, not by the body's size.
    """
    count = 0

    def counted(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal count
        count += 1
        if count > max_objects:
            raise TooManyObjects(f"more than {max_objects} JSON objects")
        return dict(pairs)

    return json.loads(body, object_pairs_hook=counted)


def json_depth_over(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` (parsed JSON) nests lists/objects more than ``limit`` levels deep.

    Iterative, so no depth the parser accepted can overflow the stack here.
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False
