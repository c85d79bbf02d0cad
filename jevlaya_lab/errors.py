"""``JevlayaError``: the one root of every exception class jevlaya_lab defines.

Each area keeps its exceptions in its own ``errors.py``; every class there derives from
``JevlayaError`` *and* keeps the built-in base it always had, so ``except ValueError`` (or
``TypeError``, ``ConnectionError``, ...) written against an older version still catches it::

    JevlayaError
    ├── BrokerError                         jevlaya_lab.broker.errors
    │   ├── LLMRequestError                 a call ended without an answer (its own tree)
    │   ├── CatalogError (ValueError)       a catalog file or URL is not a catalog
    │   ├── UnknownCallError (ValueError)   record_quality(call_id=...) names no journaled answer
    │   ├── UnknownLLMError (KeyError)      direct(alias) / direct(name=...) names no known model
    │   └── PromptError (ValueError)        a call's input no model could be sent (lone surrogate,
    │                                       nesting); raised before any model is tried
    ├── QuestionError (ValueError)          jevlaya_lab.decisions.errors
    ├── SchemaError (ValueError)            a decide() schema that cannot become questions
    ├── StateError (ValueError)             a state the encoder cannot read (lone surrogate, too deep)
    ├── LabelError (ValueError)             a bad label given to agent.adapt (the example and the field named)
    ├── BudgetError (ValueError)
    ├── TokenizerError (TypeError)
    ├── CheckpointError (ValueError)
    │   └── CheckpointNotFoundError (FileNotFoundError)
    ├── BundledCheckpointError (RuntimeError)
    ├── DatasetError (FileNotFoundError)  training data missing (jevlaya-lab train)
    ├── InvalidHookError (TypeError)        jevlaya_lab.hooks.errors
    ├── JournalSchemaError (RuntimeError)   jevlaya_lab.journal.errors
    ├── UnsupportedSourceError (ValueError)
    ├── JournalUnavailableError (ConnectionError)
    ├── JournalFileError (RuntimeError)     a journal file that is not a database, damaged, read-only
    ├── JournalWriteError (RuntimeError)    rows saved to the spill file when closing
    ├── LocalModelError (RuntimeError)      jevlaya_lab.local.errors
    ├── ChatRequestError (ValueError)
    ├── FaultProfileError (ValueError)
    ├── UnknownModelError (LookupError)
    ├── FrameError (ValueError)             jevlaya_lab.frames.errors: a table a table run cannot read
    ├── TelemetryError (ValueError)         jevlaya_lab.telemetry: a bad exporter argument (endpoint, headers)
    ├── NotebookCheckError (AssertionError) jevlaya_lab.notebooks
    └── BinderBuildError (RuntimeError)   jevlaya_lab.binder: a step of the simulated Binder build failed

Not every failure is a ``JevlayaError``: an argument of the wrong Python type or an out-of-range plain
value (``hooks=5``, ``max_entries=0``) still raises a plain ``TypeError`` / ``ValueError`` whose
message names the field and the fix, as the standard library and httpx do; ``JevlayaError``
marks the failures that belong to this library's own concepts. Every public error is exported
from ``jevlaya_lab``.
"""

from __future__ import annotations

__all__ = ["JevlayaError"]


class JevlayaError(Exception):
    """Base class of every exception class jevlaya_lab defines."""
