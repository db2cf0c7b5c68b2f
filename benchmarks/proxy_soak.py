"""Soak test of ``ctxwarden serve`` driven by the real SDKs over the real corpus (not a test).

Three processes on loopback: the package's fake upstream (``FakeUpstream``, run by this
file with one extra route, see below), ``ctxwarden serve`` (default active mode, SQLite
store in a temporary data directory, both APIs pointed at the fake) and this driver.
The driver replays the corpus sessions (``../shared/corpus/sessions``; every request of
a session in order, ``ctxwarden.io.session_requests``) with ``--concurrency`` sessions in
flight, through ``openai.AsyncOpenAI`` (Chat Completions and Responses) and
``anthropic.AsyncAnthropic`` (Messages). Per session: ``stream=True`` on every other
session; chat sessions alternate in pairs between no ``tools`` (as the corpus has them)
and tool definitions for the tool names the session calls; every ``--other-every``-th
session is converted to Messages (with the client's own cache marker on its last block)
and the one after it to Responses (``store=false``, the whole input each turn). The
repository has no chat-to-Messages / Responses converter, so the two small ones here are
this benchmark's own.

It measures and checks:

- every answer's HTTP status (``max_retries=0``: nothing hides a failure) and that the
  client got the fake's answer (text, no recall tool call shown);
- what the fake received against what the client sent: item count, roles, tool-call
  ids / names in order, the system prompt, the first user message and every item after
  the last assistant one byte-identical (serialized with orjson), other top-level fields
  equal (the recall tool may be appended to ``tools``; Messages may gain cache markers,
  at most four), a rewritten item changed in its text payload only;
- the proxy's RSS (``/proc/<pid>/status`` VmRSS) every ``--sample-seconds``;
- ``/metrics`` and the JSON log lines scanned for message contents (distinctive strings
  taken from the sessions), the API key and the request-id header values;
- added latency: before the soak, ``--latency-sessions`` sessions (not in the soak)
  are sent one request at a time straight to the fake and through the proxy, in
  alternating order; per-request difference, p50 / p95;
- the store: ``ctxwarden store stats`` and ``store gc`` run as separate processes while
  the proxy serves (half-way through), and the store's size at the end.

The fake keeps what it received under the driver's ``x-soak-id`` header until the driver
takes it (``GET /_soak/take?id=...``) instead of in its ``received`` list, so its memory
stays flat; ``ctxwarden fake-upstream`` has no way to hand its records to another process.

Usage (the recorded run, 11 minutes on the 2-core machine; ``--runs 1``: 3 to 4)::

    .venv/bin/python benchmarks/proxy_soak.py --concurrency 24 --runs 3 --gc-interval 60 \
        --json soak.json

``--sessions N`` limits a run to N sessions (a fixed shuffle of the corpus); ``--runs K``
replays them K times, every text of run k > 0 prefixed with ``[run k]`` (new content and
new session keys, as a long-running proxy sees new sessions); ``--gc-interval`` is passed
to ``serve`` (its store collection then runs during the soak too), and so is
``--canary-percent`` (sessions outside the share are relayed as sent and condensed in the
engine thread's background lane; the report counts events by rollout reason).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import inspect
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
from aiohttp import web
from proxy_load import wait_up  # the sibling benchmark (scripts run from benchmarks/)

from ctxwarden.io import load_session, session_requests
from ctxwarden.proxy.fake_upstream import FakeUpstream, Received

SOAK_HEADER = "x-soak-id"
TAKE_PATH = "/_soak/take"
API_KEY = "sk-soaktest-" + "7f3e9a1c5b2d4e6f8a0b1c2d3e4f5a6b"
FAKE_TEXT = "Hello from the fake upstream."
RECALL_TOOL = "ctxwarden_recall"
DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "sessions"
MESSAGES_MODEL = "claude-sonnet-4"
RESPONSES_MODEL = "gpt-5-mini"

# ---------------------------------------------------------------- the fake upstream


class RecordingFake(FakeUpstream):
    """The package's fake; bodies are kept by ``x-soak-id`` until the driver takes them."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: dict[str, list[bytes]] = {}

    async def _record(self, request: web.Request) -> Received:
        item = await super()._record(request)
        self.received.clear()  # bounded: the driver takes what it needs by id
        key = request.headers.get(SOAK_HEADER)
        if key:
            self.bodies.setdefault(key, []).append(item.body)
        return item

    async def _not_found(self, request: web.Request) -> web.Response:
        if request.path != TAKE_PATH:
            return await super()._not_found(request)
        bodies = self.bodies.pop(request.query.get("id", ""), [])
        return web.Response(
            body=orjson.dumps([b.decode() for b in bodies]),
            content_type="application/json",
        )


