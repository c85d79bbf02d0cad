"""Typed decisions: an encoder answers choice / score / yes-no questions in one forward pass.

Modules, in the order a call uses them: ``questions`` (validation, rendering), ``encoding``
(token rows and budgets), ``model`` (the network), ``calibration`` (temperatures, answers,
``min_confidence``), ``agent`` (the ``Agent``; ``device`` where and in which precision it runs),
``results`` (``AgentResult``, ``Decision``), ``router`` (the ``Router``, with ``routing_policy``,
``router_loading`` and ``router_batch``), ``structured`` (``decide``: JSON schema / pydantic ->
questions -> values), ``checkpoint`` (directory IO; ``checkpoint_config`` the config schema,
``checkpoint_source`` where a source is), ``testing`` (tiny checkpoints) and ``errors`` (every
exception of this area). Names below load lazily so importing this package does not import torch.
"""

from __future__ import annotations

from jevlaya_lab._lazy import lazy_attributes

_EXPORTS: dict[str, str] = {
    "Agent": "jevlaya_lab.decisions.agent",
    "load": "jevlaya_lab.decisions.agent",
    "DecisionModel": "jevlaya_lab.decisions.model",
    "DecisionOutput": "jevlaya_lab.decisions.model",
    "EncodedBatch": "jevlaya_lab.decisions.encoding",
    "encode_requests": "jevlaya_lab.decisions.encoding",
    "DecisionResult": "jevlaya_lab.decisions.structured",
    "decide": "jevlaya_lab.decisions.structured",
    "decide_batch": "jevlaya_lab.decisions.structured",
    "questions_from_schema": "jevlaya_lab.decisions.structured",
    "Question": "jevlaya_lab.decisions.questions",
    "parse_questions": "jevlaya_lab.decisions.questions",
    "Checkpoint": "jevlaya_lab.decisions.checkpoint",
    "CheckpointConfig": "jevlaya_lab.decisions.checkpoint_config",
    "load_checkpoint": "jevlaya_lab.decisions.checkpoint",
    "save_checkpoint": "jevlaya_lab.decisions.checkpoint",
    "make_tiny_checkpoint": "jevlaya_lab.decisions.testing",
    "BudgetError": "jevlaya_lab.decisions.errors",
    "BundledCheckpointError": "jevlaya_lab.decisions.errors",
    "CheckpointError": "jevlaya_lab.decisions.errors",
    "CheckpointNotFoundError": "jevlaya_lab.decisions.errors",
    "DatasetError": "jevlaya_lab.decisions.errors",
    "NearTypoWarning": "jevlaya_lab.decisions.errors",
    "QuestionError": "jevlaya_lab.decisions.errors",
    "SchemaError": "jevlaya_lab.decisions.errors",
    "TokenizerError": "jevlaya_lab.decisions.errors",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _EXPORTS)
