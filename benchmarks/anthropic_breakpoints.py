"""Anthropic-style saving under several cache-entry models (not a test; a measurement).

``ctxwarden replay`` reads from cache the longest message prefix a request shares with
the previous one (A). That is OpenAI's automatic caching; an Anthropic client gets it
only with a cache breakpoint where the previous request ended. This replays the same
sessions through the engine and prices each request (write 1.25, read 0.1, nothing
cached under 1,024 tokens) under:

- A: the replay's model, the longest common prefix with the previous request;
- B: one breakpoint at the end of each request: cache entries are whole earlier
  requests, a hit is the longest earlier request that is a prefix of this one (no
  lookback limit or expiry: generous);
- C: two breakpoints per request, the end and before the last message;
- D: the client's breakpoint at the end plus one where the previous request ended,
  which is what ctxwarden would add (a step rewrites what followed that point);
- E: D's breakpoints under Anthropic's lookback: an entry exists only where an earlier
  request had a breakpoint, and a breakpoint reads one at most 20 content blocks
  before it (a tool result or a tool call is one block);
- F: E plus the breakpoint ctxwarden adds at a compaction step on the last message the
  step kept (``with_step_breakpoint(request, report["step_start"])``).

Tokens are counted with o200k (x1.05 for non-GPT models), 4 per message.

    python benchmarks/anthropic_breakpoints.py balanced 16   # PRESET EVERY_NTH
"""

from __future__ import annotations

import copy
import glob
import gzip
import json
import statistics
import sys
from pathlib import Path

from ctxwarden.config import EngineConfig, StoreConfig
from ctxwarden.engine import Engine
from ctxwarden.tokens.encoding import get_encoding

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "sessions"

preset, every = sys.argv[1], int(sys.argv[2])
enc = get_encoding("o200k_base")
memo = {}


def count(t, scale):
    if not t:
        return 0
    if t not in memo:
        memo[t] = len(enc.encode_ordinary(t))
    n = memo[t]
    return n if scale == 1.0 else round(n * scale)


def mtok(m, scale):
    n = 4
    c = m.get("content")
    if isinstance(c, str):
        n += count(c, scale)
    for tc in m.get("tool_calls") or []:
        f = tc.get("function") or {}
        n += count(f.get("name") or "", scale) + count(f.get("arguments") or "", scale)
    return n


LOOKBACK = 20


def blocks(m):
    """Anthropic content blocks of a chat message (a tool result is one block)."""
    n = len(m.get("tool_calls") or [])
    c = m.get("content")
    if isinstance(c, list):
        n += len(c)
    elif c:
        n += 1
    return max(n, 1)


def key(m):
    return json.dumps(m, sort_keys=True)


def cost_w(tokens, cached):
    cached = cached if cached >= 1024 else 0
    if tokens < 1024:
        return tokens
    return 1.25 * (tokens - cached) + 0.1 * cached


files = sorted(glob.glob(str(CORPUS / "*.json.gz")))[::every]
tot = {(s, m): 0.0 for s in ("exact", "cond") for m in "ABCDEF"}
worst = {m: (9, None) for m in "ABCDEF"}
savings: dict[str, list[float]] = {m: [] for m in "ABCDEF"}
for f in files:
    with gzip.open(f) as handle:
        d = json.load(handle)
    msgs, model = d["messages"], d.get("model") or ""
    scale = 1.0 if "gpt" in model.lower() else 1.05
    eng = Engine(EngineConfig(preset=preset, store=StoreConfig(backend="memory")))
    sess = {(s, m): 0.0 for s in ("exact", "cond") for m in "ABCDEF"}
    hist = {"exact": [], "cond": []}  # list of (keys tuple, cum tokens list)
    entries = {"exact": {}, "cond": {}}  # E/F: (model, position) -> keys prefix written

    for k, m in enumerate(msgs):
        if m.get("role") != "assistant" or k == 0:
            continue
        orig = msgs[:k]
        cond = eng.condense(
            copy.deepcopy({"model": model, "messages": orig}), api="openai.chat", session=d["id"]
        ).request["messages"]
        for side, req in (("exact", orig), ("cond", cond)):
            keys = tuple(key(x) for x in req)
            cum = [3]
            for x in req:
                cum.append(cum[-1] + mtok(x, scale))
            total = cum[-1]
            H = hist[side]
            # A: LCP with previous request
            a = 0
            if H:
                pk = H[-1]
                i = 0
                while i < min(len(pk), len(keys)) and pk[i] == keys[i]:
                    i += 1
                a = cum[i]
            # entries: full prefixes of earlier requests (B); plus len-1 prefixes (C);
            # plus, for D, the prefix up to where the request before it ended
            b = c = d_ = 0
            for j, pk in enumerate(H):
                before = len(H[j - 1]) if j else 0
                for L, into in ((len(pk), "BCD"), (len(pk) - 1, "C"), (before, "D")):
                    if L <= 0 or len(keys) < L or cum[L] < 1024:
                        continue
                    if pk[:L] == keys[:L]:
                        if "B" in into:
                            b = max(b, cum[L])
                        if "C" in into:
                            c = max(c, cum[L])
                        if "D" in into:
                            d_ = max(d_, cum[L])
            # E: D's breakpoints with Anthropic's lookback (about 20 blocks before each
            # breakpoint; an entry exists only where an earlier request had a breakpoint);
            # F: E plus a breakpoint just before the first message a step rewrote
            bcum = [0]
            for x in req:
                bcum.append(bcum[-1] + blocks(x))
            prev_len = len(H[-1]) if H else 0
            cut = None
            if H:
                i = 0
                pk = H[-1]
                while i < min(len(pk), len(keys)) and pk[i] == keys[i]:
                    i += 1
                if i < len(pk):
                    cut = i
            hits = {}
            for mm, points in (
                ("E", [len(keys), prev_len]),
                ("F", [len(keys), prev_len] + ([cut] if cut else [])),
            ):
                best = 0
                written = entries[side]
                for p in points:
                    if p <= 0:
                        continue
                    for (model_, q), pref in written.items():
                        if model_ != mm or q > p or q > len(keys) or bcum[p] - bcum[q] > LOOKBACK:
                            continue
                        if cum[q] >= 1024 and pref == keys[:q]:
                            best = max(best, cum[q])
                hits[mm] = best
                for p in points:
                    if p > 0:
                        written[(mm, p)] = keys[:p]
            for mm, cached in (
                ("A", a),
                ("B", b),
                ("C", c),
                ("D", d_),
                ("E", hits["E"]),
                ("F", hits["F"]),
            ):
                sess[(side, mm)] += cost_w(total, cached)
            H.append(keys)
    for mm in "ABCDEF":
        for side in ("exact", "cond"):
            tot[(side, mm)] += sess[(side, mm)]
        sv = 1 - sess[("cond", mm)] / sess[("exact", mm)]
        savings[mm].append(sv)
        if sv < worst[mm][0]:
            worst[mm] = (sv, d["id"])
    print(
        f"{d['id'][:70]:70s} "
        + " ".join(f"{mm}:{1 - sess[('cond', mm)] / sess[('exact', mm)]:+.1%}" for mm in "ABCDEF"),
        flush=True,
    )
print("sessions", len(files))
for mm in "ABCDEF":
    print(
        mm,
        "total saving",
        f"{1 - tot[('cond', mm)] / tot[('exact', mm)]:+.1%}",
        "worst",
        f"{worst[mm][0]:+.1%}",
        "median session",
        f"{statistics.median(savings[mm]):+.1%}",
        "sessions below -2%",
        sum(v < -0.02 for v in savings[mm]),
    )
