"""The Store contract (store/base.py), run against every backend."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwarden.errors import ArtifactCorrupted, ArtifactMissing, StoreError
from ctxwarden.store import REF_PATTERN, Store, content_digest, make_ref
from ctxwarden.store.base import TOUCH_INTERVAL
from tests.store.backends import CAPPED, Harness


def test_backend_implements_the_protocol(store: Store) -> None:
    assert isinstance(store, Store)


def test_round_trip_and_ref_is_the_digest_prefix(store: Store) -> None:
    text = "line 1\nline 2\n\ttabs, ünïcödé, emoji 🦀, NUL \x00 end"
    ref = store.put("acme", text)
    assert REF_PATTERN.fullmatch(ref)
    assert ref == make_ref(content_digest(text))
    assert store.get("acme", ref) == text
    assert store.has("acme", ref)


def test_put_is_idempotent(store: Store) -> None:
    first = store.put("acme", "same text")
    second = store.put("acme", "same text")
    assert first == second
    assert store.get("acme", first) == "same text"
    assert store.stats()["artifacts"] == 1
    assert store.stats()["bytes"] == len(b"same text")


def test_empty_text_round_trips(store: Store) -> None:
    ref = store.put("acme", "")
    assert store.get("acme", ref) == ""


def test_missing_ref_raises_artifact_missing(store: Store) -> None:
    assert not store.has("acme", "cw:000000000000")
    with pytest.raises(ArtifactMissing, match="cw:000000000000"):
        store.get("acme", "cw:000000000000")


def test_a_tenant_cannot_read_or_detect_another_tenants_artifact(store: Store) -> None:
    ref = store.put("tenant-a", "secret of A")
    assert not store.has("tenant-b", ref)
    with pytest.raises(ArtifactMissing):
        store.get("tenant-b", ref)
    # Still readable by its owner, and B's own copy is independent of A's.
    assert store.get("tenant-a", ref) == "secret of A"
    assert store.put("tenant-b", "secret of A") == ref
    assert store.stats()["artifacts"] == 2


def test_tenant_names_cannot_alias_each_other(store: Store) -> None:
    # Separator characters in tenant names must not let one tenant reach another's keys.
    ref = store.put("a", "text of a")
    for other in ("a:", "a:a", "{a}", "a}:a", "a%3A", "A", " a"):
        assert not store.has(other, ref), other
    store.put_state("a", "x:a:" + ref, b"state")
    assert store.get_state("a:s:x", "a:" + ref) is None


def test_corrupted_entry_raises_artifact_corrupted(store: Store, harness: Harness) -> None:
    ref = store.put("acme", "original bytes")
    harness.corrupt(store, "acme", ref, b"tampered bytes")
    with pytest.raises(ArtifactCorrupted, match=ref):
        store.get("acme", ref)


def test_non_utf8_entry_raises_artifact_corrupted(store: Store, harness: Harness) -> None:
    ref = store.put("acme", "original")
    harness.corrupt(store, "acme", ref, b"\xff\xfe not utf-8")
    with pytest.raises(ArtifactCorrupted):
        store.get("acme", ref)


def test_corruption_is_per_tenant(store: Store, harness: Harness) -> None:
    ref = store.put("a", "shared text")
    store.put("b", "shared text")
    harness.corrupt(store, "a", ref, b"broken")
    assert store.get("b", ref) == "shared text"


def test_missing_names_exactly_the_refs_that_do_not_resolve(store: Store) -> None:
    first = store.put("acme", "first")
    second = store.put("acme", "second")
    ghost = "cw:000000000000"
    assert store.missing("acme", [first, second, ghost]) == {ghost}
    assert store.missing("acme", [first, first]) == frozenset()
    assert store.missing("acme", []) == frozenset()
    assert store.missing("other", [first]) == {first}  # another tenant's is not there


def test_missing_answers_for_more_refs_than_one_statement_holds(store: Store) -> None:
    refs = [store.put("acme", f"artifact {i}") for i in range(620)]
    ghosts = [make_ref(content_digest(f"never stored {i}")) for i in range(30)]
    assert store.missing("acme", refs + ghosts) == set(ghosts)


@pytest.mark.parametrize("harness", CAPPED, indirect=True)
@pytest.mark.parametrize("ttl", [4 * TOUCH_INTERVAL, 100.0], ids=["long-ttl", "short-ttl"])
def test_missing_keeps_what_is_still_sent_from_expiring(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, ttl: float
) -> None:
    """A reference a session re-sends is used even if nobody recalls it: the lookup
    refreshes its last use (once it is older than touch_interval(ttl)), so TTL takes
    the idle ones, also with a TTL shorter than TOUCH_INTERVAL."""
    store = harness.open(ttl_seconds=ttl)
    try:
        sent = store.put("acme", "still re-sent every turn")
        idle = store.put("acme", "no longer sent")
        later = time.time() + 0.8 * ttl
        monkeypatch.setattr(time, "time", lambda: later)
        assert store.missing("acme", [sent]) == frozenset()
        # both puts are past the TTL by then; the lookup is not
        assert store.gc(now=later + 0.5 * ttl) == 1
        assert store.has("acme", sent)
        assert not store.has("acme", idle)
    finally:
        store.close()


def test_session_state(store: Store) -> None:
    assert store.get_state("acme", "s1") is None
    store.put_state("acme", "s1", b"\x00first")
    assert store.get_state("acme", "s1") == b"\x00first"
    store.put_state("acme", "s1", b"second")
    assert store.get_state("acme", "s1") == b"second"
    assert store.get_state("other", "s1") is None
    assert store.get_state("acme", "s2") is None


def test_stats_count_artifacts_bytes_sessions_and_tenants(store: Store) -> None:
    assert store.stats() == {"artifacts": 0, "bytes": 0, "sessions": 0, "tenants": 0}
    store.put("a", "one")
    store.put("a", "two")
    store.put("b", "ü")  # two bytes in UTF-8
    store.put_state("a", "s", b"x")
    store.put_state("c", "s", b"y")
    assert store.stats() == {"artifacts": 3, "bytes": 8, "sessions": 2, "tenants": 3}


def test_gc_drops_expired_artifacts_only(harness: Harness) -> None:
    store = harness.open(ttl_seconds=100)
    try:
        old = store.put("acme", "old text")
        assert store.gc(now=time.time() + 50) == 0
        assert store.get("acme", old) == "old text"
        assert store.gc(now=time.time() + 1000) == 1
        assert not store.has("acme", old)
        with pytest.raises(ArtifactMissing):
            store.get("acme", old)
        assert store.stats()["artifacts"] == 0
    finally:
        store.close()


def test_gc_now_defaults_to_the_present(store: Store) -> None:
    ref = store.put("acme", "fresh")
    assert store.gc() == 0
    assert store.has("acme", ref)


@pytest.mark.parametrize("harness", CAPPED, indirect=True)
def test_gc_trims_least_recently_used_past_the_byte_cap(harness: Harness) -> None:
    store = harness.open(max_bytes=12)
    try:
        first = store.put("acme", "aaaaaa")
        time.sleep(0.005)
        second = store.put("acme", "bbbbbb")
        time.sleep(0.005)
        assert store.get("acme", first) == "aaaaaa"  # now `second` is the least recent
        time.sleep(0.005)
        third = store.put("acme", "cccccc")
        assert store.stats()["bytes"] == 18
        assert store.gc() == 1
        assert not store.has("acme", second)
        assert store.has("acme", first)
        assert store.has("acme", third)
        assert store.stats()["bytes"] == 12
    finally:
        store.close()


@settings(
    max_examples=60,
    deadline=None,
    # The store is shared across examples on purpose: content addressing makes puts
    # of different texts independent, and equal texts must share one ref anyway.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(text=st.text())
def test_any_text_round_trips_exactly(store: Store, text: str) -> None:
    ref = store.put("prop", text)
    assert ref == make_ref(content_digest(text))
    assert store.get("prop", ref) == text


# -- repairs, expiry, names (each fails on some backend without its fix) -------------------


@pytest.mark.parametrize("damage", [b"tampered bytes", b"\xff\xfe not utf-8"])
def test_put_repairs_a_damaged_original(store: Store, harness: Harness, damage: bytes) -> None:
    ref = store.put("acme", "original tool output")
    harness.corrupt(store, "acme", ref, damage)
    with pytest.raises(ArtifactCorrupted):
        store.get("acme", ref)
    assert store.put("acme", "original tool output") == ref
    assert store.get("acme", ref) == "original tool output"
    assert store.stats()["artifacts"] == 1
    assert store.stats()["bytes"] == len(b"original tool output")


def test_put_repairs_a_damaged_digest(store: Store, harness: Harness) -> None:
    ref = store.put("acme", "original tool output")
    harness.set_digest(store, "acme", ref, "blake2b:" + "0" * 64)
    with pytest.raises(ArtifactCorrupted):
        store.get("acme", ref)
    assert store.put("acme", "original tool output") == ref
    assert store.get("acme", ref) == "original tool output"


def test_a_valid_artifact_sharing_the_reference_is_kept(store: Store, harness: Harness) -> None:
    """A 48-bit prefix collision: the stored text verifies against its own digest, so
    a put of another text under the same reference does not replace it (first write
    wins; the engine's read-back sees the difference and keeps its segment)."""
    ref = store.put("acme", "the text a session refers to")
    harness.corrupt(store, "acme", ref, b"first text")
    harness.set_digest(store, "acme", ref, content_digest("first text"))
    assert store.get("acme", ref) == "first text"
    assert store.put("acme", "the text a session refers to") == ref
    assert store.get("acme", ref) == "first text"


def test_expired_artifacts_and_state_read_as_missing(harness: Harness) -> None:
    """Past the TTL an artifact and a session state are gone on every backend, also
    before gc runs, and reading them does not revive them."""
    store = harness.open(ttl_seconds=0.3)
    try:
        ref = store.put("acme", "short lived")
        store.put_state("acme", "s", b"state")
        time.sleep(0.5)
        for _ in range(2):  # the first round of reads must not revive anything
            assert not store.has("acme", ref)
            assert store.missing("acme", [ref]) == {ref}
            with pytest.raises(ArtifactMissing):
                store.get("acme", ref)
            assert store.get_state("acme", "s") is None
        store.gc()
        assert store.stats() == {"artifacts": 0, "bytes": 0, "sessions": 0, "tenants": 0}
        assert store.put("acme", "short lived") == ref  # a new put stores it again
        assert store.get("acme", ref) == "short lived"
    finally:
        store.close()


def test_gc_drops_expired_session_state(harness: Harness) -> None:
    store = harness.open(ttl_seconds=100)
    try:
        store.put_state("acme", "s", b"state")
        store.put("acme", "artifact")
        assert store.gc(now=time.time() + 1000) == 1
        assert store.get_state("acme", "s") is None
        assert store.stats() == {"artifacts": 0, "bytes": 0, "sessions": 0, "tenants": 0}
    finally:
        store.close()


@pytest.mark.parametrize("harness", CAPPED, indirect=True)
def test_gc_drops_the_expired_before_trimming_live_ones(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [time.time()]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    start = clock[0]
    store = harness.open(ttl_seconds=100, max_bytes=12)
    try:
        idle = store.put("acme", "cccccc")
        clock[0] = start + 10
        first = store.put("acme", "aaaaaa")
        clock[0] = start + 11
        second = store.put("acme", "bbbbbb")
        clock[0] = start + 12
        assert store.missing("acme", [idle]) == frozenset()  # fresh: no refresh needed
        clock[0] = start + 105  # `idle` is past the TTL; the other two fit the cap
        assert store.gc() == 1
        assert not store.has("acme", idle)
        assert store.has("acme", first)
        assert store.has("acme", second)
    finally:
        store.close()


NAMES = ["\udcff", "s\ud800", "a\x00b", "a", "\x01", "\x01a", "\x01%ED%B3%BF", "%ED%B3%BF"]


def test_any_str_is_a_tenant_or_session_name_and_names_never_alias(store: Store) -> None:
    """NUL and lone surrogates (a header decoded with surrogateescape) are accepted
    alike on every backend, and no two names share keys (also names that look like an
    escaped form of another)."""
    refs = {name: store.put(name, f"text of {name!r}") for name in NAMES}
    for name in NAMES:
        store.put_state("acme", name, name.encode("utf-8", "surrogatepass"))
        store.put_state(name, "s", b"of " + name.encode("utf-8", "surrogatepass"))
    for name, ref in refs.items():
        assert store.get(name, ref) == f"text of {name!r}"
        assert store.has(name, ref)
        assert store.missing(name, [ref]) == frozenset()
        assert store.get_state("acme", name) == name.encode("utf-8", "surrogatepass")
        assert store.get_state(name, "s") == b"of " + name.encode("utf-8", "surrogatepass")
        for other in NAMES:
            if other != name:
                assert not store.has(other, ref), (name, other)
    stats = store.stats()
    assert stats["artifacts"] == len(NAMES)
    assert stats["tenants"] == len(NAMES) + 1


def test_a_text_that_is_not_unicode_is_a_store_error(store: Store) -> None:
    with pytest.raises(StoreError, match="not valid Unicode"):
        store.put("acme", "a lone \ud800 surrogate")
    assert store.stats()["artifacts"] == 0
