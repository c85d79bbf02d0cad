"""The LLM Broker: a pool of OpenAI-compatible chat models behind one API.

``AsyncBroker`` is the engine, ``Broker`` the same API for synchronous code; both journal every
attempt to SQLite (:mod:`jevlaya_lab.journal`). Module map: ``engine`` (routed calls, races,
ratings), ``attempt`` (one request = one journal row), ``streaming`` + ``lanes`` (``stream()``),
``pool`` (ranking, cooldowns, slots), ``quality`` (learned priority, demotion), ``http`` (wire and
the failure table), ``budget`` (``wait``), ``config`` / ``catalog`` / ``keys`` (registry),
``embedded`` (``local://`` models), ``scoped`` / ``direct`` (other callers), ``sync`` (facade),
``tools`` (tool loops), ``results``, ``report`` (stats, snapshot), ``cli`` (``jevlaya-lab ask``),
``errors``.
"""

from jevlaya_lab.broker.config import LLMConfig
from jevlaya_lab.broker.engine import AsyncBroker
from jevlaya_lab.broker.errors import BrokerClosedError
from jevlaya_lab.broker.results import LLMResult, SyncLLMResult
from jevlaya_lab.broker.sync import Broker
from jevlaya_lab.broker.tools import arun_tool_loop, run_tool_loop

__all__ = ["AsyncBroker", "Broker", "BrokerClosedError", "LLMConfig", "LLMResult",
           "SyncLLMResult", "arun_tool_loop", "run_tool_loop"]
