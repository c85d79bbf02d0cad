"""Open questions: the user's own questions read by a second head, over an encoder tuned for them.

A checkpoint answers its presets best with the head trained on them, over the encoder they were
trained on. A question in the user's own words is another matter: tuning the encoder on many
intent pairs lifts unseen choices and statements (``mini-en``, the dev half of the user-question
benchmark: choices 0.700 -> 0.742, yes/no AUC 0.829 -> 0.855), but it moves the vectors of
messages, which lowers the presets' yes/no answers (a head trained over the tuned encoder: the
presets' ``needs_reply`` on held-out hand-written messages 0.835 -> 0.772 balanced; on their locked
test ``is_spam`` fell 0.99 -> 0.77 in an earlier run). So a checkpoint may carry both: its own head
for the questions it was trained on, and an **open part** for every other question (the README's
"The open part" has the measurements). It declares the part in ``rl_agent_config.json``::

    "open_questions": {<the open part's own rl_agent_config: encoder, head_layers, act_costs,
                        max_len, head_max_len, temperature, temperature_by_options,
                        similarity_prior, ...>}

and ``model.safetensors`` holds the part's tensors under ``open_model.`` (its whole encoder among
them; a bundled head ships only the change of the wheel's encoder, :mod:`.encoder_delta`).

**Which questions are open.** A question whose definition says ``"part": "own"`` or ``"open"``
goes there (:mod:`.questions`): a user who finds a wording answered better by the other head can
say so. Otherwise a question is open when any text it is read by is far from the
training texts of the checkpoint's own head: the gate of its prior (:meth:`SimilarityPrior.gate
<jevlaya_lab.decisions.prior.SimilarityPrior.gate>`) below
:data:`~jevlaya_lab.decisions.statement_reader.READ_BELOW`, the line below which the reader
already reads a statement as unseen. The texts are a yes/no question's statement, every option
of a choice and every level of a score. So a preset, asked in its own words, is answered exactly
as without the open part, and a user's own question by the open part. The split depends only on
the question's texts (and, once adapted, on the part its correction was fitted on: below), so a
question is always answered by the same part, and a few-shot correction (:mod:`.adapt`) is fitted
on, and applied to, that part's outputs.

**Which types are open.** The part's config may name the question types it answers,
``"question_types": ["noul"]`` (the default: every type, ``choice``, ``score`` and ``noul``); a question of
another type stays with the own head however far its texts are, unless its ``"part"`` says ``"open"``.
``mini-multi`` ships its open part for yes/no statements only: on the dev half of the user-question
benchmark the part lifted its statements (English AUC 0.755 -> 0.819, ECE 0.133 -> 0.104) but not its
choices, where the own head reads options with a reader of its own (the README's "The open part").

**Which types an adapted question reads.** ``"adapted_types"`` (default: the ``question_types``,
which it must hold) names the types a far question reads from the open part once the user adapts
it: ``adapt`` fits its correction on the open part's answers and state vectors, the entry records
``"part": "open"``, and the adapted Agent answers the question there (an adaptation written before
the key existed names no part, and its questions are routed as before). ``mini-multi`` ships
``["noul", "choice"]``. Zero-shot, its own head reads a user's choice about as well as the part does
(dev half: 0.673 against 0.695, below the bar its part was shipped by); with labels, a correction
over the tuned encoder's vectors goes further. On the dev half (36 statements, 11 choices, labels
drawn with seeds 0, 1 and 2, scored on each question's other states: ``bench/adapt.py --half dev
--checkpoint mini-multi --no-setfit --seed S``) choice accuracy at k = 4 / 8 / 16 labels is 0.712 /
0.736 / 0.812 against the own head's 0.660 / 0.697 / 0.783, better at k = 8 for every seed; the
ECE over both types at k = 8 is 0.103 against 0.099 (choices alone 0.144 against 0.125), and the
statements are unchanged. The bar, set after one seed and before the other two: k = 8 at least
0.03 above the own head, k = 4 and 16 not below it, and ECE at k = 8 no more than 0.01 higher.
The locked half, read once after the decision (``bench/adapt.py --checkpoint mini-multi
--no-setfit``, seed 0): 0.723 / 0.748 / 0.854 against 0.592 / 0.670 / 0.771.

**What a call costs.** One pass per part that has questions: a call that asks presets only, or
open questions only, costs what one head costs; a call that mixes both encodes its states twice.
The answers of both parts come back in the caller's question order, as one result per state whose
``usage`` counts the tokens both passes read. Each answer of the open part says so, ``"part":
"open"``, and the answers card and view show it ("noul · open part"), so a notebook shows which
head read a question.

Decided here, as a user of both heads would expect: the route is by question, not by state or by
option (a choice's options are compared in one softmax, so all of them come from one part); a
checkpoint whose own head has no similarity prior cannot route (it has no gate) and is refused
when loaded; the open part may not have an open part of its own; a calibration file given to the
Agent (``calibration=``) sets the temperatures of the checkpoint's own head only, the open part
keeps those in its config.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from jevlaya_lab.decisions.checkpoint_config import CONFIG_FILE, CheckpointConfig
from jevlaya_lab.decisions.errors import CheckpointError
from jevlaya_lab.decisions.questions import QUESTION_TYPES
from jevlaya_lab.decisions.statement_reader import READ_BELOW

__all__ = ["ADAPTED_TYPES_KEY", "OPEN_KEY", "OPEN_PREFIX", "PART_KEY", "TYPES_KEY", "OpenRoute", "adapted_types",
           "answering", "merge_results", "merge_usage", "open_config", "open_types"]

OPEN_KEY = "open_questions"
"""The key of ``rl_agent_config.json`` that declares an open part."""
OPEN_PREFIX = "open_model."
"""Where the open part's tensors live in ``model.safetensors``."""
PART_KEY = "part"
"""The key an answer of the open part carries (``"open"``); the own head's answers have none."""
TYPES_KEY = "question_types"
"""The key of the open part's config that names the question types it answers (default: all)."""
ADAPTED_TYPES_KEY = "adapted_types"
"""The key of the open part's config that names the question types it answers once adapted
(default: its :data:`TYPES_KEY`)."""


