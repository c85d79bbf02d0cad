"""The ``Agent``: typed questions about states, answered in forward passes over chunks of rows.

``predict_batch`` is the one implementation (``system_one(state, ...)`` is
``predict_batch([state], ...)[0]`` and ``predict is system_one``); its hooks run through the one
lifecycle, :meth:`jevlaya_lab.hooks.CallHooks.lifecycle`, with one
:class:`~jevlaya_lab.hooks.PredictContext` for the call. What a caller can rely on:

- The call's ``max_len`` / ``head_max_len`` are put in ``ctx.max_len`` / ``ctx.head_max_len``
  before the start hooks run (as the Router does with a request's budget), so hooks see them and
  a start hook's own value wins: hook > argument > checkpoint config.
- ``min_confidence`` also gates results served by ``ctx.skip()``; stale gating fields on them
  are replaced, so a cached result never carries another call's thresholds.
- ``batch_size=None`` chunks so that a forward pass holds at most 256 rows (at least one state).
  Inside a chunk the rows run in groups of similar length (:func:`~.encoding.length_groups`),
  each padded only to its own longest row (padding cost 11-14% of the encoder's work when a chunk
  was one padded batch); answers are the same up to float noise.
- The float32 default saves work rather than doing it faster: no padding beyond 10% per row, and
  the last head layer runs only at the positions read afterwards (:func:`~.model.last_layer_at`).
  ``quantize="bf16"`` / ``"int8"`` trade exactness for about 2x (:mod:`~.device`).
- ``states`` may be a list or tuple; a bare str/dict (after start hooks) is a ``TypeError``
  pointing to ``predict()``.
- Encoding uses a private copy of the Rust tokenizer that is never mutated, so threads encode
  concurrently without a lock; the forward pass runs under ``torch.inference_mode()``.
- ``ctx.usage`` is set only when there are results (``predict_batch([])`` leaves it ``None``).
- A checkpoint with an open part answers the questions its own head was not trained on with that
  part (:mod:`~.open_questions`), inside the same call and lifecycle.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from typing import Any, Unpack

import torch

from jevlaya_lab._lru import LockedLRU
from jevlaya_lab.decisions.budget import check_budget, check_positions
from jevlaya_lab.decisions.calibration import (
    TemperatureTable,
    apply_min_confidence,
    decode_answer,
    fit_temperatures,
    parse_min_confidence,
)
from jevlaya_lab.decisions.checkpoint import CheckpointConfig, load_checkpoint
from jevlaya_lab.decisions.device import autocast_dtype, quantize_model, select_device
from jevlaya_lab.decisions.encoding import (
    ROWS_PER_CHUNK,
    EncodedBatch,
    QuestionHead,
    build_batch,
    check_state,
    encode_questions,
    length_groups,
    row_tokenizer,
    tokenize_states,
)
from jevlaya_lab.decisions.line_store import LineStore
from jevlaya_lab.decisions.model import DecisionModel, DecisionOutput
from jevlaya_lab.decisions.open_questions import OpenRoute
from jevlaya_lab.decisions.prior_inputs import PriorBuilder, PriorInputs
from jevlaya_lab.decisions.questions import Question, parse_questions
from jevlaya_lab.decisions.results import AgentResult, ResultList
from jevlaya_lab.hooks import HookHost, HookRunner, PredictContext
from jevlaya_lab.hooks.options import HookKeywords, HookOptions

_HEAD_CACHE_SIZE = 64


def _source_id(source: Any) -> str:
    if isinstance(source, tuple) and len(source) == 2:
        return f"{os.fspath(source[0])}/{os.fspath(source[1])}"
    return os.fspath(source) if isinstance(source, (str, os.PathLike)) else repr(source)


def empty_result(model_id: str) -> dict[str, Any]:
    """The payload of a state asked no questions: no answers and no tokens used."""
    return {"model": model_id, "answers": {}, "usage": {"input_tokens": 0, "output_tokens": 0}}


class Agent(HookHost):
    """Answers typed questions about states with one decision checkpoint.

    ``model`` is a ``(DecisionModel, tokenizer, CheckpointConfig)`` triple (what
    :func:`~jevlaya_lab.decisions.checkpoint.load_checkpoint` returns) or a checkpoint source:
    a directory, ``(directory_or_repo, subfolder)``, a bundled name or a hub id; ``subfolder``,
    ``revision``, ``token`` and ``expected_sha256`` are passed to the loader, as in Laya.
    """

    def __init__(
        self,
        model: Any,
        *,
        device: str | torch.device | None = None,
        hooks: Iterable[Any] | None = None,
        on_predict_start: Callable[[PredictContext], Any] | None = None,
        on_predict_end: Callable[[PredictContext], Any] | None = None,
        hooks_raise: bool = True,
        hooks_concurrent: bool = True,
        hooks_timeout: float | None = None,
        model_id: str | None = None,
        subfolder: str | None = None,
        revision: str | None = None,
        token: str | None = None,
        expected_sha256: dict[str, str] | None = None,
        calibration: str | os.PathLike[str] | None = None,
        quantize: str | None = None,
    ) -> None:
        self._hooks = HookRunner(options=HookOptions(
            hooks=hooks, on_predict_start=on_predict_start, on_predict_end=on_predict_end,
            hooks_raise=hooks_raise, hooks_concurrent=hooks_concurrent, hooks_timeout=hooks_timeout))
        if isinstance(model, tuple) and len(model) == 3 and isinstance(model[0], DecisionModel):
            network, tokenizer, config = model
            default_id = "decision-model"
        elif isinstance(model, DecisionModel):
            raise TypeError("Agent(model): a bare DecisionModel lacks its tokenizer and config; pass "
                            "(model, tokenizer, CheckpointConfig) or a checkpoint source")
        else:
            network, tokenizer, config = load_checkpoint(
                model, subfolder=subfolder, revision=revision, token=token,
                expected_sha256=expected_sha256)
            default_id = _source_id((model, subfolder) if subfolder else model)
        if not isinstance(config, CheckpointConfig):
            raise TypeError(f"Agent(model): the third item must be a CheckpointConfig, got "
                            f"{type(config).__name__}")
        if model_id is not None and (not isinstance(model_id, str) or not model_id):
            raise TypeError(f"model_id must be a non-empty str, got {model_id!r}")
        self.model_id: str = model_id or default_id
        self.device = select_device(device)
        self.decision_model: DecisionModel = network.to(self.device).eval()
        self.quantize = quantize_model(self.decision_model, quantize, self.device)
        self.tokenizer = tokenizer
        self.config = config
        self.temperatures = TemperatureTable(config.temperature, config.temperature_by_options)
        if calibration is not None:
            self.load_calibration(calibration)
        self._rows = row_tokenizer(tokenizer)
        self._amp = torch.bfloat16 if self.quantize == "bf16" else autocast_dtype(config, self.device)
        self._heads: LockedLRU[tuple[Any, ...], tuple[QuestionHead, ...]] = LockedLRU(_HEAD_CACHE_SIZE)
        self._prior = PriorBuilder(network, self._rows, store=LineStore()) if network.prior is not None else None
        from jevlaya_lab.decisions.adaptation import adaptation_of  # few-shot corrections, if any

        self._adaptation = adaptation_of(config)
        self.adaptation_report: Any = None
        """What :meth:`adapt` fitted (an ``AdaptationReport``) on an Agent it returned, else None."""
        self._open = OpenRoute.of(self, network, tokenizer, config, quantize, make=Agent)

    def __repr__(self) -> str:
        return (f"<Agent model_id={self.model_id!r} device={self.device.type} "
                f"hooks={len(self._hooks.installed)}>")

    # -- prediction -------------------------------------------------------------------------
    def predict_batch(
        self,
        states: Sequence[Any],
        questions: Mapping[str, Any],
        *,
        batch_size: int | None = None,
        max_len: int | None = None,
        head_max_len: int | None = None,
        min_confidence: float | Mapping[str, float] | None = None,
        sort_by_length: bool = False,
        hook_options: HookOptions | None = None,
        **hook_keywords: Unpack[HookKeywords],
    ) -> list[dict[str, Any]]:
        """Answer ``questions`` about every state; one result per state, in input order.

        ``hook_options`` (or the same settings as keywords: ``hooks``, ``on_predict_start``,
        ``on_predict_end``, ``hooks_raise``, ``hooks_timeout``) adds this call's hooks."""
        calls = self._hooks.call(options=HookOptions.of_call(hook_options, hook_keywords, "predict_batch"))
        ctx = PredictContext(states, questions, model=self.model_id, agent=self,
                             max_len=max_len, head_max_len=head_max_len)
        with calls.lifecycle(ctx):
            thresholds = parse_min_confidence(min_confidence)
            if ctx.results is None:
                ctx.results = ResultList(self._infer(ctx, batch_size=batch_size,
                                                     sort_by_length=sort_by_length))
            if thresholds is not None:
                self._gate(ctx, thresholds)
        return ctx.results  # the very list (and dicts) the end hooks saw

    def system_one(self, state: Any, questions: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Answer ``questions`` about one state: ``predict_batch([state], ...)[0]``."""
        return self.predict_batch([state], questions, **kwargs)[0]

    predict = system_one

    # -- schema-driven decisions (Laya's decide / decide_batch) ----------------------------------
    def decide(self, state: Any, schema: Any = None, *, questions: Mapping[str, Any] | None = None,
               return_details: bool = False, min_confidence: Any = None, **predict_kwargs: Any) -> Any:
        """Answer ``state`` against a JSON schema or pydantic model and return the typed values.

        See :func:`jevlaya_lab.decisions.structured.decide`: pass exactly one of ``schema`` or
        ``questions``; the other keywords go to :meth:`predict`, so the hook lifecycle runs with
        the generated questions.
        """
        from jevlaya_lab.decisions.structured import decide

        return decide(self, state, schema, questions=questions, return_details=return_details,
                      min_confidence=min_confidence, **predict_kwargs)

    def decide_batch(self, states: Sequence[Any], schema: Any = None, *,
                     questions: Mapping[str, Any] | None = None, return_details: bool = False,
                     min_confidence: Any = None, **predict_kwargs: Any) -> list[Any]:
        """:meth:`decide` for many states through one :meth:`predict_batch` call, in input order."""
        from jevlaya_lab.decisions.structured import decide_batch

        return decide_batch(self, states, schema, questions=questions, return_details=return_details,
                            min_confidence=min_confidence, **predict_kwargs)

    # -- calibration (Laya's fit_temperatures / save_calibration / calibration=) ------------------
    def fit_temperatures(self, records: Sequence[Any]) -> dict[str, Any]:
        """Fit temperatures from labelled ``(qtype, logits, target, k)`` records and use them.

        See :func:`~jevlaya_lab.decisions.calibration.fit_temperatures`; the checkpoint on disk is
        not changed (``save_calibration`` writes the result beside it or anywhere else).
        """
        fitted = fit_temperatures(records)  # a type without records gets 1.0, as in Laya
        self.temperatures = TemperatureTable(fitted["temperature"], fitted["temperature_by_options"])
        return fitted

    def save_calibration(self, path: str | os.PathLike[str]) -> None:
        """Write the temperatures in use as a calibration file (Laya's version-2 JSON layout)."""
        self.temperatures.write(path, self.model_id, self.config)

    def load_calibration(self, path: str | os.PathLike[str]) -> None:
        """Use the temperatures of a calibration file (ours or Laya's); the weights are unchanged."""
        self.temperatures = TemperatureTable.read(path)

    # -- few-shot adaptation and saving (jevlaya_lab.decisions.adapt) ------------------------------
    def adapt(self, examples: Any, questions: Mapping[Any, Any], *, seed: int = 0,
              method: str = "linear", model_id: str | None = None, turn: bool = True) -> Agent:
        """A new Agent fitted to the user's labels for ``questions``; this one is unchanged.

        ``examples``: ``(state, answers)`` pairs or a DataFrame (see
        :func:`jevlaya_lab.decisions.adapt.adapt`); the result's ``adaptation_report`` shows the
        cross-validated accuracy and ECE. ``turn=False``: never turn a yes/no round, even when
        its labels show it read upside down."""
        from jevlaya_lab.decisions.adapt import adapt

        adapted: Agent = adapt(self, examples, questions, seed=seed, method=method, model_id=model_id, turn=turn)
        return adapted

    @property
    def adapted_questions(self) -> dict[Any, Any]:
        """The question definitions this Agent has few-shot corrections for (empty: none)."""
        return {} if self._adaptation is None else self._adaptation.questions()

    def save(self, directory: str | os.PathLike[str]) -> Any:
        """Write this Agent, its temperatures and any adaptation as a checkpoint directory (Laya
        layout) that ``load()`` reads back (:func:`jevlaya_lab.decisions.adapt.save_agent`)."""
        from jevlaya_lab.decisions.adapt import save_agent

        return save_agent(self, directory)

    def predict_long(self, state: Any, questions: Mapping[Any, Any], *, window: int | None = None,
                     stride: int | None = None, aggregate: str = "auto", batch_size: int | None = None,
                     hook_options: HookOptions | None = None,
                     **hook_keywords: Unpack[HookKeywords]) -> dict[str, Any]:
        """Answer ``questions`` about a state longer than one row, in overlapping token windows.

        See :mod:`jevlaya_lab.decisions.long` (Laya's rules); the hook settings are
        :meth:`predict_batch`'s.
        """
        from jevlaya_lab.decisions.long import predict_long

        return predict_long(self, state, questions, window=window, stride=stride, aggregate=aggregate,
                            batch_size=batch_size,
                            hook_options=HookOptions.of_call(hook_options, hook_keywords, "predict_long"))

    def _gate(self, ctx: PredictContext, thresholds: dict[str, float]) -> None:
        parsed = parse_questions(ctx.questions) if ctx.questions else ()
        for result in ctx.results or ():
            answers = result.get("answers") if isinstance(result, dict) else None
            if isinstance(answers, dict):
                apply_min_confidence(answers, parsed, thresholds)

    def _infer(self, ctx: PredictContext, *, batch_size: int | None,
               sort_by_length: bool) -> list[dict[str, Any]]:
        states = ctx.states
        if isinstance(states, (str, bytes, Mapping)):
            raise TypeError(f"predict_batch expects a list of states, got a {type(states).__name__}; "
                            "for one state call agent.predict(state, questions) (or system_one)")
        if not isinstance(states, (list, tuple)):
            raise TypeError(f"predict_batch expects a list of states, got {type(states).__name__}; "
                            "pass a list such as [state1, state2]")
        if batch_size is not None:
            check_budget("batch_size", batch_size)
        if ctx.questions is None:
            raise TypeError("questions is None; pass a dict question_id -> definition "
                            "(an empty dict asks nothing)")
        parsed = parse_questions(ctx.questions) if ctx.questions != {} else ()
        if not states:
            return []
        if not parsed:
            for index, state in enumerate(states):
                check_state(state, index)
            return [empty_result(self.model_id) for _ in states]
        max_len, head_max_len = self._budgets(ctx.max_len, ctx.head_max_len)
        tokens = tokenize_states(self._rows, states)
        order = sorted(range(len(states)), key=lambda i: len(tokens[i].ids)) if sort_by_length else None
        if self._open is None:
            return self._answer(tokens, parsed, max_len, head_max_len, batch_size, order)
        # the open part answers the open questions (decisions.open_questions)
        return self._open.answer(self, tokens, parsed, max_len, head_max_len, batch_size, order)

    def _answer(self, tokens: Sequence[Any], parsed: tuple[Question, ...], max_len: int, head_max_len: int,
                batch_size: int | None, order: Sequence[int] | None) -> list[dict[str, Any]]:
        """This head's results for tokenised states (one per state, in input order)."""
        results: list[dict[str, Any]] = [{} for _ in tokens]
        for picked, batch, prior in self._chunks(tokens, parsed, max_len, head_max_len, batch_size, order):
            out = self._forward(batch, prior)
            if self._adaptation is not None:  # the user's few-shot corrections (decisions.adapt)
                out = DecisionOutput(self._adaptation.adjust(self, batch, [tokens[i] for i in picked],
                                                             out.option_logits, max_len, out.state_vectors),
                                     out.act_logits)
            for index, result in zip(picked, self._decode(batch, out)):
                results[index] = result
        return results

    def _budgets(self, max_len: int | None = None, head_max_len: int | None = None) -> tuple[int, int]:
        """The call's ``(max_len, head_max_len)``: the given ones, else the checkpoint's, checked."""
        return (check_positions(
            check_budget("max_len", self.config.max_len if max_len is None else max_len),
            getattr(getattr(self.decision_model.encoder, "config", None), "max_position_embeddings", None),
            self.model_id),
            check_budget("head_max_len", self.config.head_max_len if head_max_len is None else head_max_len))

    def _chunks(self, tokens: Sequence[Any], parsed: tuple[Question, ...], max_len: int, head_max_len: int,
                batch_size: int | None = None, order: Sequence[int] | None = None,
                ) -> Iterator[tuple[list[int], EncodedBatch, PriorInputs | None]]:
        """A call's forward-pass inputs, chunk by chunk: the chunk's state indices (in ``order``, else as
        given), its batch and the prior's inputs. ``batch_size=None`` keeps a pass at most
        ``ROWS_PER_CHUNK`` rows. What ``adapt`` and the benchmarks read goes through here too, so
        they see exactly the Agent's inputs."""
        heads = self._question_heads(parsed, head_max_len)
        order = list(range(len(tokens))) if order is None else list(order)
        chunk = batch_size or max(1, ROWS_PER_CHUNK // len(heads))
        for start in range(0, len(order), chunk):
            picked = order[start:start + chunk]
            chunk_tokens = [tokens[i] for i in picked]
            batch = build_batch(self._rows, chunk_tokens, heads, max_len=max_len)
            yield picked, batch, None if self._prior is None else self._prior.inputs(
                chunk_tokens, batch.questions, max_len, batch.option_mask.shape[1])

    def _question_heads(self, parsed: tuple[Question, ...], head_max_len: int) -> tuple[QuestionHead, ...]:
        key = (parsed, head_max_len)
        heads = self._heads.get(key)
        if heads is None:
            heads = self._heads.put(key, encode_questions(self._rows, parsed, head_max_len=head_max_len))
        return heads

    def _forward(self, batch: EncodedBatch, prior: PriorInputs | None = None) -> DecisionOutput:
        """One forward pass per group of rows of similar length (:func:`length_groups`), outputs
        back in row order. A model with a similarity prior takes the batch whole, and so do the
        quantised modes: their passes carry a fixed cost (bf16 rounds and re-lays out every
        weight for oneDNN, int8 quantises) that outweighs the padding saved (1 state x 5 questions: bf16
        163 ms grouped, 120 ms whole; float32 133 ms grouped, 140 ms whole)."""
        amp = torch.autocast(self.device.type, dtype=self._amp) if self._amp else nullcontext()
        with torch.inference_mode(), amp:
            if prior is not None or self.quantize is not None:
                whole: DecisionOutput = self.decision_model(batch.to(self.device), prior and prior.to(self.device))
                return whole
            groups = length_groups(batch.attention_mask.sum(dim=1))
            parts: list[DecisionOutput] = [self.decision_model(batch.take(rows).to(self.device)) for rows in groups]
            if len(parts) == 1 and len(groups[0]) == 1:
                return parts[0]
            order = torch.cat(groups).to(parts[0].option_logits.device)
            back = torch.empty_like(order)
            back[order] = torch.arange(len(order), device=order.device)
            option_logits = torch.cat([p.option_logits for p in parts])[back]
            act_logits = torch.cat([p.act_logits for p in parts])[back]
            return DecisionOutput(option_logits, act_logits)

    def _decode(self, batch: EncodedBatch, out: DecisionOutput) -> Iterator[dict[str, Any]]:
        questions = batch.questions
        temps = torch.tensor([self.temperatures.get(q.type, q.n_options) for q in questions],
                             device=out.option_logits.device).repeat(batch.n_states)
        probs = torch.softmax(out.option_logits.float() / temps[:, None], dim=-1).tolist()
        act = torch.softmax(out.act_logits.float(), dim=-1)[:, 0].tolist()
        row = 0
        for usage in batch.usage:
            answers = {}
            for q in questions:
                answers[q.id] = decode_answer(q, probs[row][:q.n_options], act[row])
                row += 1
            # a dict to code; a notebook shows it as the answers card
            yield AgentResult({"model": self.model_id, "answers": answers, "usage": dict(usage)})


def load(source: Any, **agent_kwargs: Any) -> Agent:
    """Load a checkpoint source into an :class:`Agent` (keywords as for ``Agent``, including
    Laya's ``subfolder=``, ``revision=``, ``token=`` and ``expected_sha256=``)."""
    return Agent(source, **agent_kwargs)


__all__ = ["Agent", "load", "select_device", "empty_result"]
