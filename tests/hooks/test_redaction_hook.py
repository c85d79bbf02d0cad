"""RedactionHook: emails/phones in str/dict/list states, before the model."""

import copy

import pytest

from jevlaya_lab.hooks import PredictContext
from jevlaya_lab.hooks.redaction import RedactionHook, redact


@pytest.mark.parametrize("text,expected", [
    ("Mail bob.smith+billing@example.co.uk today", "Mail [EMAIL] today"),
    ("call +44 20 7946 0958 now", "call [PHONE] now"),
    ("call (555) 123-4567 or 555.123.4567", "call [PHONE] or [PHONE]"),
    ("mobile 06 12 34 56 78", "mobile [PHONE]"),
    ("intl +15551234567", "intl [PHONE]"),
    ("Tel: 030 1234567", "Tel: [PHONE]"),
])
def test_emails_and_phone_numbers_are_redacted(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize("text", [
    "invoice 4411 and order 1234567890",  # plain digit runs are ids, not phones
    "due 2024-01-15 or 15.01.2024",  # dates
    "server 10.20.30.40",  # IPv4
    "version 1.2.3, amount 1,250.00, ticket 12-34",
    "write to support at example dot com",
])
def test_ids_dates_and_addresses_that_are_not_phones_or_emails_are_kept(text):
    assert redact(text) == text


def test_dicts_lists_tuples_and_bytes_are_redacted_keys_and_numbers_kept():
    """Redaction covers str/dict/list states; keys and non-string values are untouched."""
    state = {"from": "ann@example.org", "ann@example.org": 1,
             "turns": [{"role": "user", "content": "ring me on +1 555 123 4567"}],
             "raw": b"cc: joe@example.com", "pair": ("x", "joe@example.com"), "n": 5551234567}
    assert redact(state) == {"from": "[EMAIL]", "ann@example.org": 1,
                             "turns": [{"role": "user", "content": "ring me on [PHONE]"}],
                             "raw": b"cc: [EMAIL]", "pair": ("x", "[EMAIL]"), "n": 5551234567}


def test_the_hook_rewrites_ctx_states_with_copies_and_counts():
    """The hook replaces ctx.states with redacted copies: the caller's objects stay unchanged."""
    state = {"body": "I am bob@example.com, phone +49 30 1234567"}
    original = copy.deepcopy(state)
    ctx = PredictContext(states=[state, "no pii here"], questions={})
    hook = RedactionHook()
    hook.on_predict_start(ctx)
    assert ctx.states == [{"body": "I am [EMAIL], phone [PHONE]"}, "no pii here"]
    assert state == original
    assert hook.counts == {"email": 1, "phone": 1}


def test_options_replacement_and_selective_kinds():
    assert redact("a@b.io +1 555 123 4567", phones=False) == "[EMAIL] +1 555 123 4567"
    assert redact("a@b.io", replacement="<{kind}>") == "<EMAIL>"
    assert redact("a@b.io", replacement=lambda kind, text: text.split("@")[1]) == "b.io"
    with pytest.raises(ValueError, match="emails=False and phones=False"):
        RedactionHook(emails=False, phones=False)
    with pytest.raises(ValueError, match="replacement='\\[\\{who\\}\\]'"):
        RedactionHook(replacement="[{who}]")


def test_the_model_sees_redacted_states_through_a_router(tmp_path):
    """End to end: a Router with the hook installed sends redacted text to the Agent."""
    from jevlaya_lab.decisions.router import Router
    from jevlaya_lab.decisions.testing import make_tiny_checkpoint
    from jevlaya_lab.hooks import BaseHook

    class AgentSees(BaseHook):
        def __init__(self):
            self.states = []

        def on_predict_start(self, ctx):
            self.states.extend(ctx.states)

    sees = AgentSees()
    router = Router({"tiny": make_tiny_checkpoint(tmp_path / "tiny")}, hooks=[RedactionHook()],
                    agent_kwargs={"hooks": [sees]})
    questions = {"spam": {"type": "noul", "instructions": "The message is spam."}}
    router.predict_batch([{"state": "mail me at x@y.com", "questions": questions},
                          {"state": {"phone": "+1 555 123 4567"}, "questions": questions}])
    assert sees.states == ["mail me at [EMAIL]", {"phone": "[PHONE]"}]
