"""The LLM Broker: a pool of OpenAI-compatible chat models behind one API.

``AsyncBroker`` is the engine, ``Broker`` the same API for synchronous code; both journal every
attempt (:mod:`jevlaya_lab.journal`). Imports point one way, down this map:

- ``sync`` (the facade) -> ``engine`` (public async API) -> ``scoped`` / ``direct`` (other
  callers) -> ``racing`` (``fastest_of`` races and the routed call) -> ``streaming``
  (``stream()``, one lane) -> ``runtime`` (the call machinery, package-internal) -> the parts:
  ``attempt`` (one request = one journal row), ``lanes``, ``pool`` (membership, ranking,
  cooldowns, slots), ``quality`` (learned priority, demotion), ``limits`` (attempt ceilings),
  ``budget`` (``wait``), ``http`` (wire and the failure table), ``embedded`` (``local://``
  models), ``config`` / ``catalog`` / ``keys`` (registry), ``results``, ``errors``, and at the
  bottom ``validation`` (pure argument checks).
- ``tools`` (tool loops), ``report`` (stats, snapshot), ``cli`` (``jevlaya-lab ask``).
"""

from jevlaya_lab.broker.config import LLMConfig
from jevlaya_lab.broker.engine import AsyncBroker
from jevlaya_lab.broker.errors import BrokerClosedError
from jevlaya_lab.broker.results import LLMResult, SyncLLMResult
from jevlaya_lab.broker.sync import Broker
from jevlaya_lab.broker.tools import arun_tool_loop, run_tool_loop

__all__ = ["AsyncBroker", "Broker", "BrokerClosedError", "LLMConfig", "LLMResult",
           "SyncLLMResult", "arun_tool_loop", "run_tool_loop"]
