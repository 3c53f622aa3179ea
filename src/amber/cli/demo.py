"""``amber demo``: the main job, end to end on whatever engines are configured."""

from __future__ import annotations

import time
import uuid

from amber import codec
from amber.cli.app import OPTIONS, app, console, friendly


@app.command()
@friendly
def demo() -> None:
    """Start the engines, write a small working memory, snapshot it and print what happened."""
    t0 = time.perf_counter()
    with OPTIONS.stack() as stack:
        started = time.perf_counter() - t0
        agent = f"demo-{uuid.uuid4().hex[:8]}"
        k = stack.keys
        pipe = stack.redis.pipeline(transaction=True)
        pipe.set(k.l1(agent, "current_subtask"), b"ma_review")
        pipe.rpush(k.l1(agent, "aapl_historical_roi"), b"0.15", b"0.18", b"0.12")
        pipe.hset(k.l1(agent, "api_cache:koyfin"), mapping={b"deals": b"3"})
        pipe.execute()
        names = ["current_subtask", "aapl_historical_roi", "api_cache:koyfin"]
        memory = {
            "current_subtask": codec.Entry("string", stack.redis.get(k.l1(agent, names[0]))),
            "aapl_historical_roi": codec.Entry(
                "list", stack.redis.lrange(k.l1(agent, names[1]), 0, -1)
            ),
            "api_cache:koyfin": codec.Entry("hash", stack.redis.hgetall(k.l1(agent, names[2]))),
        }
        digest = codec.memory_hash(memory)
        stack.redis.delete(*(k.l1(agent, n) for n in names))
        versions = stack.server_versions()
        console.print(
            f"engines up in {started * 1000:.0f} ms: redis {versions['redis']}, "
            f"postgresql {versions['postgresql']}"
        )
        console.print(f"wrote {len(memory)} keys for {agent}; snapshot sha256 {digest[:16]}…")
