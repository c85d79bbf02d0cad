"""``Attempt``: one request to one model (a *lane*), ended and journaled exactly once.

An attempt is given the parts it uses (the :class:`~jevlaya_lab.broker.pool.Pool`, the
:class:`~jevlaya_lab.broker.journaling.CallJournal`, the
:class:`~jevlaya_lab.broker.transport.Transport`) and calls nothing above them. Making one takes
a slot of its model. It sends its own request (:meth:`Attempt.send` for a complete answer,
:meth:`Attempt.open` then :meth:`Attempt.pull` for a stream) and ends itself once:
:meth:`complete`, :meth:`fail`, :meth:`time_out` or :meth:`cancel` apply the outcome to the
pool (success, the failure table, a cooldown), release the slot and hand one row to the
journal. Whatever ends it later is ignored, so no path journals twice or releases a slot twice.

:class:`Attempts` makes them for one broker: it counts each against the call's ceilings
(:mod:`jevlaya_lab.broker.limits`) and decides whether prompt text is journaled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeVar

from jevlaya_lab.broker.budget import ATTEMPT_TIMEOUT_S, Budget
from jevlaya_lab.broker.errors import ProviderError
from jevlaya_lab.broker.http import Delta, Failure, Reply, merge_tool_calls, read_deltas
from jevlaya_lab.broker.journaling import CallJournal
from jevlaya_lab.broker.keys import redact
from jevlaya_lab.broker.limits import AttemptLimit
from jevlaya_lab.broker.pool import DEFAULT_COOLDOWN_S, Caller, ModelState, Pool, utc
from jevlaya_lab.broker.results import LLMResult
from jevlaya_lab.broker.transport import Transport
from jevlaya_lab.broker.validation import Call, new_id
from jevlaya_lab.broker.wire import Response
from jevlaya_lab.journal.rows import MAX_DETAIL

log = logging.getLogger("jevlaya_lab.broker")


def notify(observers: list[Any], event: str, *args: Any) -> None:
    """Call ``observer.<event>(*args)`` on every observer that has it; an observer that raises
    is logged and never changes the call."""
    for observer in observers:
        method = getattr(observer, event, None)
        if method is None:
            continue
        try:
            method(*args)
        except Exception:  # noqa: BLE001 - an observer never breaks a call
            log.exception("broker observer %r failed in %s", observer, event)
T = TypeVar("T")


class _Timer:
    """``async with asyncio.timeout(delay)`` around one request, with the same semantics in
    less machinery (one is made per attempt): after ``delay`` seconds the task is cancelled,
    and :meth:`end` turns that cancellation, and only that one, into ``TimeoutError``; a
    cancellation from elsewhere stays ``CancelledError``."""

    __slots__ = ("_task", "_cancelling", "_handle", "_expired")

    def __init__(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("an attempt's timer runs inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._expired = False
        self._handle: asyncio.Handle | None = (loop.call_at(loop.time() + delay, self._fire)
                                               if delay > 0 else loop.call_soon(self._fire))

    def _fire(self) -> None:
        self._task.cancel()
        self._expired = True
        self._handle = None

    def end(self, exc: BaseException | None) -> None:
        """Stop the timer as the request ended (with ``exc``, or ``None``); raise
        ``TimeoutError`` when the timer cancelled it and nobody else asked to cancel."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._expired and self._task.uncancel() <= self._cancelling \
                and isinstance(exc, asyncio.CancelledError):
            raise TimeoutError from exc


