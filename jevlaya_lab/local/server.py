"""``serve``: an OpenAI-compatible HTTP server for local chat models, with fault profiles.

It runs the stdlib ``ThreadingHTTPServer`` in a background thread (one thread per connection,
so many streaming clients are served at once) and binds 127.0.0.1 unless told otherwise.
When ``max_connections`` are open, a new connection takes the place of the connection that
has been idle longest (closed), so idle keep-alive sockets cannot starve new requests; only when
every open connection is busy does it get an immediate 503 with ``Retry-After``. A request must
arrive within ``read_timeout`` (see :mod:`jevlaya_lab.local.limits`).
``stop()`` stops accepting, aborts running answers, closes every open connection and frees the
port. The same server runs as a process with ``jevlaya-lab serve``.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import select
import socket
import struct
import sys
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from http.server import ThreadingHTTPServer
from types import TracebackType
from typing import TYPE_CHECKING, Any

from jevlaya_lab.local import wire
from jevlaya_lab.local.errors import ChatRequestError, UnknownModelError
from jevlaya_lab.local.faults import FaultProfile, FaultSwitch
from jevlaya_lab.local.handler import ChatHandler
from jevlaya_lab.local.limits import (
    BUSY_RETRY_AFTER_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_READ_TIMEOUT_S,
    DeadlineReader,
)

if TYPE_CHECKING:
    from jevlaya_lab.local.generation import ChatBackend as ChatModel

STOP_JOIN_SECONDS = 5.0
REFUSE_WAIT_S = 1.0  # how long a refused connection may take to send its request and read the 503
logger = logging.getLogger("jevlaya_lab.local.server")


class _HTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that remembers its open connections so stop() can close them."""

    daemon_threads = True
    allow_reuse_address = True
    # a burst of clients (50 broker callers at once) must queue, not be reset by a backlog of 5
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], app: Server) -> None:
        self.app = app
        self._open: dict[socket.socket, threading.Thread] = {}
        self._readers: dict[socket.socket, DeadlineReader] = {}  # what each open connection awaits
        self._refusing = 0  # connections being told 503 (bounded too)
        self._open_lock = threading.Lock()
        super().__init__(address, ChatHandler)

    @property
    def open_connections(self) -> int:
        with self._open_lock:
            return len(self._open)

    def track(self, sock: socket.socket, reader: DeadlineReader) -> None:
        """Called by each connection's handler, so an idle one can make room for a new one."""
        with self._open_lock:
            if sock in self._open:
                self._readers[sock] = reader

    def _evict_idle(self) -> bool:
        """Close the connection idle longest (holding ``_open_lock``); False if none is idle."""
        idle = sorted((reader.idle_since, id(sock), sock) for sock, reader in self._readers.items() if reader.idle)
        for _, _, sock in idle:
            if _has_pending_data(sock):
                continue  # its request has arrived and is about to be read: not idle
            del self._readers[sock]
            self._open.pop(sock, None)  # its place is free now; its thread ends on end-of-file
            _shutdown(sock, socket.SHUT_RDWR)
            return True
        return False

    # request and client_address keep socketserver's own types (Any in its stubs): these
    # methods override BaseServer's, which narrowing would break
    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            busy = len(self._open) >= self.app.max_connections and not self._evict_idle()
            if busy and self._refusing >= self.app.max_connections:
                _abort(request)  # refusing politely is itself at its limit
                return
            target = self._refuse if busy else self.process_request_thread
            thread = threading.Thread(target=target, args=(request, client_address),
                                      name="jevlaya-local-conn", daemon=True)
            if busy:
                self._refusing += 1
            else:
                self._open[request] = thread
        thread.start()

    def _refuse(self, request: socket.socket, client_address: Any) -> None:
        """Answer a connection over the limit with a JSON 503 and ``Retry-After``, then close.

        The request is read (up to the end of its headers, within ``REFUSE_WAIT_S``) before
        answering, and the connection is drained after, so the client sees the 503 rather than
        a reset.
        """
        deadline = time.monotonic() + REFUSE_WAIT_S
        try:
            received = b""
            while b"\r\n\r\n" not in received and len(received) < 65536 and _wait_until(request, deadline):
                piece = request.recv(65536)
                if not piece:
                    break
                received += piece
            body = json.dumps(wire.error(503, f"the server is busy: {self.app.max_connections} connections "
                                              f"are open, its limit; retry in {BUSY_RETRY_AFTER_S} s",
                                         code="server_busy")).encode()
            request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                            b"Content-Length: %d\r\nRetry-After: %d\r\nConnection: close\r\n\r\n%s"
                            % (len(body), BUSY_RETRY_AFTER_S, body))
            request.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + REFUSE_WAIT_S
            while _wait_until(request, deadline) and request.recv(65536):
                pass
        except OSError:
            pass
        finally:
            request.close()
            with self._open_lock:
                self._refusing -= 1

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.pop(request, None)
            self._readers.pop(request, None)
        if self.app.stopping.is_set():
            _abort(request)  # no FIN handshake, so no TIME_WAIT left holding the port
            return
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log (never print) failures; a client that vanished is routine, not an error."""
        if self.app.stopping.is_set() or isinstance(sys.exc_info()[1], ConnectionError):
            logger.debug("connection from %s ended abruptly", client_address, exc_info=True)
        else:
            logger.exception("unexpected failure serving %s", client_address)

    def close_connections(self, timeout: float) -> None:
        """Wake every connection thread (reads return end-of-file), wait, then abort stragglers."""
        with self._open_lock:
            open_now = list(self._open.items())
        for sock, _ in open_now:
            _shutdown(sock, socket.SHUT_RD)
        deadline = time.monotonic() + timeout
        for sock, thread in open_now:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():  # e.g. blocked writing to a client that stopped reading
                _shutdown(sock, socket.SHUT_RDWR)


def _wait_until(sock: socket.socket, deadline: float) -> bool:
    """Set the socket's timeout to what is left before ``deadline``; False when nothing is."""
    left = deadline - time.monotonic()
    if left <= 0:
        return False
    sock.settimeout(left)
    return True