async def serve_fake(port: int) -> None:
    fake = await RecordingFake().start("127.0.0.1", port)
    print(f"fake upstream listening on {fake.url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await fake.stop()


# ---------------------------------------------------------------- sessions and formats


@dataclass(frozen=True, slots=True)
class Plan:
    """How one session is replayed."""

    index: int
    path: Path
    api: str  # openai.chat | anthropic.messages | openai.responses
    stream: bool
    tools: bool
    run: int = 0
    """0: the session as recorded; k > 0: every text prefixed with ``[run k]`` (new
    content and a new session key: a longer-running proxy's stream of new sessions)."""


def tool_names(messages: list[dict[str, Any]]) -> list[str]:
    names: dict[str, None] = {}
    for m in messages:
        for call in m.get("tool_calls") or ():
            names[call["function"]["name"]] = None
    return list(names)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {"arguments": text}
    return value if isinstance(value, dict) else {"arguments": text}


def _tool_schema(name: str, schema_key: str) -> dict[str, Any]:
    """A tool the agent offers, named as in its session, taking any object."""
    return {
        "name": name,
        "description": f"the agent's {name} tool",
        schema_key: {"type": "object", "properties": {}},
    }


def chat_body(request: dict[str, Any], names: list[str], plan: Plan) -> dict[str, Any]:
    body = dict(request)
    body.pop("tools", None)
    if plan.tools:
        body["tools"] = [
            {"type": "function", "function": _tool_schema(n, "parameters")} for n in names
        ]
    if plan.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def messages_body(request: dict[str, Any], names: list[str], plan: Plan) -> dict[str, Any]:
    """Chat messages as an Anthropic Messages request (alternating roles, tool results in
    user turns), with a client cache marker on the last block."""
    system: str | None = None
    out: list[dict[str, Any]] = []

    def push(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in request["messages"]:
        text = _text(m)
        if m["role"] == "system" and system is None:
            system = text
        elif m["role"] in ("user", "system"):
            push("user", [{"type": "text", "text": text if text.strip() else "(empty)"}])
        elif m["role"] == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text.strip() else []
            blocks += [
                {
                    "type": "tool_use",
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "input": _arguments(c["function"]["arguments"]),
                }
                for c in m.get("tool_calls") or ()
            ]
            push("assistant", blocks or [{"type": "text", "text": "(no content)"}])
        elif m["role"] == "tool":
            push(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": m["tool_call_id"],
                        "content": text or "(no output)",
                    }
                ],
            )
    last = out[-1]["content"]
    last[-1] = {**last[-1], "cache_control": {"type": "ephemeral"}}
    body: dict[str, Any] = {"model": MESSAGES_MODEL, "max_tokens": 1024, "messages": out}
    if system is not None:
        body["system"] = system
    body["tools"] = [_tool_schema(n, "input_schema") for n in names]
    if plan.stream:
        body["stream"] = True
    return body