def open_config(config: CheckpointConfig, source: Any = CONFIG_FILE) -> CheckpointConfig | None:
    """The open part's config, checked, or None when the checkpoint declares none.

    Raises :class:`~jevlaya_lab.decisions.errors.CheckpointError` naming the key when the entry is
    not an object, is not a valid config, or declares an open part of its own, or when the
    checkpoint's own head has no similarity prior to route by."""
    value = config.extra.get(OPEN_KEY)
    if value is None:
        return None
    where = f"{source}: {OPEN_KEY}"
    if not isinstance(value, dict):
        raise CheckpointError(f"{where} = {value!r} is invalid; use an object: the open part's own "
                              f"{CONFIG_FILE} entries, or leave the key out")
    nested = CheckpointConfig.from_dict(value, source=where)
    if OPEN_KEY in nested.extra:
        raise CheckpointError(f"{where}: the open part declares an {OPEN_KEY} of its own; an open part "
                              "answers every question it is given, so remove the inner entry")
    if "similarity_prior" not in config.extra:
        raise CheckpointError(f"{source}: {OPEN_KEY} needs the checkpoint's own head to have a "
                              "similarity_prior, whose gate tells which questions are open; add one or "
                              f"remove {OPEN_KEY}")
    adapted_types(nested, where)
    return nested


def open_types(opened: CheckpointConfig, where: Any = OPEN_KEY) -> frozenset[str]:
    """The question types the open part ``opened`` answers: its ``question_types`` entry, or every type.

    Raises :class:`~jevlaya_lab.decisions.errors.CheckpointError` naming the key when the entry is
    not a non-empty list of question types."""
    value = opened.extra.get(TYPES_KEY, list(QUESTION_TYPES))
    if not isinstance(value, list) or not value or any(v not in QUESTION_TYPES for v in value):
        raise CheckpointError(f"{where}: {TYPES_KEY} = {value!r} is invalid; use a non-empty list of "
                              f"{list(QUESTION_TYPES)}, or leave the key out to answer every type")
    return frozenset(value)


