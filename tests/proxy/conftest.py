"""Fixtures: a fake upstream and a proxy in front of it, both on free loopback ports.

Everything is started and torn down inside the test's event loop, so no server
outlives its test.
"""

from __future__ import annotations

import io
import logging
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from ctxwarden import Engine, EngineConfig
from ctxwarden.proxy import FakeUpstream, ProxySettings, RunningServer, build_app
from ctxwarden.proxy.state import STATE, ProxyState
from ctxwarden.telemetry import JsonFormatter, MemoryRecorder

SECRET = b"0123456789abcdef0123456789abcdef"
KEY_A = "sk-test-tenant-a"
NO_CLIENT_TIMEOUT: dict[str, Any] = {
    "x-stainless-read-timeout": openai.Omit(),
    "x-stainless-timeout": openai.Omit(),
}
"""``extra_headers`` for an openai SDK call stating no timeout of its own: the proxy
waits at least as long as a client states (``upstream.client_timeout``), so a test of
the proxy's own read timeout sends none."""
KEY_B = "sk-test-tenant-b"


@contextmanager
def json_logged(name: str) -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """Logger ``name`` writing JSON log lines (the proxy's :class:`JsonFormatter`) into
    the returned stream, at info, not propagated; the handler is removed on exit."""
    stream = io.StringIO()
    logger = logging.getLogger(name)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)


def free_port() -> int:
    """A loopback port nothing listens on (bound once by the OS and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proxy:
    url: str
    fake: FakeUpstream
    recorder: MemoryRecorder
    engine: Engine
    state: ProxyState

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    def tenant(self, key: str) -> str:
        return self.state.tenants.for_credential(key)


ProxyFactory = Callable[..., AbstractAsyncContextManager[Proxy]]


def openai_client(proxy: Proxy) -> openai.AsyncOpenAI:
    """The real SDK pointed at the proxy as tenant A, no retries."""
    return openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url, max_retries=0)


async def respond(client: openai.AsyncOpenAI, stream: bool, **kwargs: Any) -> Any:
    """One Responses call (``gpt-4o``), streamed or not; the final response."""
    if not stream:
        return await client.responses.create(model="gpt-4o", **kwargs)
    async with client.responses.stream(model="gpt-4o", **kwargs) as s:
        return await s.get_final_response()


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as server:
        yield server


@pytest.fixture
def make_proxy(fake: FakeUpstream) -> ProxyFactory:
    @asynccontextmanager
    async def factory(engine: Engine | None = None, **settings: Any) -> AsyncIterator[Proxy]:
        own = engine is None
        engine = engine or Engine(EngineConfig(store={"backend": "memory"}))  # type: ignore[arg-type]
        recorder = MemoryRecorder()
        options: dict[str, Any] = {
            "openai_upstream": fake.url,
            "anthropic_upstream": fake.url,
            # no request is sent uncondensed for a slow engine thread (a busy CI machine)
            # unless a test asks for it (tests/proxy/test_engine_wait.py)
            "max_engine_wait": 0.0,
            **settings,
        }
        app = build_app(engine, ProxySettings(**options), sinks=[recorder], tenant_secret=SECRET)
        try:
            async with RunningServer(app) as server:
                yield Proxy(server.url, fake, recorder, engine, app[STATE])
        finally:
            if own:
                engine.close()

    return factory


@pytest.fixture
async def proxy(make_proxy: ProxyFactory) -> AsyncIterator[Proxy]:
    async with make_proxy() as p:
        yield p


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    """Gates (:class:`tests.proxy.gate.Gate`) opened at teardown whatever happened (the
    engine thread is joined then)."""
    gates: list[Any] = []
    yield gates
    for gate in gates:
        gate.open()