def _has_pending_data(sock: socket.socket) -> bool:
    """Whether bytes (or an end-of-file) wait to be read on ``sock``, without blocking."""
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no poll() (Windows): treat as idle
        return False


def _shutdown(sock: socket.socket, how: int) -> None:
    try:
        sock.shutdown(how)
    except OSError:
        pass


def _abort(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0) rather than a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class Server:
    """A running local server; use ``with serve(...) as server:`` or call ``stop()``."""

    def __init__(self, models: Mapping[str, ChatModel] | Sequence[ChatModel], *,
                 faults: Mapping[str, FaultProfile | None] | None = None, host: str = "127.0.0.1",
                 port: int = 0, api_key: str | None = None, read_timeout: float = DEFAULT_READ_TIMEOUT_S,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        self._models = _named(models)
        if isinstance(read_timeout, bool) or not isinstance(read_timeout, (int, float)) \
                or not 0 < read_timeout < float("inf"):
            raise ChatRequestError("read_timeout", read_timeout, "use a number of seconds > 0, e.g. 30")
        if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
            raise ChatRequestError("max_connections", max_connections, "use a whole number >= 1, e.g. 128")
        self.read_timeout = float(read_timeout)
        self.max_connections = max_connections
        if api_key is not None and (not isinstance(api_key, str) or not api_key):
            raise ChatRequestError("api_key", "<hidden>", "use a non-empty string or None for no key check")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ChatRequestError("port", port, "use 0 (any free port) or a port from 1 to 65535")
        if not _is_loopback(host):
            warnings.warn(f"serving local models on host={host!r}: other machines may reach them; "
                          "use 127.0.0.1 unless you mean it", stacklevel=3)
        self.api_key = api_key
        self.created = int(time.time())
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._calls = dict.fromkeys(self._models, 0)
        self._faults: dict[str, FaultSwitch] = {}
        for name, profile in (faults or {}).items():
            self.set_fault(name, profile)
        try:
            self._httpd = _HTTPServer((host, port), self)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot bind {host}:{port} ({exc.strerror}); "
                                     "choose another port, or port=0 for any free one") from exc
        self.host = host
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"jevlaya-local-server:{self.port}", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. ``http://127.0.0.1:8765/v1``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    @property
    def model_names(self) -> list[str]:
        return list(self._models)

    def __repr__(self) -> str:
        state = "stopped" if self.stopping.is_set() else "running"
        with self._lock:
            models = ", ".join(f"{name} ({self._calls[name]} calls"
                               + (f", fault {self._faults[name].profile}" if name in self._faults else "") + ")"
                               for name in self._models)
        return f"<Server {self.base_url} {state}: {models}>"

    def model_for(self, name: str) -> ChatModel | None:
        return self._models.get(name)

    def set_fault(self, name: str, profile: FaultProfile | None) -> None:
        """Install (or with ``None`` remove) the fault profile of model ``name``, at run time."""
        self._check_name(name)
        if profile is not None and not isinstance(profile, FaultProfile):
            raise ChatRequestError("profile", profile, "pass a FaultProfile or None")
        with self._lock:
            if profile is None:
                self._faults.pop(name, None)
            else:
                self._faults[name] = FaultSwitch(profile)

    def fault(self, name: str) -> FaultProfile | None:
        """The fault profile installed for model ``name``, if any."""
        self._check_name(name)
        with self._lock:
            switch = self._faults.get(name)
        return switch.profile if switch else None

    def request_count(self, name: str) -> int:
        """Chat completion requests received for model ``name`` (faulted ones included)."""
        self._check_name(name)
        with self._lock:
            return self._calls[name]

    def next_call(self, name: str) -> FaultProfile | None:
        """Count a chat request for ``name``; return the fault profile that applies to it."""
        with self._lock:
            self._calls[name] += 1
            switch = self._faults.get(name)
        return switch.next_call() if switch else None

    def stop(self) -> None:
        """Stop serving, abort answers in progress, close connections, free the port (idempotent)."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd.close_connections(STOP_JOIN_SECONDS)
        self._thread.join(STOP_JOIN_SECONDS)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server is stopped (or ``timeout`` passes); True if it stopped."""
        return self.stopping.wait(timeout)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _check_name(self, name: str) -> None:
        if name not in self._models:
            raise UnknownModelError(name, self.model_names)