def responses_body(request: dict[str, Any], names: list[str], plan: Plan) -> dict[str, Any]:
    """Chat messages as a stateless Responses request (``store=false``, whole input)."""
    instructions: str | None = None
    items: list[dict[str, Any]] = []
    for m in request["messages"]:
        text = _text(m)
        if m["role"] == "system" and instructions is None:
            instructions = text
        elif m["role"] in ("user", "system"):
            items.append({"role": "user", "content": text})
        elif m["role"] == "assistant":
            if text:
                items.append({"role": "assistant", "content": text})
            items += [
                {
                    "type": "function_call",
                    "call_id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                }
                for c in m.get("tool_calls") or ()
            ]
        elif m["role"] == "tool":
            items.append(
                {"type": "function_call_output", "call_id": m["tool_call_id"], "output": text}
            )
    body: dict[str, Any] = {"model": RESPONSES_MODEL, "input": items, "store": False}
    if instructions is not None:
        body["instructions"] = instructions
    body["tools"] = [{"type": "function", **_tool_schema(n, "parameters")} for n in names]
    if plan.stream:
        body["stream"] = True
    return body


BUILDERS = {
    "openai.chat": chat_body,
    "anthropic.messages": messages_body,
    "openai.responses": responses_body,
}
ITEMS_KEY = {
    "openai.chat": "messages",
    "anthropic.messages": "messages",
    "openai.responses": "input",
}


# ---------------------------------------------------------------- control-plane check


def role_of(item: dict[str, Any]) -> str:
    role = item.get("role")
    if isinstance(role, str):
        return role
    kind = str(item.get("type", ""))
    return "tool" if kind.endswith("_output") else "assistant" if kind.endswith("_call") else kind


def skeleton(item: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(kind, id, name)`` of every tool call and result of an item, in order."""
    out = [
        ("call", c.get("id", ""), c.get("function", {}).get("name", ""))
        for c in item.get("tool_calls") or ()
    ]
    if "tool_call_id" in item:
        out.append(("result", item["tool_call_id"], ""))
    kind = str(item.get("type", ""))
    if kind == "function_call":
        out.append(("call", item.get("call_id", ""), item.get("name", "")))
    elif kind == "function_call_output":
        out.append(("result", item.get("call_id", ""), ""))
    content = item.get("content")
    for block in content if isinstance(content, list) else ():
        if block.get("type") == "tool_use":
            out.append(("call", block.get("id", ""), block.get("name", "")))
        elif block.get("type") == "tool_result":
            out.append(("result", block.get("tool_use_id", ""), ""))
    return out


def strip_cache(value: Any) -> tuple[Any, int]:
    """``value`` without ``cache_control`` keys, and how many there were."""
    if isinstance(value, dict):
        count = 1 if "cache_control" in value else 0
        out = {}
        for k, v in value.items():
            if k != "cache_control":
                out[k], n = strip_cache(v)
                count += n
        return out, count
    if isinstance(value, list):
        pairs = [strip_cache(v) for v in value]
        return [p[0] for p in pairs], sum(p[1] for p in pairs)
    return value, 0


_PAYLOAD = frozenset({"content", "text", "output", "arguments"})


def shape(value: Any, key: str = "", in_input: bool = False) -> Any:
    """``value`` with its rewritable text blanked: strings under payload keys, and every
    string inside an Anthropic ``tool_use`` ``input`` (an old call's values are trimmed
    there, its keys and structure kept)."""
    if isinstance(value, dict):
        block = value.get("type") == "tool_use"
        return {k: shape(v, k, in_input or (block and k == "input")) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v, key, in_input) for v in value]
    if isinstance(value, str) and (in_input or key in _PAYLOAD):
        return "<text>"
    return value


def protected(items: list[dict[str, Any]]) -> set[int]:
    out: set[int] = set()
    first_user = False
    for i, item in enumerate(items):
        role = role_of(item)
        if role in ("system", "developer"):
            out.add(i)
        elif (
            role == "user"
            and not first_user
            and not any(k == "result" for k, _, _ in skeleton(item))
        ):
            first_user = True
            out.add(i)
    last = max((i for i, it in enumerate(items) if role_of(it) == "assistant"), default=-1)
    out.update(range(last + 1, len(items)))
    return out


def _dump(value: Any) -> bytes:
    return orjson.dumps(value)


@dataclass(slots=True)
class Check:
    problems: list[str] = field(default_factory=list)
    rewritten_items: int = 0
    recall_tool: bool = False
    markers: int = 0


def check_control_plane(api: str, sent: dict[str, Any], got: dict[str, Any]) -> Check:
    """What the fake got against what the client sent (see module docstring)."""
    result = Check()
    key = ITEMS_KEY[api]
    if api == "anthropic.messages":
        got, result.markers = strip_cache(got)
        sent_markers = strip_cache(sent)[1]
        sent = strip_cache(sent)[0]
        if result.markers > max(4, sent_markers) or result.markers < sent_markers:
            result.problems.append(f"cache markers {sent_markers} -> {result.markers}")
    s_items, g_items = sent[key], got.get(key)
    if not isinstance(g_items, list) or len(g_items) != len(s_items):
        n = len(g_items) if isinstance(g_items, list) else None
        result.problems.append(f"item count {len(s_items)} -> {n}")
        return result
    for k in sorted(set(sent) | set(got)):
        if k == key:
            continue
        if k == "tools":
            mine = sent.get("tools", [])
            theirs = got.get("tools", [])
            extra = theirs[len(mine) :]
            names = [t.get("name") or t.get("function", {}).get("name") for t in extra]
            if theirs[: len(mine)] != mine or names not in ([], [RECALL_TOOL]):
                result.problems.append(f"tools changed (extra: {names})")
            result.recall_tool = names == [RECALL_TOOL]
        elif sent.get(k) != got.get(k):
            result.problems.append(f"top-level field {k!r} changed")
    keep = protected(s_items)
    for i, (a, b) in enumerate(zip(s_items, g_items, strict=True)):
        if role_of(a) != role_of(b):
            result.problems.append(f"role of item {i}: {role_of(a)} -> {role_of(b)}")
        if skeleton(a) != skeleton(b):
            result.problems.append(f"tool ids/names of item {i} changed")
        if _dump(a) == _dump(b):
            continue
        if i in keep:
            result.problems.append(f"protected item {i} ({role_of(a)}) not byte-identical")
        elif shape(a) != shape(b):
            result.problems.append(f"item {i} changed beyond its text")
        result.rewritten_items += 1
    return result


# ---------------------------------------------------------------- driver state


@dataclass(slots=True)
class Outcome:
    plan: Plan
    turn: int
    status: int
    seconds: float
    sent_bytes: int
    got_bytes: int
    problems: list[str]
    rewritten_items: int = 0
    recall_tool: bool = False
    error: str = ""


@dataclass(slots=True)
class Soak:
    proxy: str
    fake: str
    http: aiohttp.ClientSession
    oai: openai.AsyncOpenAI
    ant: anthropic.AsyncAnthropic
    outcomes: list[Outcome] = field(default_factory=list)
    needles: set[str] = field(default_factory=set)
    done: int = 0
    ids: int = 0

    def next_id(self, tag: str) -> str:
        self.ids += 1
        return f"soakid-{tag}-{self.ids}"

    async def take(self, soak_id: str) -> list[bytes]:
        async with self.http.get(self.fake + TAKE_PATH, params={"id": soak_id}) as r:
            texts: list[str] = orjson.loads(await r.read())
        return [t.encode() for t in texts]


def openai_client(base: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=API_KEY, base_url=base + "/v1", max_retries=0, timeout=300)


async def parsed(raw: Any) -> Any:
    """The parsed answer of a raw response (openai's is sync, anthropic's async)."""
    value = raw.parse()
    return await value if inspect.isawaitable(value) else value


async def send(
    soak: Soak, api: str, body: dict[str, Any], soak_id: str, oai: openai.AsyncOpenAI | None = None
) -> tuple[int, str]:
    """Send one request with the SDK and read the whole answer; ``(status, problem)``.

    The message list goes in ``extra_body`` (the SDK sends it as given): the SDKs' own
    walk over typed parameters costs ~50 ms of driver CPU per long request and would
    make the driver, not the proxy, the bottleneck. The body the SDK sends still equals
    ``body`` (the latency phase checks it on the fake)."""
    key = ITEMS_KEY[api]
    args = {k: v for k, v in body.items() if k != key}
    args[key] = []
    args["extra_body"] = {key: body[key]}
    args["extra_headers"] = {SOAK_HEADER: soak_id}
    stream = bool(body.get("stream"))
    texts: list[str] = []
    calls: list[str] = []
    client = oai or soak.oai
    if api == "openai.chat":
        raw = await client.chat.completions.with_raw_response.create(**args)
        if stream:
            async for chunk in raw.parse():
                for choice in chunk.choices:
                    texts.append(choice.delta.content or "")
                    calls += [
                        c.function.name or "" for c in choice.delta.tool_calls or () if c.function
                    ]
        else:
            message = raw.parse().choices[0].message
            texts.append(message.content or "")
            calls += [c.function.name for c in message.tool_calls or () if c.type == "function"]
    elif api == "openai.responses":
        raw = await client.responses.with_raw_response.create(**args)
        if stream:
            async for event in raw.parse():
                if event.type == "response.output_text.delta":
                    texts.append(event.delta)
                elif event.type == "response.output_item.done" and event.item.type == (
                    "function_call"
                ):
                    calls.append(event.item.name)
        else:
            response = raw.parse()
            texts.append(response.output_text)
            calls += [o.name for o in response.output if o.type == "function_call"]
    else:
        raw = await soak.ant.messages.with_raw_response.create(**args)
        if stream:
            async for event in await parsed(raw):
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    texts.append(event.delta.text)
                elif event.type == "content_block_start" and event.content_block.type == (
                    "tool_use"
                ):
                    calls.append(event.content_block.name)
        else:
            message = await parsed(raw)
            texts += [b.text for b in message.content if b.type == "text"]
            calls += [b.name for b in message.content if b.type == "tool_use"]
    text = "".join(texts)
    problem = "" if text == FAKE_TEXT and not calls else f"answer {text[:40]!r} calls {calls}"
    return raw.http_response.status_code, problem


_CLEAN = re.compile(r"[A-Za-z0-9_./-][A-Za-z0-9_./ -]{38,}[A-Za-z0-9_./-]")


def needles_of(messages: list[dict[str, Any]], rng: random.Random) -> list[str]:
    """Distinctive 40-character strings of a session's first user message and tool outputs."""
    pool = [m for m in messages if m["role"] == "tool" and _text(m)]
    picks = [m for m in messages if m["role"] == "user"][:1] + rng.sample(pool, min(4, len(pool)))
    out = []
    for m in picks:
        found = [s for s in _CLEAN.findall(_text(m)) if sum(c.isalpha() for c in s) > 15]
        if found:
            s = rng.choice(found)
            out.append(s[:40])
    return out


def salted(messages: list[dict[str, Any]], run: int) -> list[dict[str, Any]]:
    if not run:
        return messages
    return [
        {**m, "content": f"[run {run}] {m['content']}"} if isinstance(m.get("content"), str) else m
        for m in messages
    ]


async def run_session(soak: Soak, plan: Plan) -> None:
    session = load_session(plan.path)
    session = dataclasses.replace(session, messages=salted(session.messages, plan.run))
    names = tool_names(session.messages)
    soak.needles.update(needles_of(session.messages, random.Random(plan.index)))
    build = BUILDERS[plan.api]
    tag = f"{plan.run}-{plan.index}"
    for turn, (request, _next) in enumerate(session_requests(session)):
        body = build(request, names, plan)
        soak_id = soak.next_id(tag)
        sent = _dump(body)
        t = time.perf_counter()
        status, error = 200, ""
        try:
            status, error = await send(soak, plan.api, body, soak_id)
        except (openai.APIStatusError, anthropic.APIStatusError) as exc:
            status, error = exc.status_code, str(exc)[:200]
        except (openai.APIError, anthropic.APIError) as exc:
            status, error = 0, f"{type(exc).__name__}: {str(exc)[:200]}"
        seconds = time.perf_counter() - t
        got = await soak.take(soak_id)
        outcome = Outcome(
            plan, turn, status, seconds, len(sent), sum(map(len, got)), [], error=error
        )
        if len(got) != 1:
            outcome.problems.append(f"fake received {len(got)} bodies")
        if got:
            check = check_control_plane(plan.api, body, orjson.loads(got[0]))
            outcome.problems += check.problems
            outcome.rewritten_items = check.rewritten_items
            outcome.recall_tool = check.recall_tool
        soak.outcomes.append(outcome)
        soak.done += 1


# ---------------------------------------------------------------- processes and probes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """CPU time every process of the machine used so far (``/proc/stat``: not idle)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def process_row(pids: dict[str, int]) -> dict[str, float]:
    """RSS and CPU seconds of each process, and of the whole machine (other jobs show
    as the difference)."""
    row: dict[str, float] = {"machine_cpu_s": round(busy_seconds(), 1)}
    for name, pid in pids.items():
        row[f"{name}_mb"] = round(rss_mb(pid), 1)
        row[f"{name}_cpu_s"] = round(cpu_seconds(pid), 1)
    return row


async def sample_rss(
    soak: Soak, pids: dict[str, int], every: float, out: list[dict[str, float]], start: float
) -> None:
    while True:
        row = {"t": round(time.perf_counter() - start, 1), "requests": soak.done}
        row.update(process_row(pids))
        out.append(row)
        await asyncio.sleep(every)


async def cli(*args: str) -> dict[str, Any]:
    t = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ctxwarden",
        *args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await proc.communicate()
    return {
        "command": " ".join(args[:2]),
        "rc": proc.returncode,
        "seconds": round(time.perf_counter() - t, 2),
        "stdout": out.decode()[-400:],
        "stderr": err.decode()[-400:],
    }


async def store_probe(soak: Soak, data_dir: Path, at: int, out: list[dict[str, Any]]) -> None:
    while soak.done < at:
        await asyncio.sleep(0.5)
    for command in ("stats", "gc"):
        result = await cli("store", command, "--json", "--data-dir", str(data_dir))
        result["during_request"] = soak.done
        out.append(result)


def pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def latency_phase(soak: Soak, plans: list[Plan]) -> dict[str, Any]:
    """Each request of ``plans`` sent straight to the fake and through the proxy, one at a
    time, in alternating order; the fake's two copies are compared too."""
    direct = openai_client(soak.fake)
    added: list[float] = []
    via_all: list[float] = []
    direct_all: list[float] = []
    problems: Counter[str] = Counter()
    sent_equal = 0
    n = 0
    try:
        for plan in plans:
            session = load_session(plan.path)
            names = tool_names(session.messages)
            for turn, (request, _) in enumerate(session_requests(session)):
                body = chat_body(request, names, plan)
                times: dict[str, float] = {}
                order = ("direct", "proxy") if turn % 2 else ("proxy", "direct")
                ids = {}
                for where in order:
                    ids[where] = soak.next_id(f"lat-{where}")
                    t = time.perf_counter()
                    status, problem = await send(
                        soak, "openai.chat", body, ids[where], direct if where == "direct" else None
                    )
                    times[where] = (time.perf_counter() - t) * 1000
                    if status != 200 or problem:
                        problems[f"{where}: {status} {problem}"] += 1
                d_raw, p_raw = (await soak.take(ids["direct"])), (await soak.take(ids["proxy"]))
                d_body = orjson.loads(d_raw[0])
                sent_equal += d_body == body
                check = check_control_plane("openai.chat", d_body, orjson.loads(p_raw[0]))
                problems.update(check.problems)
                added.append(times["proxy"] - times["direct"])
                via_all.append(times["proxy"])
                direct_all.append(times["direct"])
                n += 1
    finally:
        await direct.close()
    return {
        "requests": n,
        "sessions": len(plans),
        "sdk_body_equals_driver_dict": sent_equal,
        "direct_p50_ms": round(statistics.median(direct_all), 2),
        "proxy_p50_ms": round(statistics.median(via_all), 2),
        "added_p50_ms": round(statistics.median(added), 2),
        "added_p95_ms": round(pct(added, 95), 2),
        "added_p50_of_medians_ms": round(
            statistics.median(via_all) - statistics.median(direct_all), 2
        ),
        "added_p95_of_p95s_ms": round(pct(via_all, 95) - pct(direct_all, 95), 2),
        "problems": dict(problems),
    }


# ---------------------------------------------------------------- reports


def scan_log(lines: list[str]) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    other: Counter[str] = Counter()
    unparsed = 0
    for line in lines:
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            unparsed += 1
            continue
        if obj.get("event") == "request":
            events.append(obj)
        else:
            other[f"{obj.get('level')}: {obj.get('msg')}"[:160]] += 1
    overhead = [float(e["overhead_ms"]) for e in events if e.get("overhead_ms") is not None]
    condense = [float(e["condense_ms"]) for e in events if e.get("condense_ms") is not None]
    before = sum(int(e.get("tokens_before") or 0) for e in events)
    after = sum(int(e.get("tokens_after") or 0) for e in events)
    return {
        "request_events": len(events),
        "status": dict(Counter(str(e.get("status")) for e in events)),
        "mode": dict(Counter(str(e.get("mode")) for e in events)),
        "rollout_reason": dict(Counter(str(e.get("rollout_reason")) for e in events)),
        "overhead_ms_p95_by_reason": {
            reason: round(pct(values, 95), 2)
            for reason, values in _by_reason(events, "overhead_ms").items()
        },
        "level_error": sum(e.get("level") == "error" for e in events),
        "fallback_reasons": dict(
            Counter(
                f"{e.get('rollout_reason')}: {e.get('fallback_reason')}"
                for e in events
                if e.get("fallback_reason")
            )
        ),
        "rollbacks": sum(int(e.get("rollbacks") or 0) for e in events),
        "recall_injected": sum(bool(e.get("recall_injected")) for e in events),
        "cache_breakpoint": sum(bool(e.get("cache_breakpoint")) for e in events),
        "tokens_before": before,
        "tokens_after": after,
        "token_saving_percent": round(100 * (before - after) / before, 2) if before else 0.0,
        "overhead_ms_p50": round(pct(overhead, 50), 2) if overhead else None,
        "overhead_ms_p95": round(pct(overhead, 95), 2) if overhead else None,
        "overhead_ms_max": round(max(overhead), 1) if overhead else None,
        "condense_ms_p50": round(pct(condense, 50), 2) if condense else None,
        "condense_ms_p95": round(pct(condense, 95), 2) if condense else None,
        "other_lines": dict(other),
        "unparsed_lines": unparsed,
    }


def _by_reason(events: list[dict[str, Any]], field: str) -> dict[str, list[float]]:
    """``field`` of every event that has it, by the event's rollout reason."""
    out: dict[str, list[float]] = {}
    for e in events:
        if e.get(field) is not None:
            out.setdefault(str(e.get("rollout_reason")), []).append(float(e[field]))
    return out


def leaks(text: str, needles: set[str]) -> dict[str, Any]:
    escaped = {n: orjson.dumps(n).decode()[1:-1] for n in needles}
    found = sorted(n for n in needles if n in text or escaped[n] in text)
    return {
        "needles": len(needles),
        "contents_found": found[:10],
        "contents_found_count": len(found),
        "api_key": API_KEY in text or API_KEY[12:] in text,
        "bearer": "Bearer" in text,
        "soak_id_header_values": "soakid-" in text,
    }


def summarize(soak: Soak, seconds: float) -> dict[str, Any]:
    by_api: dict[str, Any] = {}
    for api in BUILDERS:
        rows = [o for o in soak.outcomes if o.plan.api == api]
        if not rows:
            continue
        by_api[api] = {
            "sessions": len({(o.plan.run, o.plan.index) for o in rows}),
            "requests": len(rows),
            "streamed": sum(o.plan.stream for o in rows),
            "status": dict(Counter(str(o.status) for o in rows)),
            "requests_with_problems": sum(bool(o.problems) for o in rows),
            "rewritten_requests": sum(o.rewritten_items > 0 for o in rows),
            "rewritten_items": sum(o.rewritten_items for o in rows),
            "recall_tool_offered": sum(o.recall_tool for o in rows),
            "sent_mb": round(sum(o.sent_bytes for o in rows) / 1e6, 1),
            "upstream_mb": round(sum(o.got_bytes for o in rows) / 1e6, 1),
            "client_p50_ms": round(pct([o.seconds * 1000 for o in rows], 50), 1),
            "client_p95_ms": round(pct([o.seconds * 1000 for o in rows], 95), 1),
        }
    problems: Counter[str] = Counter()
    for o in soak.outcomes:
        problems.update(re.sub(r"\d+", "N", p) for p in o.problems)
        if o.error:
            problems[f"{o.status}: {o.error[:120]}"] += 1
    examples = [
        {
            "session": o.plan.path.name,
            "api": o.plan.api,
            "stream": o.plan.stream,
            "turn": o.turn,
            "status": o.status,
            "problems": o.problems[:5],
            "error": o.error,
        }
        for o in soak.outcomes
        if o.problems or o.error
    ][:20]
    return {
        "requests": len(soak.outcomes),
        "seconds": round(seconds, 1),
        "requests_per_second": round(len(soak.outcomes) / seconds, 1),
        "by_api": by_api,
        "problems": dict(problems.most_common(30)),
        "problem_examples": examples,
    }


def du_mb(path: Path) -> dict[str, float]:
    return {
        p.name: round(p.stat().st_size / 1e6, 2) for p in sorted(path.rglob("*")) if p.is_file()
    }


# ---------------------------------------------------------------- main


def make_plans(paths: list[Path], other_every: int) -> list[Plan]:
    plans = []
    for i, path in enumerate(paths):
        api = "openai.chat"
        if other_every and i % other_every == other_every - 2:
            api = "anthropic.messages"
        elif other_every and i % other_every == other_every - 1:
            api = "openai.responses"
        # chat: stream on odd sessions; the others alternate by round of ``other_every``
        stream = i % 2 == 1 if api == "openai.chat" else (i // other_every) % 2 == 1
        plans.append(Plan(i, path, api, stream=stream, tools=(i // 2) % 2 == 1))
    return plans


async def soak_main(args: argparse.Namespace) -> dict[str, Any]:
    paths = sorted(Path(args.corpus).glob("*.json.gz"))
    random.Random(args.seed).shuffle(paths)
    lat_paths = paths[: args.latency_sessions]
    paths = paths[args.latency_sessions :]
    if args.sessions:
        paths = paths[: args.sessions]
    first = make_plans(paths, args.other_every)
    per_run = sum(len(session_requests(load_session(p.path))) for p in first)
    plans = [dataclasses.replace(p, run=k) for k in range(args.runs) for p in first]
    total = per_run * args.runs
    tmp = Path(tempfile.mkdtemp(prefix="ctxwarden-soak-"))
    data_dir = tmp / "data"
    fake_port, proxy_port = free_port(), free_port()
    fake_url, proxy_url = f"http://127.0.0.1:{fake_port}", f"http://127.0.0.1:{proxy_port}"
    fake = subprocess.Popen(
        [sys.executable, __file__, "--serve-fake", str(fake_port)], stdout=subprocess.DEVNULL
    )
    log_path = tmp / "serve.log"
    serve_cmd = [
        sys.executable,
        "-m",
        "ctxwarden",
        "serve",
        "--port",
        str(proxy_port),
        "--openai-upstream",
        fake_url,
        "--anthropic-upstream",
        fake_url,
        "--data-dir",
        str(data_dir),
    ]
    if args.gc_interval is not None:
        serve_cmd += ["--gc-interval", str(args.gc_interval)]
    if args.canary_percent is not None:
        serve_cmd += ["--canary-percent", str(args.canary_percent)]
    with open(log_path, "wb") as log:
        proxy = subprocess.Popen(serve_cmd, stdout=log, stderr=log)
    report: dict[str, Any] = {
        "corpus_sessions": len(first) + len(lat_paths),
        "soak_sessions": len(plans),
        "soak_requests_planned": total,
        "requests_per_run": per_run,
        "concurrency": args.concurrency,
        "tmp": str(tmp) if args.keep else None,
    }
    rss: list[dict[str, float]] = []
    probes: list[dict[str, Any]] = []
    connector = aiohttp.TCPConnector(limit=args.concurrency + 8)
    try:
        async with aiohttp.ClientSession(connector=connector) as http:
            await wait_up(fake_url + "/v1/models")
            await wait_up(proxy_url + "/healthz")
            soak = Soak(
                proxy_url,
                fake_url,
                http,
                openai_client(proxy_url),
                anthropic.AsyncAnthropic(
                    api_key=API_KEY, base_url=proxy_url, max_retries=0, timeout=300
                ),
            )
            start = time.perf_counter()
            pids = {"proxy": proxy.pid, "fake": fake.pid, "driver": os.getpid()}
            sampler = asyncio.create_task(sample_rss(soak, pids, args.sample_seconds, rss, start))
            lat_plans = [
                Plan(-1 - i, p, "openai.chat", False, i % 2 == 1) for i, p in enumerate(lat_paths)
            ]
            if lat_plans:
                report["latency"] = await latency_phase(soak, lat_plans)
                print(orjson.dumps(report["latency"]).decode(), flush=True)
            rss.append(
                {
                    "t": round(time.perf_counter() - start, 1),
                    "requests": -1,
                    **process_row(pids),
                }
            )
            soak.done = 0
            probe = asyncio.create_task(store_probe(soak, data_dir, total // 2, probes))
            queue: asyncio.Queue[Plan] = asyncio.Queue()
            for plan in plans:
                queue.put_nowait(plan)

            async def worker() -> None:
                while not queue.empty():
                    await run_session(soak, queue.get_nowait())

            async def progress() -> None:
                while True:
                    await asyncio.sleep(30)
                    print(
                        f"{soak.done}/{total} requests, proxy {rss_mb(proxy.pid):.1f} MB",
                        flush=True,
                    )

            ticker = asyncio.create_task(progress())
            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
            soak_seconds = time.perf_counter() - t0
            ticker.cancel()
            await asyncio.sleep(args.sample_seconds)  # one sample after the load
            sampler.cancel()
            if not probe.done():
                probe.cancel()
            async with http.get(proxy_url + "/metrics") as r:
                metrics = await r.text()
            report["soak"] = summarize(soak, soak_seconds)
            report["store_while_serving"] = probes
            report["store_after"] = await cli(
                "store", "stats", "--json", "--data-dir", str(data_dir)
            )
            report["store_files_mb"] = du_mb(data_dir)
            await soak.oai.close()
            await soak.ant.close()
    finally:
        proxy.send_signal(signal.SIGTERM)
        try:
            report["serve_exit"] = proxy.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proxy.kill()
            report["serve_exit"] = "killed after 60 s"
        fake.send_signal(signal.SIGTERM)
        fake.wait(timeout=30)
    log_lines = log_path.read_text(errors="replace").splitlines()
    report["log"] = scan_log(log_lines)
    report["leaks_log"] = leaks("\n".join(log_lines), soak.needles)
    report["leaks_metrics"] = leaks(metrics, soak.needles)
    report["rss_mb"] = rss
    report["cores_used"] = cpu_shares(rss)
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def cpu_shares(rows: list[dict[str, float]]) -> dict[str, float]:
    """Cores each process used on average over the soak (rows from the marker on)."""
    start = max(i for i, r in enumerate(rows) if r["requests"] == -1)
    a, b = rows[start], rows[-1]
    span = b["t"] - a["t"]
    out = {k[: -len("_cpu_s")]: round((b[k] - a[k]) / span, 2) for k in a if k.endswith("_cpu_s")}
    out["other jobs"] = round(out.pop("machine") - sum(out.values()), 2)
    return out


def rss_curve(rows: list[dict[str, float]], points: int = 12) -> list[dict[str, float]]:
    if len(rows) <= points:
        return rows
    step = (len(rows) - 1) / (points - 1)
    return [rows[round(i * step)] for i in range(points)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    parser.add_argument("--sessions", type=int, default=0, help="0: every session")
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--latency-sessions", type=int, default=6)
    parser.add_argument(
        "--other-every",
        type=int,
        default=8,
        help="of every N sessions one is Messages and one Responses (0: none)",
    )
    parser.add_argument("--sample-seconds", type=float, default=3.0)
    parser.add_argument("--gc-interval", type=float, default=None, help="passed to serve")
    parser.add_argument(
        "--canary-percent", type=float, default=None, help="passed to serve (default: 100)"
    )
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--runs", type=int, default=1, help="replay the sessions this many times, new text each"
    )
    parser.add_argument("--json", help="write the whole report here")
    parser.add_argument("--keep", action="store_true", help="keep the data dir and serve.log")
    parser.add_argument("--serve-fake", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake is not None:
        asyncio.run(serve_fake(args.serve_fake))
        return
    report = asyncio.run(soak_main(args))
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    shown = {k: v for k, v in report.items() if k != "rss_mb"}
    shown["rss_curve"] = rss_curve(report["rss_mb"])
    print(orjson.dumps(shown, option=orjson.OPT_INDENT_2).decode())
    print(f"cpus: {os.cpu_count()}  python: {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
