"""Added latency of requests inside and outside a 50% canary (not a test).

The fake upstream, a proxy (``ctxwarden serve --mode active``, with and without
``--canary-percent 50``) and this client on loopback, as in ``proxy_load.py``: one
connection, sequential requests of one ``--size-kb`` chat session whose system prompt
is chosen to fall inside or outside the canary. Prints the added p50 / p95 (via the
proxy minus direct to the fake) for each. ``--old-src DIR`` runs the same against
another tree's ``src`` (e.g. a ``git archive`` of an earlier commit) for comparison.

    .venv/bin/python benchmarks/canary_latency.py --size-kb 300 [--old-src /tmp/old/src]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson
from proxy_load import free_port, latencies, make_request, pct, running_fake, wait_up

from ctxwarden import Engine, EngineConfig
from ctxwarden.proxy.rollout import KillSwitch, canary_key, decide

PATH = "/v1/chat/completions"


def on_side(body: bytes, inside: bool) -> bytes:
    """``body`` with a system prompt that puts it inside (or outside) a 50% canary."""
    engine = Engine(EngineConfig(store={"backend": "memory"}))  # type: ignore[arg-type]
    request = orjson.loads(body)
    for k in range(1000):
        request["messages"][0]["content"] = f"You are a coding agent {k}. Use the tools."
        key = canary_key(engine.parse(request, "openai.chat"))
        decision = decide(kill_switch=KillSwitch(), header=None, server_mode="active",
                          canary_percent=50, session=key)  # fmt: skip
        if (decision.mode == "active") == inside:
            return orjson.dumps(request)
    raise AssertionError("no such system prompt")


async def added(
    label: str, src: str | None, flags: list[str], body: bytes, fake: str, tmp: Path, n: int
) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": src} if src else dict(os.environ)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxwarden", "serve", "--port", str(port), "--mode", "active",
         "--openai-upstream", fake, "--data-dir", str(tmp / str(port)), *flags],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_up(url + "/healthz")
        await latencies(url + PATH, body, 30)  # warm up: the session's earlier turns
        direct = await latencies(fake + PATH, body, n)
        via = await latencies(url + PATH, body, n)
        p50 = statistics.median(via) - statistics.median(direct)
        print(f"{label:22s} added p50 {p50:6.2f} ms  p95 {pct(via, 95) - pct(direct, 95):6.2f} ms",
              flush=True)  # fmt: skip
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-kb", type=int, default=300)
    parser.add_argument("--samples", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--old-src", help="another tree's src directory, for comparison")
    args = parser.parse_args()
    base = make_request(args.size_kb, seed=11)
    inside, outside = on_side(base, True), on_side(base, False)
    trees = [("this", None)] + ([("old", args.old_src)] if args.old_src else [])
    async with running_fake() as fake_url:
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.rounds):
                for name, src in trees:
                    split = ["--canary-percent", "50"]
                    await added(
                        f"{name} active", src, [], inside, fake_url, Path(tmp), args.samples
                    )
                    await added(f"{name} canary-in", src, split, inside, fake_url, Path(tmp),
                                args.samples)  # fmt: skip
                    await added(f"{name} canary-out", src, split, outside, fake_url, Path(tmp),
                                args.samples)  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
