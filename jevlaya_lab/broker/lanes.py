"""Lanes: one streaming attempt each, and the read-only ``LaneView`` snapshots views draw."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from jevlaya_lab.broker.attempt import Attempt


@dataclass(frozen=True)
class LaneView:
    """A snapshot of one lane for views (e.g. a widget): which model, what it has said so far,
    and where it stands (``running``, ``complete`` or the journal status it ended with)."""

    llm_name: str
    call_id: str
    rank: int
    text: str
    state: str
    shown: bool
    winner: bool
    first_token_ms: float | None
    elapsed_ms: float
    usage: dict[str, int]


class Lane:
    """One streaming attempt of a stream: its place (``rank``), the task reading it (a race
    lane) and how it ended for the stream (``complete``, ``failure``, ``timed_out``); the
    request itself, its text and its journal row are the attempt's."""

    def __init__(self, attempt: Attempt, rank: int) -> None:
        self.attempt = attempt
        self.rank = rank
        self.task: asyncio.Task[None] | None = None
        self.failure: BaseException | None = None
        self.complete = False
        self.timed_out = False

    @property
    def alive(self) -> bool:
        return not self.complete and self.failure is None and self.attempt.status is None

    @property
    def has_text(self) -> bool:
        return bool(self.attempt.pieces)

    async def close_response(self) -> None:
        await self.attempt.close_response()
