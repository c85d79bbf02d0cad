"""The LLM Broker: a pool of OpenAI-compatible chat models behind one API.

``AsyncBroker`` is the engine, ``Broker`` the same API for synchronous code; both journal every
attempt (:mod:`jevlaya_lab.journal`). Imports point one way, down this map:

- ``sync`` (the facade; ``loop_thread`` runs its event loop) -> ``engine`` (public async API)
  -> ``scoped`` / ``direct`` (the call methods) -> ``runtime`` (builds and closes the parts)
  -> ``streaming`` (``AsyncStream``) -> ``stream_race`` (races, hedges) -> ``stream_core``
  (one lane), ``stream_errors`` -> ``racing`` (the routed call) -> the parts: ``attempt`` (one
  request, ended and journaled once), ``lanes``, ``gate`` (closing), ``registry`` (the pool
  from the database, ``sync``), ``pool`` (membership, ranking, cooldowns, slots), ``quality``
  (learned priority, demotion), ``journaling`` (rows, ratings), ``transport`` (HTTP and the
  embedded ``local://`` models: ``embedded``), ``limits`` (attempt ceilings), ``budget``
  (``wait``), ``http`` (wire and the failure table), ``config`` / ``catalog`` / ``keys``,
  ``results``, ``errors``, and at the bottom ``validation`` (pure argument checks).
  ``docs/broker.md`` follows one call through them.
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