class Attempt:
    """One request (see the module docstring). ``cancel_status`` is what a cancellation
    journals: ``superseded`` (another lane won) unless the caller gave up (``cancelled``)."""

    def __init__(self, state: ModelState, *, pool: Pool, journal: CallJournal,
                 transport: Transport, caller: Caller, budget: Budget, trace_id: str,
                 operation: str | None, prompt_text: str | None = None,
                 rate: Callable[[str, float], None] | None = None,
                 observers: list[Any] | None = None) -> None:
        self.state = state
        self.llm_name = state.entry.name
        self.call_id = new_id()
        self.trace_id = trace_id
        self.operation = operation
        self.scope = caller.scope
        self.budget_ms = budget.budget_ms
        self.prompt_text = prompt_text
        self.called_at = datetime.now(UTC).isoformat()
        self.started = time.perf_counter()
        self.first_token_ms: float | None = None
        self.pieces: list[str] = []
        self.tool_calls: list[dict[str, Any]] = []
        self.usage: dict[str, int] = {}
        self.finish_reason: str | None = None
        self.status: str | None = None  # set once, by finish()
        self.journal_seq = 0  # this attempt's row number in the journal (CallJournal.attempt)
        self.cancel_status = "superseded"
        self.key: str | None = None  # the key sent (redacted from what the provider says)
        self.response: Response | None = None  # a stream's open response
        self.deltas: AsyncIterator[Delta] | None = None
        self._pool = pool
        self._journal = journal
        self._transport = transport
        self._caller = caller
        self._budget = budget
        self._rate = rate
        # tracers told when this attempt starts and when it has its row (AsyncBroker.observe)
        self._observers = observers if observers is not None else []
        pool.acquire(self.llm_name)
        if self._observers:
            notify(self._observers, "attempt_started", self)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def started_answer(self) -> bool:
        return self.first_token_ms is not None

    # the wire ----------------------------------------------------------------------------------
    async def endpoint(self) -> tuple[str, str | None]:
        """(base URL, key) of this attempt's model (``cannot_start`` :class:`Failure` for an
        embedded model that fails to load)."""
        _, key = self._pool.key_for(self.state, self._caller)
        self.key = key
        return await self._transport.base_url(self.state.entry), key

    async def send(self, body: dict[str, Any]) -> Reply:
        """The complete answer; a failure is applied and raised as ``ProviderError``; a
        cancellation journals ``cancel_status``."""
        timeout = self._budget.attempt_timeout()
        try:
            url, key = await self.endpoint()
            timer = _Timer(timeout)
            try:
                reply = await self._transport.post(url, key, body)
            except BaseException as exc:
                timer.end(exc)  # the timer's own cancellation becomes TimeoutError
                raise
            timer.end(None)
        except Failure as failure:
            raise self.fail(failure) from None
        except TimeoutError:
            raise self.time_out().to_error(self.llm_name) from None
        except asyncio.CancelledError:
            self.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - a surprise is this attempt's failure, journaled
            log.exception("attempt %s of %s failed", self.call_id, self.llm_name)
            raise self.fail(Failure("invalid", redact(f"{type(exc).__name__}: {exc}"))) from None
        self.add(reply.text, None)
        self.tool_calls = reply.tool_calls
        self.usage = reply.usage
        self.finish_reason = reply.finish_reason
        self.complete()
        return reply

    async def open(self, body: dict[str, Any]) -> None:
        """Send a streaming request and keep its open response (raises :class:`Failure` or
        ``TimeoutError``; the caller ends the attempt)."""
        url, key = await self.endpoint()
        try:
            async with asyncio.timeout(self._budget.attempt_timeout()):
                self.response = await self._transport.open_stream(url, key, body)
        except (Failure, TimeoutError):
            raise
        except Exception as exc:  # noqa: BLE001 - a surprise fails this lane, as in send()
            log.exception("opening a stream on %s failed", self.llm_name)
            raise Failure("invalid", redact(f"{type(exc).__name__}: {exc}", key)) from None
        self.deltas = read_deltas(self.response, key)

    async def pull(self) -> str | None:
        """The next text piece of a stream ("" for tool-call progress), or ``None`` at its
        end (raises :class:`Failure` or ``TimeoutError``)."""
        assert self.deltas is not None, "open() the stream first"
        while True:
            try:
                async with asyncio.timeout(self._budget.attempt_timeout()):
                    delta = await self.deltas.__anext__()
            except StopAsyncIteration:
                return None
            if delta.usage:
                self.usage = delta.usage
            if delta.finish_reason:
                self.finish_reason = delta.finish_reason
            if delta.text or delta.tool_calls:
                self.add(delta.text, delta.tool_calls)
                return delta.text

    def add(self, text: str, tool_calls: list[dict[str, Any]] | None = None) -> None:
        if (text or tool_calls) and self.first_token_ms is None:
            self.first_token_ms = (time.perf_counter() - self.started) * 1000.0
        if text:
            self.pieces.append(text)
        if tool_calls:
            merge_tool_calls(self.tool_calls, tool_calls)

    async def close_response(self) -> None:
        if self.response is not None:
            await self.response.aclose()

    # endings -----------------------------------------------------------------------------------
    def complete(self) -> None:
        """The answer is whole: the model's success (its recovery ends), journaled ``ok``."""
        self._pool.succeeded(self.llm_name)
        self.finish("ok")

    def fail(self, failure: Failure) -> ProviderError:
        """Apply ``failure`` to the pool (the failure table), journal it, and return it as the
        caller's error."""
        if self.status is None:
            until = self._pool.failed(self.llm_name, failure, self._caller)
            self.finish(failure.journal_status, http_status=failure.status,
                        detail=str(failure), cooldown_until=until)
        return failure.to_error(self.llm_name)

    def time_out(self) -> Failure:
        """Nothing (or not all) arrived in time: a model that sent nothing is cooled; either
        way a missed ``wait`` steers the next equally short request away."""
        budget = self._budget
        if budget.limited:
            self._pool.missed_wait(self.llm_name, budget.wait)  # type: ignore[arg-type]
        limit = f"wait={budget.wait:g} s" if budget.limited else f"{ATTEMPT_TIMEOUT_S:g} s"
        if self.started_answer:
            failure = Failure("interrupted", f"the answer did not complete within {limit}")
            self.finish(failure.journal_status, detail=str(failure))
        else:
            failure = Failure("unavailable", f"no data within {limit}")
            until = self._pool.cool(self.llm_name, DEFAULT_COOLDOWN_S)
            self.finish(failure.journal_status, detail=str(failure), cooldown_until=until)
        return failure

    def cancel(self) -> None:
        """The request was cancelled: journaled ``cancel_status``."""
        self.finish(self.cancel_status)

    def finish(self, status: str, *, http_status: int | None = None, detail: str | None = None,
               cooldown_until: float | None = None) -> None:
        """End this attempt once: release its slot and journal its row."""
        if self.status is not None:
            return
        self.status = status
        self._pool.release(self.llm_name)
        row = {
            "call_id": self.call_id, "trace_id": self.trace_id, "llm_name": self.llm_name,
            "operation": self.operation, "scope": self.scope, "status": status,
            "called_at": self.called_at,
            "latency_ms": (time.perf_counter() - self.started) * 1000.0,
            "first_token_ms": self.first_token_ms,
            "http_status": http_status if http_status is not None else (
                200 if status == "ok" else None),
            "error_detail": detail[:MAX_DETAIL] if detail else None,
            "prompt_tokens": self.usage.get("prompt_tokens"),
            "completion_tokens": self.usage.get("completion_tokens"),
            "cooldown_until": (utc(cooldown_until).isoformat()  # type: ignore[union-attr]
                               if cooldown_until else None),
            "budget_ms": self.budget_ms, "prompt_text": self.prompt_text,
            "answer_text": self.text if self.prompt_text is not None else None,
        }
        self.journal_seq = self._journal.attempt(row)
        if self._observers:
            notify(self._observers, "attempt_finished", self, dict(row))

    def result(self) -> LLMResult:
        """This attempt's answer, rated through the journal."""
        return LLMResult(text=self.text, llm_name=self.llm_name, call_id=self.call_id,
                         trace_id=self.trace_id, usage=dict(self.usage),
                         tool_calls=list(self.tool_calls), finish_reason=self.finish_reason,
                         operation=self.operation, _rate=self._rate)

    def __repr__(self) -> str:
        return f"<Attempt {self.llm_name} {self.call_id[:8]} {self.status or 'open'}>"