def adapted_types(opened: CheckpointConfig, where: Any = OPEN_KEY) -> frozenset[str]:
    """The question types the open part ``opened`` answers once a question is adapted: its
    ``adapted_types`` entry, or its :func:`open_types`.

    Raises :class:`~jevlaya_lab.decisions.errors.CheckpointError` naming the key when the entry is
    not a list of question types that holds every type of ``question_types`` (a type the part
    answers zero-shot cannot move to the own head once labelled)."""
    types = open_types(opened, where)
    value = opened.extra.get(ADAPTED_TYPES_KEY, sorted(types))
    if not isinstance(value, list) or any(v not in QUESTION_TYPES for v in value) or not types <= set(value):
        raise CheckpointError(f"{where}: {ADAPTED_TYPES_KEY} = {value!r} is invalid; use a list of "
                              f"{list(QUESTION_TYPES)} that holds every type of {TYPES_KEY} "
                              f"({sorted(types)}), or leave the key out")
    return frozenset(value)


def _text_mask(question: Any, true_slot: torch.Tensor, width: int) -> torch.Tensor:
    """The slots whose texts route ``question``: a yes/no's statement, every option or level else."""
    if question.type == "noul":
        return true_slot
    mask = torch.zeros(width, dtype=torch.bool)
    mask[:question.n_options] = True
    return mask


class OpenRoute:
    """Which questions of a call the open part answers, and the Agent over that part.

    ``builder`` is the checkpoint's own :class:`~jevlaya_lab.decisions.prior_inputs.PriorBuilder`
    (its gate routes, over option vectors it caches per question set anyway), ``agent`` an Agent
    over the open part, ``types`` the question types it answers (:func:`open_types`), ``adapted``
    those it answers once adapted (:func:`adapted_types`)."""

    def __init__(self, builder: Any, agent: Any, types: frozenset[str], adapted: frozenset[str]) -> None:
        self.builder = builder
        self.agent = agent
        self.types = types
        self.adapted = adapted

    @classmethod
    def of(cls, agent: Any, network: Any, tokenizer: Any, config: CheckpointConfig, quantize: str | None,
           *, make: Callable[..., Any]) -> OpenRoute | None:
        """The route of ``agent`` (built over ``network`` and ``config``) to its open part: an Agent
        made by ``make`` over ``network.open_model``, on the same device, under the same model id,
        sharing ``agent``'s few-shot corrections; None for a checkpoint without an open part. A
        network and a config that disagree about the part are a ``ValueError``."""
        opened = open_config(config)
        if (opened is None) != (network.open_model is None) or (opened is not None and agent._prior is None):
            raise ValueError(f"Agent(model): the config {'declares' if opened else 'does not declare'} "
                             f"{OPEN_KEY} but the DecisionModel {'has no' if opened else 'has an'} open_model "
                             "(or no similarity prior to route by); load the checkpoint with load_checkpoint")
        if opened is None:
            return None
        part = make((network.open_model, tokenizer, opened), device=agent.device, model_id=agent.model_id,
                    quantize=quantize)
        part._adaptation = agent._adaptation
        return cls(agent._prior, part, open_types(opened), adapted_types(opened))

    def split(self, questions: tuple[Any, ...], *,
              adapting: bool = False) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """``(own, open)``: the questions the checkpoint's own head answers, and the open ones, each
        in the given order. A far question of an adapted type is open when its correction was
        fitted on the open part, and with ``adapting`` (the route a new fit reads, ``adapt``)."""
        if not questions:
            return (), ()
        width = max(q.n_options for q in questions)
        _, true_slot, gate, _, _ = self.builder.question_vectors(questions, width)
        own: list[Any] = []
        opened: list[Any] = []
        for j, q in enumerate(questions):
            if q.part is not None:  # the user's "part" key decides
                (opened if q.part == "open" else own).append(q)
                continue
            texts = gate[j][_text_mask(q, true_slot[j], width)]
            far = len(texts) and float(texts.min()) < READ_BELOW
            # the adaptation is looked up only for a type that adapting moves (a key per question)
            moved = q.type not in self.types and q.type in self.adapted and (adapting or self._adapted_on_open(q))
            (opened if far and (q.type in self.types or moved) else own).append(q)
        return tuple(own), tuple(opened)

    def _adapted_on_open(self, q: Any) -> bool:
        """Whether ``q``'s few-shot correction was fitted on the open part (the part shares the
        Agent's adaptation, :meth:`of`)."""
        adaptation = self.agent._adaptation
        return adaptation is not None and adaptation.part_of(q) == "open"

    def answer(self, agent: Any, tokens: Sequence[Any], questions: tuple[Any, ...],
               *budgets: Any) -> list[dict[str, Any]]:
        """One result per state of ``tokens`` for ``questions``: ``agent`` (the checkpoint's own) and
        the open part each answer their questions with ``Agent._answer`` and the call's ``budgets``
        (a part with none is not run), merged in the questions' order (:func:`merge_results`); each
        answer of the open part carries ``"part": "open"``."""
        own, opened = self.split(questions)
        if not opened:
            alone: list[dict[str, Any]] = agent._answer(tokens, questions, *budgets)
            return alone
        from_open = self.agent._answer(tokens, opened, *budgets)
        for result in from_open:  # what a notebook shows beside the answer (display.answer_rows)
            for answer in result["answers"].values():
                answer[PART_KEY] = "open"
        return merge_results(questions, [from_open] + ([agent._answer(tokens, own, *budgets)] if own else []))


