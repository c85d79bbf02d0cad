"""Exceptions (and the one warning) of typed decisions; see :mod:`jevlaya_lab.errors` for the tree.

Every error keeps the built-in base it had before it moved here, so existing ``except``
clauses still catch it.
"""

from __future__ import annotations

from jevlaya_lab.errors import JevlayaError

__all__ = ["BudgetError", "BundledCheckpointError", "CheckpointError", "CheckpointNotFoundError",
           "DatasetError", "LabelError", "NearTypoWarning", "QuestionError", "SchemaError", "StateError",
           "TokenizerError"]


class QuestionError(JevlayaError, ValueError):
    """A question definition is malformed; the message starts with ``question '<id>': ``."""


class SchemaError(JevlayaError, ValueError):
    """A schema given to ``decide`` cannot become typed questions; the message names the path
    (``properties.<name>``) and what to use instead."""


class StateError(JevlayaError, ValueError):
    """A state the encoder cannot read: a string in it is not valid Unicode (a lone surrogate
    such as ``"\\ud800"``, which no tokenizer can encode), or it is nested deeper than
    ``MAX_STATE_DEPTH`` lists/dicts. The message names the state's index, the place inside it
    and the fix; nothing has been run for the batch."""


class BudgetError(JevlayaError, ValueError):
    """A token budget is invalid or too small for a question's options."""


class TokenizerError(JevlayaError, TypeError):
    """The tokenizer cannot build decision rows (not a fast tokenizer, no mask token, ...)."""


class CheckpointError(JevlayaError, ValueError):
    """A checkpoint is malformed: bad config values, missing tensors or shape mismatches."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No checkpoint at the given source (missing directory or file, or hub unreachable)."""


class BundledCheckpointError(JevlayaError, RuntimeError):
    """A bundled checkpoint cannot be assembled (missing or altered encoder wheel, missing head)."""


class DatasetError(JevlayaError, FileNotFoundError):
    """A training dataset folder or file is missing or unreadable; the message names the path and the fix."""


class LabelError(JevlayaError, ValueError):
    """A label given to ``agent.adapt`` cannot be used; the message names the example (``examples[3]``
    or a DataFrame row) and the field, and says what to give instead."""


class NearTypoWarning(UserWarning):
    """A registered name or alias is one edit away from another one."""