def lane_task(attempt: Attempt, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """Run ``coro``, the lane of ``attempt``, as a task whose end always settles the
    attempt. A task cancelled before its first step never runs its own ``except`` blocks, so
    without this its slot would stay taken and no row be written; the done callback journals
    such an attempt as its ``cancel_status`` (``error`` if it ended by an exception without
    settling) and so releases the slot on every path."""
    task = asyncio.ensure_future(coro)

    def settle(done: asyncio.Task[T]) -> None:
        if attempt.status is None:
            if done.cancelled():
                attempt.cancel()
            else:
                exc = done.exception()
                attempt.finish("error", detail=redact(
                    f"the lane ended without a result: {type(exc).__name__}: {exc}"))
    task.add_done_callback(settle)
    return task


class Attempts:
    """Makes the attempts of one broker, each given the pool, the journal and the transport;
    ``store_text`` journals the prompt and answer text too."""

    def __init__(self, pool: Pool, journal: CallJournal, transport: Transport, *,
                 store_text: bool, observers: list[Any] | None = None) -> None:
        self.observers = observers if observers is not None else []
        self._pool = pool
        self._journal = journal
        self._transport = transport
        self._store_text = store_text

    def start(self, state: ModelState, caller: Caller, call: Call, budget: Budget,
              limit: AttemptLimit) -> Attempt:
        """A new attempt on ``state`` (it takes a slot), counted against the call's ceilings."""
        limit.count(state.entry.name)
        prompt_text = None
        if self._store_text:
            prompt_text = "\n".join(str(m.get("content") or "") for m in call.messages)
        return Attempt(state, pool=self._pool, journal=self._journal, transport=self._transport,
                       caller=caller, budget=budget, trace_id=call.trace_id,
                       operation=call.operation, prompt_text=prompt_text,
                       rate=self._journal.rate, observers=self.observers)


class Parts(NamedTuple):
    """What a call uses once the broker is ready (``Runtime.ready()``)."""

    pool: Pool
    attempts: Attempts
    journal: CallJournal
