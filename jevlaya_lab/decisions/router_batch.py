"""A Router checkpoint group: the requests of one call that go to one checkpoint, run together.

Every request has its own :class:`~jevlaya_lab.hooks.PredictContext`, and the group's contexts go
through the one hook lifecycle (:meth:`jevlaya_lab.hooks.CallHooks.lifecycle`) together: every
start hook of the group runs before its forward passes, which are grouped by (questions,
``max_len``, ``head_max_len``) as the start hooks left them, so requests that ask the same
questions share one ``predict_batch``; ends run in reverse input order; a failure fails every
started request of the group. A request's own ``max_len`` / ``head_max_len`` wins over the
call's, and a start hook wins over both. A start hook may ``skip()`` a request with one result
dict, or replace its state as ``ctx.states = [new_state]``; anything else is refused here,
naming the fix.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, cast

from jevlaya_lab.decisions.routing_policy import Decision
from jevlaya_lab.hooks import CallHooks, PredictContext
from jevlaya_lab.hooks.context import new_run_id

__all__ = ["CheckpointGroup", "check_rewritten", "check_skipped"]


class CheckpointGroup:
    """The requests of one ``predict_batch`` call that go to one checkpoint."""

    def __init__(self, router: Any, name: str, agent: Any, calls: CallHooks, call: dict[str, Any]):
        self.router, self.name, self.agent, self.calls, self.call = router, name, agent, calls, call

    def run(self, requests: list[Mapping[str, Any]],
            routed: list[tuple[Decision, str | None]]) -> list[dict[str, Any]]:
        """One context per request through the hook lifecycle, with one forward pass per
        batching key in between; the results in request order."""
        with self.calls.lifecycle(self._contexts(requests, routed)) as started:
            self._infer(started)
        return [cast(list[dict[str, Any]], ctx.results)[0] for ctx in started]  # the lifecycle set every ctx.results

    def _contexts(self, requests: list[Mapping[str, Any]],
                  routed: list[tuple[Decision, str | None]]) -> Iterator[PredictContext]:
        for request, (decision, run_id) in zip(requests, routed):
            yield PredictContext(
                states=[request["state"]], questions=request["questions"], decision=decision,
                run_id=run_id or new_run_id(),
                model=self.name, agent=self.agent, router=self.router,
                max_len=_first_given(request.get("max_len"), self.call.get("max_len")),
                head_max_len=_first_given(request.get("head_max_len"), self.call.get("head_max_len")),
            )

    def _infer(self, contexts: list[PredictContext]) -> None:
        """Skipped requests keep their results; the rest share one forward pass per batching key."""
        groups: dict[tuple[Any, ...], list[PredictContext]] = {}
        for ctx in contexts:
            if ctx.results is not None:
                for result in check_skipped(ctx):
                    result.setdefault("routing", ctx.decision)
                continue
            check_rewritten(ctx)
            groups.setdefault((_freeze(ctx.questions), ctx.max_len, ctx.head_max_len), []).append(ctx)
        for (_, max_len, head_max_len), members in groups.items():
            outputs = self.agent.predict_batch(
                [ctx.states[0] for ctx in members], members[0].questions,
                batch_size=self.call.get("batch_size"), max_len=max_len, head_max_len=head_max_len,
                min_confidence=self.call.get("min_confidence"),
                sort_by_length=self.call.get("sort_by_length", False),
            )
            for ctx, result in zip(members, outputs):
                result["routing"] = ctx.decision
                ctx.results = [result]


def check_skipped(ctx: PredictContext) -> list[dict[str, Any]]:
    if not isinstance(ctx.results, list) or len(ctx.results) != 1:
        raise ValueError(f"on_predict_start: a Router request takes exactly one result; use "
                         f"ctx.skip([result]), got ctx.results = {ctx.results!r}")
    for result in ctx.results:
        if not isinstance(result, dict):
            raise TypeError(f"ctx.skip(): a Router result must be a dict, got {type(result).__name__} {result!r}")
    return ctx.results


def check_rewritten(ctx: PredictContext) -> None:
    if not isinstance(ctx.states, (list, tuple)) or len(ctx.states) != 1:
        raise ValueError(
            f"on_predict_start: ctx.states of a Router request must hold exactly one state, got "
            f"{ctx.states!r}; replace the state as ctx.states = [new_state]"
        )
    if not isinstance(ctx.questions, Mapping):
        raise TypeError(f"on_predict_start: ctx.questions must be a dict, got {type(ctx.questions).__name__}")


def _freeze(value: Any) -> Any:
    """A hashable, order-keeping, type-aware key for questions (``1`` and ``True`` stay apart)."""
    if isinstance(value, Mapping):
        return ("dict", tuple((_freeze(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(_freeze(v) for v in value))
    if isinstance(value, (str, int, float, bool, type(None))):
        return (type(value).__name__, value)
    return ("object", id(value))


def _first_given(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)
