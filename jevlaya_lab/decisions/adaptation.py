"""Stored few-shot corrections: what ``rl_agent_config.json`` keeps and how a forward pass applies
them (the report :func:`~jevlaya_lab.decisions.adapt.adapt` returns is in :mod:`.adaptation_report`).

See :mod:`jevlaya_lab.decisions.adapt` for what is fitted; an adaptation is looked up by the
question's content (:func:`question_key`), never by its id.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from jevlaya_lab.decisions.adapt_features import LOG_FLOOR, Agent, caller_order, state_vectors
from jevlaya_lab.decisions.questions import Question, parse_questions

ADAPTATION_KEY = "adaptation"
ADAPTATION_VERSION = 2
"""The version written when a correction turns a yes/no round (``"sign": -1``); an adaptation
without one is written as version 1, which versions before the turn read alike. A reader that
knows only version 1 refuses a version 2 rather than answering a turned statement upside down."""
VERSIONS = tuple(range(1, ADAPTATION_VERSION + 1))


# -- which question is which --------------------------------------------------------------------
def question_key(q: Question) -> str:
    """The content key an adaptation is stored and looked up under (type, instructions, options,
    whether the reader may read it, and the head its ``part`` key names, if any: a correction fit on
    one head's or on read answers does not fit another's or unread ones)."""
    key: list[Any] = [q.type, q.instructions, [str(label) for label in q.labels], list(q.option_texts),
                      list(q.legend), q.read]
    if q.part is not None:  # keys of questions without the key stay as they were
        key.append(q.part)
    return json.dumps(key, ensure_ascii=False)


# -- the stored correction and how a forward pass uses it --------------------------------------
@dataclass
class QuestionAdaptation:
    """One question's fitted correction, as stored under ``"adaptation"`` in the config."""

    key: str
    id: Any
    definition: Any
    method: str
    temperature: float
    """The temperature the base log-probabilities were read at when fitting."""
    log_a: float
    bias: list[float] | None
    weight: list[list[float]] | None
    center: list[float] | None
    n_labels: int
    part: str | None = None
    """The head the correction was fitted on, ``"own"`` or ``"open"`` (:mod:`.open_questions`); None
    in an adaptation written before the key existed, whose question is routed as any other."""
    sign: int = 1
    """-1: the checkpoint's log-probabilities are turned round before the correction (``logit =
    -a * lp + ...``: a yes/no read upside down, :mod:`jevlaya_lab.decisions.adapt`); stored as
    ``"sign": -1`` (version 2), absent for 1."""

    def to_value(self) -> dict[str, Any]:
        value = {"id": self.id, "definition": self.definition, "method": self.method,
                 "temperature": self.temperature, "log_a": self.log_a, "bias": self.bias,
                 "weight": self.weight, "center": self.center, "n_labels": self.n_labels}
        if self.part is not None:
            value["part"] = self.part
        if self.sign != 1:
            value["sign"] = self.sign
        return value


