"""Fault injection in the local server: how a ``FaultProfile`` changes an answer on the wire.

A profile (see :mod:`jevlaya_lab.local.faults`) decides per call what goes wrong; this handler
layer makes it happen as a failing provider would: an HTTP error status with ``Retry-After``,
a garbage body, a key echoed into the text, delays before the first token and between tokens,
a connection cut after N tokens. Delays wait on the server's stop signal, so stopping the
server ends them at once.
"""

from __future__ import annotations

from collections.abc import Callable

from jevlaya_lab.local import wire
from jevlaya_lab.local.faults import FaultProfile
from jevlaya_lab.local.protocol import JsonHTTPHandler

GARBAGE = "<html><body><h1>502 Bad Gateway</h1>(simulated garbage from a fault profile)</body></html>"


class Cut(Exception):
    """Raised inside generation to drop the connection on purpose (``cut_after``)."""


class Stopping(Exception):
    """The server is stopping: abandon the request."""


class FaultInjectingHandler(JsonHTTPHandler):
    """The fault side of answering: statuses, garbage, echoed keys, pacing and cuts."""

    def _send_fault_status(self, fault: FaultProfile) -> None:
        headers = {}
        if fault.retry_after is not None:
            headers["Retry-After"] = f"{fault.retry_after:g}"
        status = fault.status or 500
        code = {429: "rate_limit_exceeded", 503: "overloaded"}.get(status)
        message = self._echo_key(f"simulated HTTP {status} from a fault profile", fault)
        self._send_error(status, message, code=code, headers=headers)

    def _send_garbage(self, fault: FaultProfile, stream: bool) -> None:
        garbage = self._echo_key(GARBAGE, fault)
        if not stream:
            self._send_json(200, garbage, content_type="application/json")
            return
        self._start_stream()
        self._write_chunk(wire.sse(garbage))
        self._write_chunk(b"")

    def _echo_key(self, text: str, fault: FaultProfile) -> str:
        """``text`` with the request's API key written in at ``fault.echo_key`` (padded with dots)."""
        if fault.echo_key is None:
            return text
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        head = text[:fault.echo_key].ljust(fault.echo_key, ".")
        return f"{head}{key} was used{text[fault.echo_key:]}"

    def _paced(self, fault: FaultProfile | None,
               send: Callable[[str], object]) -> Callable[[str], None]:
        """Wrap ``send(piece)`` with the fault's delays and cut, and the server's stop signal."""
        stopping = self.app.stopping
        sent = 0

        def on_token(piece: str) -> None:
            nonlocal sent
            delay = 0.0 if fault is None else (fault.first_token_delay if sent == 0 else fault.token_delay)
            if (delay and stopping.wait(delay)) or stopping.is_set():
                raise Stopping
            send(piece)
            sent += 1
            if fault is not None and fault.cut_after is not None and sent >= fault.cut_after:
                raise Cut

        return on_token
