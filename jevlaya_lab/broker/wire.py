"""``Wire``: the broker's HTTP/1.1 requests, sent over httpcore's connection pools.

The broker sends one kind of request, a JSON POST whose answer is read whole or as a stream of
lines, to a few hosts, many times. httpx's ``AsyncClient`` is built for every kind: per request
it builds a ``Request`` model, merges cookies, auth, params and event hooks, applies a redirect
policy, and wraps the answer in a ``Response`` with lazy decoding. None of it applies here, and
on a loopback endpoint that answers at once it costs about 0.15 ms a call (p50 0.50 ms with
``AsyncClient.post`` against 0.35 ms with the same request on httpcore's pool, interleaved,
1,200 calls; ``bench/broker.py`` measures what the broker adds over such a call). So the wire
talks to httpcore, the layer httpx itself sends through, and keeps what the broker relied on
httpx for:

- connection reuse: a keep-alive pool of up to 256 connections, 64 kept idle;
- timeouts: 10 s to connect, 30 s to write; reads are bounded by the caller's budget;
- TLS verified against the same certificates (``httpx.create_ssl_context``: certifi's, or
  ``$SSL_CERT_FILE`` / ``$SSL_CERT_DIR``);
- proxies from the environment, read once when the wire is made: ``HTTPS_PROXY`` for https
  URLs, ``HTTP_PROXY`` for http ones, ``ALL_PROXY`` for both (lower-case names too), and the
  hosts in ``NO_PROXY`` reached directly (:func:`_bypassed` says how an entry matches).
  Credentials in a proxy URL are sent as Basic proxy authorisation. A ``socks5://`` proxy needs
  the ``socksio`` package; without it every request through it fails with a message saying so;
- the answer's ``Content-Encoding``: gzip and deflate are asked for and decoded; an encoding not
  asked for fails the request (:class:`DecodingError`);
- errors: httpcore's exceptions, whose names and messages httpx repeats (``ConnectError``,
  ``ReadTimeout``, ``RemoteProtocolError`` ...), all listed in :data:`WIRE_ERRORS`.

The request body is JSON encoded as httpx encodes it (UTF-8, compact, NaN refused).
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.parse
import urllib.request
import zlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import httpcore
import httpx

TIMEOUTS: dict[str, float | None] = {"connect": 10.0, "read": None, "write": 30.0, "pool": None}
MAX_CONNECTIONS, MAX_KEEPALIVE = 256, 64
USER_AGENT = b"jevlaya-lab"
_EOL = re.compile(rb"\r\n|\r|\n")


class DecodingError(Exception):
    """An answer whose ``Content-Encoding`` was not asked for or does not decode."""


WIRE_ERRORS: tuple[type[Exception], ...] = (
    httpcore.NetworkError, httpcore.TimeoutException, httpcore.ProtocolError,
    httpcore.ProxyError, httpcore.UnsupportedProtocol, DecodingError)
"""What a request can raise when the network, the peer or a proxy fails it."""


class _Decoder:
    """Undoes one ``Content-Encoding`` (identity, gzip or deflate), chunk by chunk."""

    def __init__(self, encoding: str | None) -> None:
        name = (encoding or "identity").strip().lower()
        if name in ("identity", ""):
            self._zlib = None
        elif name in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif name == "deflate":
            self._zlib = zlib.decompressobj()
        else:
            raise DecodingError(f"Content-Encoding {encoding!r} was not asked for "
                                "(the broker accepts gzip and deflate)")

    def feed(self, data: bytes) -> bytes:
        if self._zlib is None:
            return data
        try:
            return self._zlib.decompress(data)
        except zlib.error as exc:
            raise DecodingError(f"the body does not decode as its Content-Encoding: {exc}") from None


class Response:
    """An answer: ``status_code``, ``headers`` (lower-case names; a repeated header's values
    joined by ", ") and its body, read whole (``aread``, which :meth:`Wire.post` calls; then
    ``content``) or as it arrives (``aiter_lines``, then ``aclose``)."""

    def __init__(self, raw: httpcore.Response) -> None:
        self.status_code = raw.status
        headers: dict[str, str] = {}
        for name, value in raw.headers:
            key, text = name.decode("latin-1").lower(), value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        self.headers = headers
        self._raw = raw
        self._decoder = _Decoder(headers.get("content-encoding"))
        self.content = b""  # the decoded body, once aread has read it

    async def aread(self) -> bytes:
        """Read (and decode) the rest of the body."""
        self.content = b"".join([piece async for piece in self._aiter_bytes()])
        return self.content

    async def _aiter_bytes(self) -> AsyncIterator[bytes]:
        async for chunk in self._raw.aiter_stream():
            data = self._decoder.feed(chunk)
            if data:
                yield data

    async def aiter_lines(self) -> AsyncIterator[str]:
        """The body's lines as they arrive, without their ends (CR LF, LF or CR, as
        server-sent events allow), decoded as UTF-8 (an invalid byte becomes U+FFFD)."""
        pending = b""
        async for chunk in self._aiter_bytes():
            pending += chunk
            # a CR at the end may be the first half of CR LF: keep it for the next chunk
            end = len(pending) - 1 if pending.endswith(b"\r") else len(pending)
            lines = _EOL.split(pending[:end])
            pending = lines.pop() + pending[end:]
            for line in lines:
                yield line.decode("utf-8", "replace")
        if pending:
            yield pending.rstrip(b"\r").decode("utf-8", "replace")

    async def aclose(self) -> None:
        await self._raw.aclose()


def _encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode("utf-8")


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` sends ``host`` direct: ``*`` for every host; otherwise each
    comma-separated entry names a host and its subdomains (``example.com``, ``.example.com`` and
    ``*.example.com`` alike) or an IP address, optionally with ``:port`` to match only that port."""
    host = host.lower().strip("[]")
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if entry == "*":
            return True
        if not entry:
            continue
        name, _, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry_port and (not entry_port.isdigit() or int(entry_port) != port):
            continue
        name = name.removeprefix("*").removeprefix(".").strip("[]")
        if host == name or host.endswith("." + name):
            return True
    return False