def answering(agent: Any, questions: tuple[Any, ...], *, adapting: bool = False) -> list[Any]:
    """Per question, the Agent whose head answers it: ``agent`` itself, or its open part's Agent
    for an open question (what a few-shot fit must read, and whose temperatures it must use);
    ``adapting``: the head that answers it once adapted (:meth:`OpenRoute.split`)."""
    route = agent._open
    if route is None:
        return [agent] * len(questions)
    _, opened = route.split(questions, adapting=adapting)
    return [route.agent if q in opened else agent for q in questions]


def merge_results(questions: Sequence[Any], parts: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per state, one result with every question's answer in ``questions``' order, from the parts
    that answered it, and the usage of all its rows (:func:`merge_usage`). The first part's result is
    the one kept (its type and model id), with its answers and usage replaced."""
    merged = []
    for results in zip(*parts):
        found: dict[Any, Any] = {}
        for result in results:
            found.update(result["answers"])
        first = results[0]
        first["answers"] = {q.id: found[q.id] for q in questions}
        first["usage"] = merge_usage(questions, [r["usage"] for r in results])
        merged.append(first)
    return merged


def merge_usage(questions: Sequence[Any], usages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One state's usage over the parts' rows: tokens summed (every question has its row in one
    part), the state's own length once, the most state tokens any row lost, the truncated questions
    in ``questions``' order, and the collapsed options of every part; any other key as the first
    part gives it (nothing is dropped)."""
    truncated = {qid for usage in usages for qid in usage["truncated_questions"]}
    out = dict(usages[0])
    out.update({
        "input_tokens": sum(u["input_tokens"] for u in usages),
        "output_tokens": sum(u["output_tokens"] for u in usages),
        "state_tokens_dropped": max(u["state_tokens_dropped"] for u in usages),
        "truncated": bool(truncated),
        "truncated_questions": [q.id for q in questions if q.id in truncated],
    })
    options = {qid: info for usage in usages for qid, info in usage.get("options", {}).items()}
    if options:
        out["options"] = {q.id: options[q.id] for q in questions if q.id in options}
    return out