def serve(models: Mapping[str, ChatModel] | Sequence[ChatModel], *,
          faults: Mapping[str, FaultProfile | None] | None = None, host: str = "127.0.0.1",
          port: int = 0, api_key: str | None = None, read_timeout: float = DEFAULT_READ_TIMEOUT_S,
          max_connections: int = DEFAULT_MAX_CONNECTIONS) -> Server:
    """Serve ``models`` (a list, named by ``.name``, or a name -> model dict) in the background.

    ``port=0`` picks a free port (see ``server.port``); ``api_key`` makes every request send
    ``Authorization: Bearer <api_key>``; ``faults`` maps model names to ``FaultProfile``s;
    ``read_timeout`` (seconds for a whole request to arrive) and ``max_connections`` bound what
    clients may hold (see :mod:`jevlaya_lab.local.limits`).
    """
    return Server(models, faults=faults, host=host, port=port, api_key=api_key,
                  read_timeout=read_timeout, max_connections=max_connections)


def _named(models: Mapping[str, ChatModel] | Sequence[ChatModel]) -> dict[str, ChatModel]:
    named: dict[Any, ChatModel] = {}  # a name that is not a non-empty str is refused below
    if isinstance(models, Mapping):
        named = dict(models)
    elif isinstance(models, Sequence) and not isinstance(models, (str, bytes)):
        for model in models:
            name = getattr(model, "name", None)
            if name in named:
                raise ChatRequestError("models", name, "two models share this name; pass a dict "
                                                       "{name: model} to serve them under distinct names")
            named[name] = model
    else:
        raise ChatRequestError("models", models, "pass a list of ChatModel or a dict {name: ChatModel}")
    if not named:
        raise ChatRequestError("models", models, "serve at least one model, e.g. [tiny_chat_model()]")
    for name, model in named.items():
        # duck-typed so that importing the server does not import torch
        if not isinstance(name, str) or not name or not callable(getattr(model, "generate", None)):
            raise ChatRequestError(f"models[{name!r}]", model,
                                   "each entry must be a ChatModel under a non-empty string name")
    return named


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