class Adaptation:
    """The adapted questions of an Agent, looked up by content (:func:`question_key`)."""

    def __init__(self, entries: Sequence[QuestionAdaptation]) -> None:
        self.entries: dict[str, QuestionAdaptation] = {e.key: e for e in entries}
        self._tensors: dict[str, tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]] = {}
        for e in entries:
            self._tensors[e.key] = (
                None if e.bias is None else torch.tensor(e.bias, dtype=torch.float32),
                None if e.weight is None else torch.tensor(e.weight, dtype=torch.float32),
                None if e.center is None else torch.tensor(e.center, dtype=torch.float32))

    @classmethod
    def from_value(cls, value: Any, source: str = "rl_agent_config.json") -> Adaptation:
        """Read the config value; a :class:`~jevlaya_lab.decisions.errors.CheckpointError` names what is wrong."""
        from jevlaya_lab.decisions.errors import CheckpointError

        def bad(what: str) -> CheckpointError:
            return CheckpointError(f"{source}: {ADAPTATION_KEY} is invalid: {what}; write it with "
                                   "agent.adapt(...).save(directory)")

        version = value.get("version") if isinstance(value, dict) else None
        if isinstance(version, bool) or version not in VERSIONS:
            raise bad(f"expected an object with \"version\" {' or '.join(map(str, VERSIONS))}, got {version!r} "
                      "(a newer jevlaya_lab wrote it? upgrade to read it)")
        entries = []
        for i, item in enumerate(value.get("questions") or []):
            try:
                qid = item["id"]
                parsed = parse_questions({qid: item["definition"]})[0]
                part = item.get("part")
                if part not in (None, "own", "open"):
                    raise ValueError(f"part must be 'own' or 'open', got {part!r}")
                sign = item.get("sign", 1)
                if sign not in (1, -1) or isinstance(sign, bool) or (sign == -1 and value["version"] < 2):
                    raise ValueError(f"sign must be 1 or -1 (-1 in version 2 only), got {sign!r}")
                entries.append(QuestionAdaptation(
                    question_key(parsed), qid, item["definition"], str(item["method"]),
                    float(item["temperature"]), float(item["log_a"]), item.get("bias"), item.get("weight"),
                    item.get("center"), int(item.get("n_labels", 0)), part, int(sign)))
            except (KeyError, TypeError, ValueError) as exc:
                raise bad(f"questions[{i}] ({exc})") from None
        return cls(entries)

    def to_value(self) -> dict[str, Any]:
        version = ADAPTATION_VERSION if any(e.sign != 1 for e in self.entries.values()) else 1
        return {"version": version, "questions": [e.to_value() for e in self.entries.values()]}

    def part_of(self, q: Question) -> str | None:
        """The head ``q``'s correction was fitted on (``"own"``, ``"open"``), or None when ``q`` is
        not adapted or its entry does not say (:attr:`QuestionAdaptation.part`)."""
        entry = self.entries.get(question_key(q))
        return None if entry is None else entry.part

    def questions(self) -> dict[Any, Any]:
        """The adapted question definitions by the id they were adapted under."""
        return {e.id: json.loads(json.dumps(e.definition)) for e in self.entries.values()}

    def adjust(self, agent: Agent, batch: Any, tokens: Sequence[Any], logits: torch.Tensor,
               max_len: int, pooled: torch.Tensor | None = None) -> torch.Tensor:
        """``logits`` (slot order, ``[states x questions, max_k]``) with the adapted questions' rows
        replaced, in the units ``Agent._decode`` divides by the current temperature. ``pooled``: the
        states' vectors the forward pass already pooled (a checkpoint with a similarity prior), so
        a correction reads them without a second encoder pass; None pools them here."""
        questions = batch.questions
        found = [(j, q, e) for j, q in enumerate(questions)
                 if (e := self.entries.get(question_key(q))) is not None]
        if not found:
            return logits
        vectors = None
        if any(e.weight is not None for _, _, e in found):
            vectors = (state_vectors(agent, tokens, max_len) if pooled is None else pooled.float()).to(logits.device)
        out = logits.clone()
        for j, q, e in found:
            k = q.n_options
            rows = out[j::len(questions)]
            lp = torch.log_softmax(rows[:, :k].float() / e.temperature, dim=-1).clamp_min(LOG_FLOOR)
            caller_lp = caller_order(q, lp)
            bias, weight, center = self._tensors[e.key]
            adapted = e.sign * math.exp(e.log_a) * caller_lp
            if bias is not None:
                adapted = adapted + bias.to(adapted.device)
            if weight is not None and vectors is not None and center is not None:
                adapted = adapted + (vectors - center.to(vectors.device)) @ weight.to(vectors.device).T
            slots = adapted[:, list(q.option_order)] * agent.temperatures.get(q.type, k)
            rows[:, :k] = slots.to(rows.dtype)
            out[j::len(questions)] = rows
        return out


def adaptation_of(config: Any) -> Adaptation | None:
    """A checkpoint config's few-shot corrections (``"adaptation"``), or None when it has none."""
    return Adaptation.from_value(config.extra[ADAPTATION_KEY]) if ADAPTATION_KEY in config.extra else None
