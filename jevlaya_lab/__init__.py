"""jevlaya_lab: a workbench for typed decisions and pools of LLMs.

The public names below are imported lazily, so ``import jevlaya_lab`` stays cheap and never
imports torch; the model code loads on first use of ``Agent``, ``load`` or ``Router``. Every
exception class derives from :class:`JevlayaError` (the tree: :mod:`jevlaya_lab.errors`); all of
them, and the result types ``LLMResult`` and ``Decision``, are importable from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jevlaya_lab import _tables  # registers the compact tables (predict_batch lists, snapshots)
from jevlaya_lab import display as _display  # registers the notebook renderers of the result types
from jevlaya_lab._lazy import lazy_attributes

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "Agent": "jevlaya_lab.decisions.agent",
    "load": "jevlaya_lab.decisions.agent",
    "Router": "jevlaya_lab.decisions.router",
    "PredictContext": "jevlaya_lab.hooks",
    "BaseHook": "jevlaya_lab.hooks",
    "HOOK_EVENTS": "jevlaya_lab.hooks",
    "Broker": "jevlaya_lab.broker",
    "AsyncBroker": "jevlaya_lab.broker",
    "LLMConfig": "jevlaya_lab.broker",
    "run_tool_loop": "jevlaya_lab.broker",
    "arun_tool_loop": "jevlaya_lab.broker",
    # results
    "LLMResult": "jevlaya_lab.broker.results",
    "SyncLLMResult": "jevlaya_lab.broker.results",
    "Decision": "jevlaya_lab.decisions.results",
    "DecisionResult": "jevlaya_lab.decisions.structured",
    "decide": "jevlaya_lab.decisions.structured",
    "decide_batch": "jevlaya_lab.decisions.structured",
    # errors: one root, one errors module per area (see jevlaya_lab.errors)
    "JevlayaError": "jevlaya_lab.errors",
    "BrokerError": "jevlaya_lab.broker.errors",
    "CatalogError": "jevlaya_lab.broker.errors",
    "LLMRequestError": "jevlaya_lab.broker.errors",
    "NoLLMAvailableError": "jevlaya_lab.broker.errors",
    "LLMTimeoutError": "jevlaya_lab.broker.errors",
    "StreamInterruptedError": "jevlaya_lab.broker.errors",
    "StreamReplacementError": "jevlaya_lab.broker.errors",
    "ProviderError": "jevlaya_lab.broker.errors",
    "AuthError": "jevlaya_lab.broker.errors",
    "RateLimitError": "jevlaya_lab.broker.errors",
    "InvalidProviderResponseError": "jevlaya_lab.broker.errors",
    "ToolLoopLimitError": "jevlaya_lab.broker.errors",
    "BrokerClosedError": "jevlaya_lab.broker.errors",
    "UnknownCallError": "jevlaya_lab.broker.errors",
    "UnknownLLMError": "jevlaya_lab.broker.errors",
    "PromptError": "jevlaya_lab.broker.errors",
    "QuestionError": "jevlaya_lab.decisions.errors",
    "SchemaError": "jevlaya_lab.decisions.errors",
    "StateError": "jevlaya_lab.decisions.errors",
    "LabelError": "jevlaya_lab.decisions.errors",
    "BudgetError": "jevlaya_lab.decisions.errors",
    "TokenizerError": "jevlaya_lab.decisions.errors",
    "CheckpointError": "jevlaya_lab.decisions.errors",
    "CheckpointNotFoundError": "jevlaya_lab.decisions.errors",
    "BundledCheckpointError": "jevlaya_lab.decisions.errors",
    "DatasetError": "jevlaya_lab.decisions.errors",
    "NearTypoWarning": "jevlaya_lab.decisions.errors",
    "InvalidHookError": "jevlaya_lab.hooks.errors",
    "JournalSchemaError": "jevlaya_lab.journal.errors",
    "UnsupportedSourceError": "jevlaya_lab.journal.errors",
    "JournalUnavailableError": "jevlaya_lab.journal.errors",
    "JournalFileError": "jevlaya_lab.journal.errors",
    "JournalWriteError": "jevlaya_lab.journal.errors",
    "LocalModelError": "jevlaya_lab.local.errors",
    "ChatRequestError": "jevlaya_lab.local.errors",
    "FaultProfileError": "jevlaya_lab.local.errors",
    "UnknownModelError": "jevlaya_lab.local.errors",
    "NotebookCheckError": "jevlaya_lab.notebooks",
    "BinderBuildError": "jevlaya_lab.binder",
    "FrameError": "jevlaya_lab.frames.errors",
    "TelemetryError": "jevlaya_lab.telemetry",
}
_SUBPACKAGES = {
    "presets": "jevlaya_lab.decisions.presets",
    "widgets": "jevlaya_lab.widgets",
    "analysis": "jevlaya_lab.analysis",
    "local": "jevlaya_lab.local",
    "hooks": "jevlaya_lab.hooks",
    "decisions": "jevlaya_lab.decisions",
    "broker": "jevlaya_lab.broker",
    "journal": "jevlaya_lab.journal",
    "frames": "jevlaya_lab.frames",
}

__all__ = sorted([*_EXPORTS, *_SUBPACKAGES, "__version__"])


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _EXPORTS, _SUBPACKAGES)


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from jevlaya_lab.binder import (
        BinderBuildError,
    )
    from jevlaya_lab.broker import AsyncBroker, Broker, LLMConfig, arun_tool_loop, run_tool_loop
    from jevlaya_lab.broker.errors import (
        AuthError,
        BrokerClosedError,
        BrokerError,
        CatalogError,
        InvalidProviderResponseError,
        LLMRequestError,
        LLMTimeoutError,
        NoLLMAvailableError,
        PromptError,
        ProviderError,
        RateLimitError,
        StreamInterruptedError,
        StreamReplacementError,
        ToolLoopLimitError,
        UnknownCallError,
        UnknownLLMError,
    )
    from jevlaya_lab.broker.results import (
        LLMResult,
        SyncLLMResult,
    )
    from jevlaya_lab.decisions.agent import Agent, load
    from jevlaya_lab.decisions.errors import (
        BudgetError,
        BundledCheckpointError,
        CheckpointError,
        CheckpointNotFoundError,
        DatasetError,
        LabelError,
        NearTypoWarning,
        QuestionError,
        SchemaError,
        StateError,
        TokenizerError,
    )
    from jevlaya_lab.decisions.results import (
        Decision,
    )
    from jevlaya_lab.decisions.router import Router
    from jevlaya_lab.decisions.structured import DecisionResult, decide, decide_batch
    from jevlaya_lab.errors import (
        JevlayaError,
    )
    from jevlaya_lab.frames.errors import FrameError
    from jevlaya_lab.hooks import HOOK_EVENTS, BaseHook, PredictContext
    from jevlaya_lab.hooks.errors import (
        InvalidHookError,
    )
    from jevlaya_lab.journal.errors import (
        JournalFileError,
        JournalSchemaError,
        JournalUnavailableError,
        JournalWriteError,
        UnsupportedSourceError,
    )
    from jevlaya_lab.local.errors import (
        ChatRequestError,
        FaultProfileError,
        LocalModelError,
        UnknownModelError,
    )
    from jevlaya_lab.notebooks import (
        NotebookCheckError,
    )
    from jevlaya_lab.telemetry import TelemetryError
