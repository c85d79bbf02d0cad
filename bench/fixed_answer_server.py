"""A loopback OpenAI-compatible endpoint that answers every chat request at once with the same
one-word completion (``python bench/fixed_answer_server.py PORT``).

``bench/broker.py`` compares what two brokers add over a plain httpx call; a model's generation
time varies call to call by more than that, so this comparison uses an endpoint that takes no
time to answer. Keep-alive HTTP/1.1, one thread per connection; it exits after ``--stop-after``
seconds (default 900) so a crashed benchmark leaves nothing running.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWER = json.dumps({
    "id": "chatcmpl-fixed", "object": "chat.completion", "created": 0, "model": "a",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}).encode()
MODELS = json.dumps({"object": "list", "data": [{"id": "a", "object": "model"}]}).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _send(self, body: bytes) -> None:
        # one write per answer: split small writes would meet delayed ACKs
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    def do_GET(self) -> None:  # noqa: N802 - the http.server hook name
        self._send(MODELS)

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(ANSWER)

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--stop-after", type=float, default=900.0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    threading.Timer(args.stop_after, server.shutdown).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
