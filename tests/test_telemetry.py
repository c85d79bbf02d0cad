"""OpenTelemetry export: a System-1 -> LLM escalation arrives as one span tree on a real OTLP/HTTP
receiver on 127.0.0.1 (decoded with opentelemetry-proto), live and from the journal after the fact,
with no state, prompt, redacted field or key in what was sent."""

from __future__ import annotations

import http.server
import threading

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from jevlaya_lab import Agent, Broker
from jevlaya_lab.decisions.testing import make_tiny_checkpoint
from jevlaya_lab.hooks.redaction import RedactionHook
from jevlaya_lab.telemetry import TelemetryError, TraceExporter, gen_ai_system

SECRET_STATE = "Please refund me, write to jane.doe@example.org about order 4411"
SECRET_KEY = "sk-test-0123456789abcdefSECRET"


class Receiver:
    """An OTLP/HTTP trace receiver: keeps every raw body and the decoded spans."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.paths.append(self.path)
                receiver.bodies.append(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.timeout = 5
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list:
        found = []
        for body in self.bodies:
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    found.extend(scope.spans)
        return found

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.stop()


def attrs(span) -> dict:
    out = {}
    for kv in span.attributes:
        v = kv.value
        kind = v.WhichOneof("value")
        out[kv.key] = list(x.string_value for x in v.array_value.values) if kind == "array_value" \
            else getattr(v, kind)
    return out


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("otel") / "tiny-en", seed=0)


def test_an_escalation_arrives_as_one_span_tree_live_and_from_the_journal(receiver, tiny_checkpoint, tmp_path):
    exporter = TraceExporter(receiver.url, batch=False)
    agent = Agent(tiny_checkpoint, hooks=[RedactionHook(), exporter])
    questions = {"intent": {"type": "choice", "instructions": "What does the customer want?",
                            "criteria": ["refund", "delivery", "account"]}}
    broker = Broker(tmp_path / "journal.db", catalog=[], secrets={"TINY_KEY": SECRET_KEY},
                    models=[{"name": "local/tiny", "base_url": "local://tiny", "model": "tiny",
                             "api_key_ref": "TINY_KEY"}])
    exporter.watch(broker)
    try:
        with exporter.span("ticket", ticket=42):
            answer = agent.predict(SECRET_STATE, questions, min_confidence=0.99)["answers"]["intent"]
            assert answer["abstention"] == "abstained"  # a random tiny head is never that sure
            reply = broker.ask(f"Classify: {SECRET_STATE}", operation="escalation", max_tokens=4)
        assert exporter.flush()
        live = receiver.spans()
        by_name = {s.name: s for s in live}
        ticket = by_name["ticket"]
        decide = by_name["decide tiny-en"]
        call = by_name["llm escalation"]
        attempt = by_name["chat tiny"]
        # the tree: ticket -> (decision, LLM call -> attempt), all in one trace
        assert {s.trace_id for s in live} == {ticket.trace_id}
        assert decide.parent_span_id == ticket.span_id and call.parent_span_id == ticket.span_id
        assert attempt.parent_span_id == call.span_id
        assert [e.name for e in decide.events] == ["on_predict_start", "on_predict_end"]
        d = attrs(decide)
        assert d["jevlaya.answer.intent.abstention"] == "abstained"
        assert d["jevlaya.decision.abstained"] == 1 and d["jevlaya.decision.questions"] == ["intent"]
        a = attrs(attempt)
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.system"] == "local"
        assert a["gen_ai.request.model"] == "tiny" and a["jevlaya.status"] == "ok"
        assert a["gen_ai.usage.output_tokens"] == reply.usage["completion_tokens"]
        assert a["gen_ai.usage.input_tokens"] == reply.usage["prompt_tokens"]
        assert a["gen_ai.response.finish_reasons"] == [reply.finish_reason]
        assert a["jevlaya.call_id"] == reply.call_id
        assert attempt.start_time_unix_nano >= call.start_time_unix_nano
        assert attempt.end_time_unix_nano <= call.end_time_unix_nano <= ticket.end_time_unix_nano

        # after the fact: the same call from the journal, with the recorded times
        receiver.bodies.clear()
        assert exporter.export_journal(broker) == 1
        assert exporter.flush()
        replayed = {s.name: s for s in receiver.spans()}
        again = replayed["chat tiny"]
        assert replayed["llm escalation"].span_id == again.parent_span_id
        b = attrs(again)
        for key in ("gen_ai.system", "gen_ai.request.model", "gen_ai.usage.input_tokens",
                    "gen_ai.usage.output_tokens", "jevlaya.call_id", "jevlaya.status"):
            assert b[key] == a[key], key
        elapsed = (again.end_time_unix_nano - again.start_time_unix_nano) / 1e6
        assert abs(elapsed - b["jevlaya.latency_ms"]) < 1.0
    finally:
        broker.close()
        exporter.close()
    assert set(receiver.paths) == {"/v1/traces"}
    sent = b"".join(receiver.bodies)
    for secret in (b"jane.doe", b"4411", b"Classify", SECRET_KEY.encode(), b"TINY_KEY", b"refund me"):
        assert secret not in sent, secret


def test_failed_attempts_and_routes_carry_their_error_and_decision(receiver, tmp_path):
    exporter = TraceExporter(receiver.url, batch=False)
    # a model nobody serves: connection refused, an error span with the journal's status
    broker = Broker(tmp_path / "j.db", catalog=[], models=[
        {"name": "gone", "base_url": "http://127.0.0.1:9/v1", "model": "gone-1"}])
    exporter.watch(broker)
    try:
        with pytest.raises(Exception):
            broker.ask("hello", max_tokens=2, wait=5)
    finally:
        broker.close()
    from jevlaya_lab import Router
    router = Router(hooks=[exporter])
    router.route("Me cobraron dos veces la factura.")
    exporter.close()
    spans = {s.name: s for s in receiver.spans()}
    failed = spans["chat gone-1"]
    assert attrs(failed)["error.type"] == "unavailable" and failed.status.code == 2  # ERROR
    assert failed.status.message
    route = attrs(spans["route multilingual"])
    assert route["jevlaya.route.source"] == "detection" and route["jevlaya.route.language"] == "es"


def test_bad_arguments_name_the_field():
    with pytest.raises(TelemetryError, match="endpoint="):
        TraceExporter("127.0.0.1:4318")
    assert gen_ai_system("https://api.openai.com/v1") == "openai"
    assert gen_ai_system("local://smollm2") == "local"
