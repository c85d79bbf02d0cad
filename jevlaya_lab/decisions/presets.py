"""Ready-made question sets for common decisions (triage, email, guard, moderation, routing).

Each function returns a *fresh* ordered ``dict`` of question definitions, so callers may edit it
freely. States are expected to be dicts; every preset reads one named field of the state (given by
``field=``, defaulting to the name in :data:`STATE_FIELDS`) and says so in each instruction, so the
model attends to the right text. Passing a plain string state works too: the field name then only
appears in the instruction. The bundled checkpoints (``mini-en``, ``mini-multi``) were trained on
these exact labels, so keep the label sets when you want their calibrated probabilities.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "PRESETS",
    "STATE_FIELDS",
    "email_questions",
    "guard_questions",
    "moderation_questions",
    "router_questions",
    "triage_questions",
]

# preset name -> the state field its instructions point at
STATE_FIELDS: dict[str, str] = {
    "triage": "message",
    "email": "email",
    "guard": "user_input",
    "moderation": "text",
    "router": "request",
}

TRIAGE_INTENTS: dict[str, str] = {
    "refund": "wants money back for an order or a charge",
    "billing": "a question or problem about an invoice, a charge, a payment method or pricing",
    "technical_issue": "something in the product is broken, crashes, errors or does not work",
    "account_access": "cannot log in, password reset, locked account, two-factor problems",
    "shipping": "where an order is, delivery delays, tracking, wrong address",
    "cancellation": "wants to cancel or stop a subscription, plan or order",
    "product_question": "asks how a feature works or whether the product can do something",
    "feedback": "praise, a suggestion or general feedback with no request",
}
SENTIMENTS: dict[str, str] = {
    "negative": "unhappy, angry, frustrated or disappointed",
    "neutral": "matter-of-fact, neither happy nor unhappy",
    "positive": "happy, thankful or pleased",
}
PRIORITY_LEVELS: list[str] = [
    "low: no time pressure, can wait days",
    "normal: should be handled within a day or two",
    "high: blocks the customer or costs them money now",
    "critical: an outage, a security problem or a legal threat needing action within the hour",
]
EMAIL_CATEGORIES: dict[str, str] = {
    "sales_inquiry": "a prospect asks about prices, quotes, demos or buying",
    "support_request": "an existing customer needs help with a problem",
    "invoice": "an invoice, receipt, payment reminder or remittance",
    "meeting_request": "proposes, moves or confirms a meeting or call",
    "newsletter": "a bulk marketing mail, digest or announcement",
    "job_application": "applies for a job or sends a CV",
    "personal": "a private note from a friend, relative or colleague",
    "spam": "unsolicited scam, phishing or junk",
}
GUARD_ATTACKS: dict[str, str] = {
    "none": "an ordinary request with no attempt to misuse the assistant",
    "prompt_injection": "tries to override, ignore or reveal the system instructions",
    "jailbreak": "role-play or tricks to make the assistant drop its safety rules",
    "data_exfiltration": "tries to extract secrets, keys, passwords or other users' data",
    "harmful_request": "asks for help with weapons, malware, drugs or other serious harm",
}
MODERATION_CATEGORIES: dict[str, str] = {
    "ok": "acceptable content",
    "harassment": "insults or bullying aimed at a person",
    "hate": "attacks a group for race, religion, gender, origin or similar",
    "violence": "threats or praise of physical violence",
    "sexual": "sexually explicit content",
    "self_harm": "talks about hurting or killing oneself",
    "spam": "advertising, scams or repeated junk",
}
TOXICITY_LEVELS: list[str] = [
    "none: polite or neutral",
    "mild: rude or sarcastic",
    "strong: insulting or aggressive",
    "severe: threats, slurs or hateful abuse",
]
ROUTES: dict[str, str] = {
    "code": "write, explain or fix program code",
    "math": "calculate, solve equations or prove something",
    "writing": "draft, edit or summarise prose",
    "search": "needs current facts from the web or documents",
    "translation": "translate text between languages",
    "chat": "small talk or a simple general question",
}
COMPLEXITY_LEVELS: list[str] = [
    "simple: a short direct answer",
    "moderate: a few steps or a paragraph",
    "hard: long multi-step reasoning or a large piece of work",
]


def _field(preset: str, field: str | None) -> str:
    name = STATE_FIELDS[preset] if field is None else field
    if not isinstance(name, str) or not name:
        raise ValueError(f"field={name!r}: the state field must be a non-empty string, "
                         f"e.g. field={STATE_FIELDS[preset]!r}")
    return name


def _choice(instructions: str, criteria: dict[str, str]) -> dict[str, Any]:
    return {"type": "choice", "instructions": instructions, "criteria": dict(criteria)}


def _score(instructions: str, levels: list[str]) -> dict[str, Any]:
    return {"type": "score", "instructions": instructions, "criteria": list(levels)}


def _noul(statement: str) -> dict[str, Any]:
    return {"type": "noul", "instructions": statement}


def triage_questions(field: str | None = None) -> dict[str, dict[str, Any]]:
    """Customer-support triage of the state's ``message`` field: intent, sentiment, urgency."""
    f = _field("triage", field)
    return {
        "intent": _choice(f"What does the customer want in the {f}?", TRIAGE_INTENTS),
        "sentiment": _choice(f"How does the customer feel in the {f}?", SENTIMENTS),
        "is_urgent": _noul(f"The {f} is urgent and needs action right away."),
        "priority": _score(f"How high a priority is the {f}?", PRIORITY_LEVELS),
    }


def email_questions(field: str | None = None) -> dict[str, dict[str, Any]]:
    """Inbox sorting of the state's ``email`` field: category, needs a reply, is spam."""
    f = _field("email", field)
    return {
        "category": _choice(f"What kind of {f} is this?", EMAIL_CATEGORIES),
        "needs_reply": _noul(f"The sender of the {f} expects a personal reply."),
        "is_spam": _noul(f"The {f} is spam, phishing or a scam."),
    }


def guard_questions(field: str | None = None) -> dict[str, dict[str, Any]]:
    """Input guard for an LLM app on the state's ``user_input`` field: attack type and safety."""
    f = _field("guard", field)
    return {
        "attack": _choice(f"Which kind of misuse does the {f} attempt?", GUARD_ATTACKS),
        "is_safe": _noul(f"The {f} is safe to pass to the assistant."),
    }


def moderation_questions(field: str | None = None) -> dict[str, dict[str, Any]]:
    """Content moderation of the state's ``text`` field: category, toxicity, allowed or not."""
    f = _field("moderation", field)
    return {
        "category": _choice(f"Which moderation category fits the {f}?", MODERATION_CATEGORIES),
        "toxicity": _score(f"How toxic is the {f}?", TOXICITY_LEVELS),
        "is_allowed": _noul(f"The {f} may be published as it is."),
    }


def router_questions(field: str | None = None) -> dict[str, dict[str, Any]]:
    """LLM request routing on the state's ``request`` field: task kind, complexity, tool use."""
    f = _field("router", field)
    return {
        "route": _choice(f"Which kind of task is the {f}?", ROUTES),
        "complexity": _score(f"How complex is the {f}?", COMPLEXITY_LEVELS),
        "needs_tools": _noul(f"Answering the {f} needs live data, files or running code."),
    }


# preset name -> question factory
PRESETS = {
    "triage": triage_questions,
    "email": email_questions,
    "guard": guard_questions,
    "moderation": moderation_questions,
    "router": router_questions,
}
