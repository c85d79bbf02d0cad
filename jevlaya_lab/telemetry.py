"""OpenTelemetry traces of decisions and LLM calls, sent over OTLP/HTTP to any collector.

:class:`TraceExporter` turns what the workbench shows in the notebook into spans that leave it
(Phoenix, Langfuse, Jaeger, an OpenTelemetry Collector: anything that takes OTLP over HTTP):

- **Decisions** (``Agent``/``Router`` calls, as a hook: ``hooks=[exporter]``): one span per
  predict run, named ``decide <checkpoint>``, with each hook event (``on_route``, ``on_load``,
  ``on_predict_start``, ``on_predict_end``, ``on_error``) as a span event and the routing decision
  (``jevlaya.route.*``: model, source, reason, language, script) and the answers' outcome
  (``jevlaya.decision.*``: questions, abstentions, and for one state each answer's value and
  confidence) as attributes. A bare ``router.route()`` is a ``route`` span of its own.
- **LLM calls** (``exporter.watch(broker)``): one ``llm <operation>`` span per ``ask``/``chat``,
  and under it one span per attempt, which is one per race lane and failover step, following the
  OpenTelemetry GenAI semantic conventions: ``gen_ai.operation.name`` ``chat``,
  ``gen_ai.system`` / ``gen_ai.provider.name`` (from the model's URL), ``gen_ai.request.model``,
  ``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.response.finish_reasons``; a failed
  attempt has ``error.type`` (its journal status: ``rate_limited``, ``unavailable``, ...) and an
  error status with the journal's (already redacted) detail, and a race's losing lanes are
  ``superseded``. Stream attempts are spans under whatever span is current when they start.
- **After the fact** (:meth:`TraceExporter.export_journal`): the same call and attempt spans,
  with their recorded times, from a journal (a broker, a SQLite path or a PostgreSQL URL).

Nesting follows OpenTelemetry's current span: open ``exporter.span("case 42")`` (or any span of
your own tracer) around a decision and the escalation it causes and both land in one trace. The
sync ``Broker`` carries the caller's context to its loop thread, so this works across it.

What never leaves: state texts, prompts and answers (not even when the journal stores them with
``store_text=True``), question instructions, API keys and key references. Error texts are the
journal's, which redacts keys before clipping; they are passed through
:func:`~jevlaya_lab.secrets.scrub_secrets` once more on the way out. A demanding user
would want prompts exported as an opt-in; this exporter deliberately has no such switch, so a
redacted field can never reach a collector by a flag set in a notebook.

Needs ``pip install 'jevlaya-lab[otel]'`` (``opentelemetry-sdk`` and the OTLP/HTTP exporter).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jevlaya_lab.errors import JevlayaError
from jevlaya_lab.hooks.base import BaseHook
from jevlaya_lab.journal.sources import open_store
from jevlaya_lab.secrets import scrub_secrets as redact_secrets

__all__ = ["TelemetryError", "TraceExporter", "gen_ai_system"]

# provider host fragments -> gen_ai.system values of the GenAI semantic conventions
_SYSTEMS = (("openai.com", "openai"), ("anthropic.com", "anthropic"), ("groq.com", "groq"),
            ("mistral.ai", "mistral_ai"), ("deepseek.com", "deepseek"), ("x.ai", "xai"),
            ("cohere", "cohere"), ("googleapis.com", "gcp.gemini"), ("perplexity.ai", "perplexity"),
            ("openrouter.ai", "openrouter"), ("together", "together"), ("azure", "az.ai.inference"))
_OPEN_LIMIT = 4096  # predict runs and attempts kept open at once; older ones are ended as lost


class TelemetryError(JevlayaError, ValueError):
    """A bad exporter argument (endpoint, headers); the message names the field and the fix."""


def gen_ai_system(base_url: str) -> str:
    """The ``gen_ai.system`` value for a model's base URL: a well-known provider's name,
    ``local`` for the embedded models and loopback servers, else the URL's host."""
    if base_url.startswith("local://"):
        return "local"
    host = (urlsplit(base_url).hostname or "").lower()
    if host in ("127.0.0.1", "localhost", "::1") or host.startswith("127."):
        return "local"
    for fragment, system in _SYSTEMS:
        if fragment in host:
            return system
    return host or "unknown"


def _short(model: Any) -> str:
    """A checkpoint's short name: a directory path becomes its last part."""
    text = str(model) if model is not None else "unknown"
    return Path(text).name if ("/" in text or "\\" in text) else text


def _ns(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1e9)


