"""Load benchmark of ``ctxwarden serve`` against the fake upstream (not a test).

Three processes on loopback: the fake upstream, the proxy and this load generator
(aiohttp). Measures, per mode (exact, active):

- added latency: p50 / p95 of (via proxy) minus (direct to the fake), one connection,
  sequential requests of the given size;
- throughput: requests/s with ``--connections`` concurrent keep-alive connections;
- memory: proxy RSS sampled every 1,000 requests over ``--memory-requests``.

Usage::

    .venv/bin/python benchmarks/proxy_load.py --size-kb 200 --connections 32 \
        --requests 3000 --memory-requests 10000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import statistics
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_request(size_kb: int, seed: int = 7) -> bytes:
    """A chat request of about ``size_kb`` KB: an agent session with tool outputs."""
    rng = random.Random(seed)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(800)]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the tools."},
        {"role": "user", "content": "Fix the failing test in the repository."},
    ]
    size, i = 0, 0
    while size < size_kb * 1024:
        call_id = f"call_{i}"
        arguments = orjson.dumps({"cmd": f"cat f{i}.py"}).decode()
        call = {"id": call_id, "type": "function",
                "function": {"name": "bash", "arguments": arguments}}  # fmt: skip
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        lines = [
            f"{n:4d}  " + " ".join(rng.choices(words, k=rng.randint(4, 12))) for n in range(60)
        ]
        out = "\n".join(lines)
        messages.append({"role": "tool", "tool_call_id": call_id, "content": out})
        size += len(out) + 120
        i += 1
    messages.append({"role": "user", "content": "Continue."})
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    return orjson.dumps({"model": "gpt-4o", "messages": messages, "tools": tools})


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def wait_up(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(400):  # 20 s
            try:
                async with s.get(url) as r:
                    if r.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} did not start")


@asynccontextmanager
async def running_fake() -> AsyncIterator[str]:
    """The bundled fake upstream in a process of its own, up; yields its URL."""
    port = free_port()
    fake = subprocess.Popen(
        [sys.executable, "-m", "ctxwarden", "fake-upstream", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_up(url + "/v1/models")
        yield url
    finally:
        fake.send_signal(signal.SIGINT)
        fake.wait(timeout=30)


HEADERS = {"Authorization": "Bearer sk-bench", "Content-Type": "application/json"}


async def latencies(url: str, body: bytes, n: int) -> list[float]:
    out = []
    async with aiohttp.ClientSession() as s:
        for _ in range(n):
            t = time.perf_counter()
            async with s.post(url, data=body, headers=HEADERS) as r:
                await r.read()
                assert r.status == 200, r.status
            out.append((time.perf_counter() - t) * 1000)
    return out


async def throughput(url: str, body: bytes, n: int, conns: int, on_progress: Any = None) -> float:
    connector = aiohttp.TCPConnector(limit=conns)
    started = finished = 0
    async with aiohttp.ClientSession(connector=connector) as s:

        async def worker() -> None:
            nonlocal started, finished
            while started < n:
                started += 1
                async with s.post(url, data=body, headers=HEADERS) as r:
                    await r.read()
                    assert r.status == 200, r.status
                finished += 1
                if on_progress and finished % 1000 == 0:
                    on_progress(finished)

        t = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(conns)))
        return n / (time.perf_counter() - t)


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


async def run_mode(mode: str, args: argparse.Namespace, fake_url: str, tmp: Path) -> dict[str, Any]:
    port = free_port()
    log = open(tmp / f"proxy-{mode}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxwarden", "serve", "--port", str(port), "--mode", mode,
         "--openai-upstream", fake_url, "--data-dir", str(tmp / mode)],
        stdout=log, stderr=log,
    )  # fmt: skip
    proxy = f"http://127.0.0.1:{port}"
    try:
        await wait_up(proxy + "/healthz")
        body = make_request(args.size_kb)
        big = make_request(args.session_kb, seed=11) if mode == "active" else body
        path = "/v1/chat/completions"
        await latencies(proxy + path, body, 50)  # warm up
        direct = await latencies(fake_url + path, body, args.samples)
        via = await latencies(proxy + path, body, args.samples)
        result: dict[str, Any] = {"mode": mode, "request_kb": len(body) // 1024}
        result["direct_p50_ms"] = statistics.median(direct)
        result["added_p50_ms"] = statistics.median(via) - statistics.median(direct)
        result["added_p95_ms"] = pct(via, 95) - pct(direct, 95)
        if mode == "active":
            await latencies(proxy + path, big, 3)  # earlier turns of the session were seen
            direct_big = await latencies(fake_url + path, big, args.samples // 2)
            via_big = await latencies(proxy + path, big, args.samples // 2)
            result["session_kb"] = len(big) // 1024
            result["session_added_p50_ms"] = statistics.median(via_big) - statistics.median(
                direct_big
            )
            result["session_added_p95_ms"] = pct(via_big, 95) - pct(direct_big, 95)
        result["direct_rps"] = await throughput(
            fake_url + path, body, args.requests, args.connections
        )
        result["rps"] = await throughput(proxy + path, body, args.requests, args.connections)
        samples = [rss_kb(proc.pid)]
        await throughput(proxy + path, body, args.memory_requests, args.connections,
                         lambda n: samples.append(rss_kb(proc.pid)))  # fmt: skip
        result["rss_mb"] = [round(s / 1024, 1) for s in samples]
        return result
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-kb", type=int, default=200)
    parser.add_argument("--session-kb", type=int, default=300, help="~150k tokens")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--memory-requests", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--modes", default="exact,active")
    args = parser.parse_args()
    async with running_fake() as fake_url:
        with tempfile.TemporaryDirectory() as tmp:
            for mode in args.modes.split(","):
                result = await run_mode(mode, args, fake_url, Path(tmp))
                print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode(), flush=True)
    print(f"cpus: {os.cpu_count()}  python: {sys.version.split()[0]}")


if __name__ == "__main__":
    asyncio.run(main())
