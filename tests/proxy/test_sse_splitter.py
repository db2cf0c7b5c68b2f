"""The SSE splitter gives the same events however the stream is cut into chunks, and
searches each byte for a boundary about once (a big event in small chunks is linear)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.proxy.sse import _BOUNDARY, MAX_EVENT_BYTES, SSESplitter, _parse

_LINE_ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])
_FIELDS = st.sampled_from([b"data: x", b"data: {\"a\": 1}", b"event: e", b": note", b"data:",
                           b"id: 7", b"data: [DONE]", b"data: \xc3\xa9", b""])  # fmt: skip


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    out = b""
    for _ in range(draw(st.integers(0, 8))):
        end = draw(_LINE_ENDS)
        for field in draw(st.lists(_FIELDS, min_size=1, max_size=4)):
            out += field + end
        out += end  # the blank line ending the event
    return out + draw(st.sampled_from([b"", b"data: tail", b"data: tail\n"]))


def _events(chunks: list[bytes]) -> list[tuple[bytes, str | None, str]]:
    splitter = SSESplitter()
    events = [e for chunk in chunks for e in splitter.feed(chunk)] + splitter.flush()
    return [(e.raw, e.name, e.data) for e in events]


@settings(max_examples=400)
@given(streams(), st.lists(st.integers(0, 400), max_size=12))
def test_any_chunking_gives_the_events_of_one_feed(stream: bytes, cuts: list[int]) -> None:
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    assert _events(chunks) == _events([stream]) == _reference_events(chunks)


def _reference_events(chunks: list[bytes]) -> list[tuple[bytes, str | None, str]]:
    """The splitter as it was: the whole buffer searched again for every chunk."""
    buffer, out = b"", []
    for chunk in chunks:
        buffer += chunk
        while (match := _BOUNDARY.search(buffer)) is not None:
            raw, buffer = buffer[: match.end()], buffer[match.end() :]
            out.append(_parse(raw))
    out.append(_parse(buffer + b"\n\n") if buffer.strip() else None)
    return [(e.raw, e.name, e.data) for e in out if e is not None]


def test_a_big_event_in_small_chunks_comes_out_whole_and_an_oversized_one_is_dropped() -> None:
    payload = b"x" * (4 * 1024 * 1024)
    stream = b"data: " + payload + b"\n\n"
    splitter = SSESplitter()
    got = [e for i in range(0, len(stream), 4096) for e in splitter.feed(stream[i : i + 4096])]
    assert [len(e.data) for e in got] == [len(payload)] and got[0].raw == stream
    huge = SSESplitter()
    assert huge.feed(b"data: " + b"y" * (MAX_EVENT_BYTES + 1)) == []
    assert [e.data for e in huge.feed(b"data: after\n\n")] == ["after"]