class Wire:
    """Connection pools (one direct, one per proxy in use) and the two requests the broker
    sends. Made outside an event loop it holds nothing loop-bound until its first request;
    ``aclose()`` closes every connection."""

    def __init__(self) -> None:
        self._proxies = urllib.request.getproxies_environment()
        self._ssl: ssl.SSLContext | None = None
        self._pools: dict[str | None, httpcore.AsyncConnectionPool] = {}
        self._routes: dict[str, tuple[str | None, bytes]] = {}  # URL -> (proxy, Host header)

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context()
        return self._ssl

    def _route(self, url: str) -> tuple[str | None, bytes]:
        """(the proxy URL or ``None`` for a direct connection, the Host header) of ``url``."""
        route = self._routes.get(url)
        if route is None:
            parts = urllib.parse.urlsplit(url)
            proxy = None
            if not _bypassed(parts.hostname or "", parts.port, self._proxies.get("no", "")):
                proxy = self._proxies.get(parts.scheme) or self._proxies.get("all")
            host = parts.netloc.rpartition("@")[2]
            route = self._routes[url] = (proxy, host.encode("ascii" if host.isascii() else "idna"))
        return route

    def _pool(self, proxy: str | None) -> httpcore.AsyncConnectionPool:
        pool = self._pools.get(proxy)
        if pool is None:
            pool = self._pools[proxy] = self._make_pool(proxy)
        return pool

    def _make_pool(self, proxy: str | None) -> httpcore.AsyncConnectionPool:
        limits: dict[str, Any] = {"ssl_context": self._ssl_context(),
                                  "max_connections": MAX_CONNECTIONS,
                                  "max_keepalive_connections": MAX_KEEPALIVE}
        if proxy is None:
            return httpcore.AsyncConnectionPool(**limits)
        parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        auth = None
        if parts.username is not None:
            auth = (urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or ""))
        # what httpcore is given and what a message shows: never the credentials
        plain = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        if parts.scheme in ("socks5", "socks5h"):
            try:
                import socksio  # noqa: F401 - httpcore's SOCKS support needs it
            except ImportError:
                raise httpcore.ProxyError(
                    f"the proxy {plain} (from ALL_PROXY/HTTPS_PROXY/HTTP_PROXY) is a SOCKS "
                    "proxy, which needs the socksio package: pip install socksio") from None
            return httpcore.AsyncSOCKSProxy(proxy_url=plain, proxy_auth=auth, **limits)
        if parts.scheme not in ("http", "https"):
            raise httpcore.ProxyError(
                f"the proxy {plain} (from ALL_PROXY/HTTPS_PROXY/HTTP_PROXY) has the scheme "
                f"{parts.scheme!r}: give an http://, https:// or socks5:// proxy URL")
        return httpcore.AsyncHTTPProxy(proxy_url=plain, proxy_auth=auth, **limits)

    def _send(self, url: str, key: str | None,
              body: dict[str, Any]) -> Coroutine[Any, Any, httpcore.Response]:
        proxy, host = self._route(url)
        data = _encode(body)
        headers = [(b"Host", host), (b"Accept", b"*/*"), (b"Accept-Encoding", b"gzip, deflate"),
                   (b"Content-Type", b"application/json"),
                   (b"Content-Length", str(len(data)).encode()), (b"User-Agent", USER_AGENT)]
        if key:
            headers.append((b"Authorization", f"Bearer {key}".encode("ascii")))
        request = httpcore.Request("POST", url, headers=headers, content=data,
                                   extensions={"timeout": TIMEOUTS})
        return self._pool(proxy).handle_async_request(request)

    async def post(self, url: str, key: str | None, body: dict[str, Any]) -> Response:
        """POST ``body`` as JSON and read the whole answer (raises one of :data:`WIRE_ERRORS`).
        ``key``, when given, is sent as a Bearer token."""
        raw = await self._send(url, key, body)
        try:
            response = Response(raw)
            await response.aread()  # decoded here: a body that does not decode fails the request
        finally:
            await raw.aclose()
        return response

    async def open(self, url: str, key: str | None, body: dict[str, Any]) -> Response:
        """POST ``body`` as JSON and return the answer with its body still open: the caller
        reads it and must ``aclose()`` it (raises one of :data:`WIRE_ERRORS`)."""
        raw = await self._send(url, key, body)
        try:
            return Response(raw)
        except BaseException:
            await raw.aclose()
            raise

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.aclose()
