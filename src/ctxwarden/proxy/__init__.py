"""The HTTP proxy: ``ctxwarden serve`` in front of the OpenAI and Anthropic APIs.

Embedding and testing::

    from ctxwarden.proxy import build_app, RunningServer, ProxySettings, FakeUpstream
    async with FakeUpstream() as fake:
        app = build_app(engine, ProxySettings(openai_upstream=fake.url,
                                              anthropic_upstream=fake.url))
        async with RunningServer(app) as proxy:
            ...  # OPENAI_BASE_URL = proxy.url + "/v1"
"""

from ctxwarden.proxy.app import ADMIN_PATH, build_app
from ctxwarden.proxy.fake_upstream import FakeUpstream, Received, Reply, ToolCall
from ctxwarden.proxy.recall import RECALL_TOOL_NAME
from ctxwarden.proxy.rollout import KillSwitch, canary_bucket
from ctxwarden.proxy.server import RunningServer, serve_forever
from ctxwarden.proxy.settings import ProxySettings
from ctxwarden.proxy.tenant import TenantKeys

__all__ = [
    "ADMIN_PATH",
    "RECALL_TOOL_NAME",
    "FakeUpstream",
    "KillSwitch",
    "ProxySettings",
    "Received",
    "Reply",
    "RunningServer",
    "TenantKeys",
    "ToolCall",
    "build_app",
    "canary_bucket",
    "serve_forever",
]