def _scalar_attributes(prefix: str, values: Mapping[str, Any]) -> dict[str, Any]:
    return {f"{prefix}{k}": v for k, v in values.items()
            if isinstance(v, (str, bool, int, float)) and v is not None}


class TraceExporter(BaseHook):
    """Spans of decisions (as a hook) and Broker calls (``watch``) sent over OTLP/HTTP.

    ``endpoint``: the collector's base URL (``http://127.0.0.1:4318``; ``/v1/traces`` is added
    unless the URL already ends with it); ``None`` reads ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as the OTLP exporter does. ``headers``: extra HTTP
    headers (a Langfuse ``Authorization``); they go to the collector only and are never put on a
    span. ``tracer_provider``: use your own provider instead (the exporter then adds no
    processor and ``flush``/``close`` act on that provider). ``batch=False`` sends every span as
    it ends (tests, short scripts); the default batches them in the background.
    """

    def __init__(self, endpoint: str | None = None, *, service_name: str = "jevlaya_lab",
                 headers: Mapping[str, str] | None = None, tracer_provider: Any = None,
                 batch: bool = True, timeout: float = 10.0) -> None:
        try:
            from opentelemetry import trace
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        except ImportError as exc:  # pragma: no cover - the extra is part of dev
            raise ImportError("TraceExporter needs opentelemetry-sdk and the OTLP/HTTP exporter: "
                              "pip install 'jevlaya-lab[otel]'") from exc
        self._trace = trace
        self._own_provider = tracer_provider is None
        if tracer_provider is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            if endpoint is not None:
                if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
                    raise TelemetryError(f"endpoint={endpoint!r}: must be the collector's http(s) URL, "
                                         "such as 'http://127.0.0.1:4318'")
                endpoint = endpoint.rstrip("/")
                if not endpoint.endswith("/v1/traces"):
                    endpoint += "/v1/traces"
            if headers is not None and not all(isinstance(k, str) and isinstance(v, str)
                                               for k, v in headers.items()):
                raise TelemetryError("headers=: must map header names to string values, such as "
                                     "{'Authorization': 'Basic ...'}")
            exporter = OTLPSpanExporter(endpoint=endpoint, headers=dict(headers or {}), timeout=timeout)
            tracer_provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
            processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
            tracer_provider.add_span_processor(processor)
        self.provider = tracer_provider
        self.tracer = tracer_provider.get_tracer("jevlaya_lab")
        self._lock = threading.Lock()
        self._runs: OrderedDict[str, Any] = OrderedDict()  # run_id -> open decision span
        self._routes: OrderedDict[str, dict[str, Any]] = OrderedDict()  # run_id -> route attributes
        self._attempts: OrderedDict[str, Any] = OrderedDict()  # call_id -> open attempt span

    # spans of your own ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def span(self, name: str, **attributes: Any) -> Iterator[Any]:
        """A span of your own, current while the block runs: the decisions and LLM calls made
        inside nest under it (``with exporter.span("ticket 42", ticket=42): ...``)."""
        with self.tracer.start_as_current_span(name, attributes=attributes) as span:
            yield span

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Send every ended span now; True when the collector took them all in time."""
        return bool(self.provider.force_flush(int(timeout_s * 1000)))

    def close(self) -> None:
        """End spans still open (as lost), send everything and stop the exporter's provider."""
        with self._lock:
            left = list(self._runs.values()) + list(self._attempts.values())
            self._runs.clear()
            self._attempts.clear()
        for span in left:
            span.set_attribute("jevlaya.lost", True)
            span.end()
        self.flush()
        if self._own_provider:
            self.provider.shutdown()

    def __enter__(self) -> TraceExporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # decisions: the hook events ------------------------------------------------------------------
    def _keep(self, table: OrderedDict[str, Any], key: str, value: Any) -> None:
        with self._lock:
            table[key] = value
            while len(table) > _OPEN_LIMIT:
                _, old = table.popitem(last=False)
                if hasattr(old, "end"):
                    old.set_attribute("jevlaya.lost", True)
                    old.end()

    def on_route(self, ctx: Any) -> None:
        decision = dict(ctx.decision or {})
        detection = decision.get("detection") or {}
        attributes = {"jevlaya.route.model": str(decision.get("model")),
                      "jevlaya.route.source": str(decision.get("source")),
                      "jevlaya.route.reason": str(decision.get("reason", "")),
                      **_scalar_attributes("jevlaya.route.", {
                          "workflow": decision.get("workflow"),
                          "language": detection.get("language"),
                          "script": detection.get("script"),
                          "evidence": detection.get("evidence")})}
        # the route is a moment of its own (a bare route() has no predict to join) and the
        # predict run that follows carries the same attributes
        with self.tracer.start_as_current_span(f"route {attributes['jevlaya.route.model']}",
                                               attributes=attributes) as span:
            span.add_event("on_route")
        self._keep(self._routes, ctx.run_id, attributes)

    def on_load(self, ctx: Any) -> None:
        self._model_event("on_load", ctx)

    def on_evict(self, ctx: Any) -> None:
        self._model_event("on_evict", ctx)

    def _model_event(self, event: str, ctx: Any) -> None:
        span = self._trace.get_current_span()
        with self._lock:
            open_run = self._runs.get(ctx.run_id)
        target = open_run if open_run is not None else span
        if target.is_recording():
            target.add_event(event, {"jevlaya.model": _short(ctx.model)})
        else:
            with self.tracer.start_as_current_span(f"{event[3:]} {_short(ctx.model)}") as own:
                own.add_event(event)

    def on_predict_start(self, ctx: Any) -> None:
        with self._lock:
            route = self._routes.pop(ctx.run_id, {})
        questions = ctx.questions if isinstance(ctx.questions, Mapping) else {}
        n_states = len(ctx.states) if isinstance(ctx.states, (list, tuple)) else 1
        span = self.tracer.start_span(f"decide {_short(ctx.model)}", attributes={
            "jevlaya.decision.model": _short(ctx.model), "jevlaya.decision.states": n_states,
            "jevlaya.decision.questions": [str(q) for q in questions],
            "jevlaya.run_id": ctx.run_id, **route})
        span.add_event("on_predict_start")
        self._keep(self._runs, ctx.run_id, span)

    def on_predict_end(self, ctx: Any) -> None:
        span = self._run_span(ctx)
        results = ctx.results or []
        answers = [a for r in results if isinstance(r, Mapping)
                   for a in (r.get("answers") or {}).items()]
        abstained = sum(1 for _, a in answers if a.get("abstention") == "abstained")
        span.set_attribute("jevlaya.decision.answers", len(answers))
        span.set_attribute("jevlaya.decision.abstained", abstained)
        if len(results) == 1:
            for name, answer in answers:
                value = answer.get("choice", answer.get("score", answer.get("noul")))
                if isinstance(value, (str, int, float, bool)):
                    span.set_attribute(f"jevlaya.answer.{name}.value", value)
                if isinstance(answer.get("confidence"), (int, float)):
                    span.set_attribute(f"jevlaya.answer.{name}.confidence", float(answer["confidence"]))
                if answer.get("abstention"):
                    span.set_attribute(f"jevlaya.answer.{name}.abstention", str(answer["abstention"]))
        for key, value in (ctx.usage or {}).items():
            if isinstance(value, int) and not isinstance(value, bool):
                span.set_attribute(f"jevlaya.usage.{key}", value)
        if ctx.elapsed_ms is not None:
            span.set_attribute("jevlaya.elapsed_ms", float(ctx.elapsed_ms))
        span.add_event("on_predict_end")
        span.end()

    def on_error(self, ctx: Any) -> None:
        from opentelemetry.trace import Status, StatusCode
        span = self._run_span(ctx)
        error = ctx.error
        message = redact_secrets(str(error)) if error is not None else "error"
        span.add_event("on_error", {"exception.type": type(error).__name__ if error else "Error",
                                    "exception.message": message})
        span.set_attribute("error.type", type(error).__name__ if error else "Error")
        span.set_status(Status(StatusCode.ERROR, message))
        span.end()

    def _run_span(self, ctx: Any) -> Any:
        with self._lock:
            span = self._runs.pop(ctx.run_id, None)
        if span is None:  # the start was not seen (a hook added mid-call): a span from now
            span = self.tracer.start_span(f"decide {_short(ctx.model)}",
                                          attributes={"jevlaya.run_id": ctx.run_id})
        return span

    # LLM calls: a broker observer ----------------------------------------------------------------
    def watch(self, broker: Any) -> Any:
        """Send spans for every call ``broker`` (a ``Broker`` or ``AsyncBroker``) makes from now
        on; returns the broker."""
        broker.observe(self)
        return broker

    @contextlib.contextmanager
    def call_scope(self, call: Any) -> Iterator[None]:
        """The span of one ``ask``/``chat`` (the broker enters it around the call)."""
        operation = getattr(call, "operation", None)
        with self.tracer.start_as_current_span(f"llm {operation or 'call'}", attributes=_scalar_attributes(
                "jevlaya.", {"trace_id": getattr(call, "trace_id", None), "operation": operation,
                             "fastest_of": getattr(call, "lanes", None)})):
            yield

    def attempt_started(self, attempt: Any) -> None:
        entry = attempt.state.entry
        span = self.tracer.start_span(f"chat {entry.model}", kind=self._trace.SpanKind.CLIENT,
                                      attributes=self._attempt_attributes(
                                          entry.base_url, entry.model, attempt.llm_name))
        self._keep(self._attempts, attempt.call_id, span)

    def attempt_finished(self, attempt: Any, row: Mapping[str, Any]) -> None:
        with self._lock:
            span = self._attempts.pop(attempt.call_id, None)
        if span is None:
            return
        self._finish_attempt(span, row, attempt.finish_reason)
        span.end()

    @staticmethod
    def _attempt_attributes(base_url: str, model: str, llm_name: str) -> dict[str, Any]:
        system = gen_ai_system(base_url)
        return {"gen_ai.operation.name": "chat", "gen_ai.system": system,
                "gen_ai.provider.name": system, "gen_ai.request.model": model,
                "jevlaya.llm_name": llm_name}

    def _finish_attempt(self, span: Any, row: Mapping[str, Any], finish_reason: str | None) -> None:
        from opentelemetry.trace import Status, StatusCode
        status = str(row.get("status"))
        span.set_attributes(_scalar_attributes("jevlaya.", {
            "call_id": row.get("call_id"), "trace_id": row.get("trace_id"),
            "operation": row.get("operation"), "scope": row.get("scope"), "status": status,
            "latency_ms": row.get("latency_ms"), "first_token_ms": row.get("first_token_ms")}))
        if row.get("prompt_tokens") is not None:
            span.set_attribute("gen_ai.usage.input_tokens", int(row["prompt_tokens"]))
        if row.get("completion_tokens") is not None:
            span.set_attribute("gen_ai.usage.output_tokens", int(row["completion_tokens"]))
        if finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [str(finish_reason)])
        if row.get("http_status") is not None:
            span.set_attribute("http.response.status_code", int(row["http_status"]))
        if status != "ok":
            span.set_attribute("error.type", status)
            if status != "superseded":  # a race's losing lane did nothing wrong
                detail = redact_secrets(str(row.get("error_detail") or status))
                span.set_status(Status(StatusCode.ERROR, detail))

    # after the fact: a journal -------------------------------------------------------------------
    def export_journal(self, source: Any = None, *, since: str | None = None,
                       trace_ids: Sequence[str] | None = None) -> int:
        """Send the call and attempt spans of a journal, with their recorded times; returns how
        many attempts were sent. ``source``: a ``Broker``/``AsyncBroker`` (its database), a
        SQLite path or a ``postgresql://`` URL (``None``: the default journal). ``since``: an
        ISO time, only attempts called from then on; ``trace_ids``: only these calls."""
        if hasattr(source, "engine") and hasattr(source, "calls"):  # the sync Broker: flushes first
            rows = source.calls(since=since)[::-1]  # calls(): newest first
            models = {m["name"]: m for m in source.engine.store.registry()}
        else:
            store = getattr(source, "store", None)  # an AsyncBroker: rows it has written so far
            owned = store is None
            if store is None:
                store = open_store(source)
            try:
                rows = store.attempts(since=since)
                models = {m["name"]: m for m in store.registry()}
            finally:
                if owned:
                    store.close()
        wanted = set(trace_ids) if trace_ids is not None else None
        calls: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        for row in rows:
            if wanted is None or row["trace_id"] in wanted:
                calls.setdefault(row["trace_id"], []).append(row)
        for trace_id, attempts in calls.items():
            starts = [_ns(r["called_at"]) for r in attempts]
            ends = [s + int(float(r["latency_ms"] or 0.0) * 1e6) for s, r in zip(starts, attempts)]
            operation = attempts[0]["operation"]
            call_span = self.tracer.start_span(
                f"llm {operation or 'call'}", start_time=min(starts), attributes=_scalar_attributes(
                    "jevlaya.", {"trace_id": trace_id, "operation": operation, "from_journal": True}))
            parent = self._trace.set_span_in_context(call_span)
            for row, start, end in zip(attempts, starts, ends):
                entry = models.get(row["llm_name"], {})
                model = str(entry.get("model") or row["llm_name"])
                span = self.tracer.start_span(
                    f"chat {model}", context=parent, kind=self._trace.SpanKind.CLIENT, start_time=start,
                    attributes=self._attempt_attributes(str(entry.get("base_url") or ""), model,
                                                        row["llm_name"]))
                self._finish_attempt(span, row, None)
                span.end(end_time=end)
            call_span.end(end_time=max(ends))
        return sum(len(a) for a in calls.values())
