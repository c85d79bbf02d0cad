"""The LLM Broker: a pool of OpenAI-compatible chat models behind one API.

``AsyncBroker`` is the engine, ``Broker`` the same API for synchronous code; both journal every
attempt to SQLite (:mod:`jevlaya_lab.journal`). Module map: ``engine`` (routed calls, races,
ratings), ``streaming`` (``stream()``), ``pool`` (ranking, cooldowns), ``quality`` (learned
priority), ``http`` (wire + failure table), ``budget`` (``wait``), ``catalog`` / ``keys`` /
``config`` (registry), ``sync`` (facade), ``tools`` (tool loops), ``errors``.
"""

from jevlaya_lab.broker.config import LLMConfig
from jevlaya_lab.broker.engine import AsyncBroker
from jevlaya_lab.broker.results import LLMResult, SyncLLMResult
from jevlaya_lab.broker.sync import Broker
from jevlaya_lab.broker.tools import arun_tool_loop, run_tool_loop

__all__ = ["AsyncBroker", "Broker", "LLMConfig", "LLMResult", "SyncLLMResult", "arun_tool_loop",
           "run_tool_loop"]
