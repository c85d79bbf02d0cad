"""Child process of test_broker_journal_durability: asks the models of a local server forever
from a few concurrent tasks and prints each answered call_id (flushed) the moment the call
returns, until the test kills it with SIGKILL.

argv: journal path, server base URL, durable (0/1), concurrency."""

from __future__ import annotations

import asyncio
import sys

from jevlaya_lab.broker import AsyncBroker, LLMConfig


async def main(path: str, url: str, durable: bool, concurrency: int) -> None:
    models = [LLMConfig(name=n, base_url=url, model=n, parallel=64) for n in ("a", "b")]
    async with AsyncBroker(path, models=models, catalog=[], durable=durable) as broker:
        async def worker(w: int) -> None:
            i = 0
            while True:
                i += 1
                result = await broker.ask(f"q{w}-{i}", max_tokens=1, wait=30)
                sys.stdout.write(result.call_id + "\n")
                sys.stdout.flush()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])))
