"""The library API refuses what cannot be right, naming the argument, instead of a
silent wrong result: a misspelled per-call mode condensed in active mode, wrong types
came back as an anonymous "TypeError" fallback, a server store without its url fell
back on every request, and a closed engine went on (or fell back) quietly."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from ctxwarden import ConfigError, Engine, EngineClosed, EngineConfig, with_step_breakpoint
from tests.passes.convo import FORCE, call, make_engine, request, result


def _wire() -> dict[str, Any]:
    return request(
        call("c1", "ls -R"), result("c1", "\n".join(f"src/file_{i}.py" for i in range(200))),
        call("c2", "pytest"), result("c2", "ok"),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "error", "names"),
    [
        ({"mode": "EXACT"}, ValueError, "mode must be active, shadow or exact, got 'EXACT'"),
        ({"mode": "shadow "}, ValueError, "mode must be"),
        ({"session": 123}, TypeError, "session must be a str or None, got int"),
        ({"tenant": ""}, ValueError, "tenant must be a non-empty str"),
        ({"tenant": None}, ValueError, "tenant must be a non-empty str"),
        ({"one_shot": "no"}, TypeError, "one_shot must be a bool, got str"),
    ],
)
def test_a_bad_argument_is_refused_by_name(
    kwargs: dict[str, Any], error: type[Exception], names: str
) -> None:
    engine = make_engine("balanced", FORCE)
    wire = _wire()
    with pytest.raises(error, match=names.replace("(", r"\(").replace(")", r"\)")):
        engine.condense(wire, **kwargs)
    with pytest.raises(error):
        asyncio.run(engine.acondense(wire, **kwargs))
    assert engine.condense(wire, mode="exact").request == wire  # the engine still serves


def test_a_dict_config_is_a_type_error_that_says_what_to_do() -> None:
    with pytest.raises(TypeError, match=r"EngineConfig\(\*\*data\)"):
        Engine({"preset": "aggressive"})  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_a_server_store_without_its_url_is_refused_when_the_engine_is_made(backend: str) -> None:
    with pytest.raises(ConfigError) as info:
        Engine(EngineConfig(store={"backend": backend}))
    assert info.value.key == "store.url" and backend in info.value.reason


def test_a_closed_engine_refuses_every_call_and_closes_once() -> None:
    with make_engine("balanced", FORCE) as engine:
        res = engine.condense(_wire(), session="s")
        ref = next(w for w in str(res.request).split() if w.startswith("cw:"))[:15]
        assert engine.recall(ref)
    with pytest.raises(EngineClosed):
        engine.condense(_wire(), session="s")
    with pytest.raises(EngineClosed):
        asyncio.run(engine.acondense(_wire(), session="s"))
    with pytest.raises(EngineClosed):
        engine.recall(ref)
    engine.close()  # again: nothing happens


def test_with_step_breakpoint_names_a_wrong_argument() -> None:
    with pytest.raises(TypeError, match="request must be a dict"):
        with_step_breakpoint("x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="step_start must be an int or None, got str"):
        with_step_breakpoint({"messages": []}, "3")  # type: ignore[arg-type]


def test_an_unreadable_request_says_what_kind_of_value_stopped_it() -> None:
    """A lone surrogate (common from surrogateescape decoding) leaves the request as it
    came; the reason says why, without the text."""
    wire = _wire()
    wire["messages"][1]["content"] = "secret \udcff output"
    res = make_engine("balanced", FORCE).condense(wire, session="s")
    assert res.request == wire and res.report["fallbacks"] == 1
    reason = res.report["fallback_reason"]
    assert reason.startswith("unreadable: ") and "surrogates not allowed" in reason
    assert "secret" not in reason


def test_a_read_only_mapping_is_a_request_like_a_dict() -> None:
    """The signature takes a Mapping: a MappingProxyType was refused as "expected an
    object, got mappingproxy at /"."""
    import types

    wire = _wire()
    engine = make_engine("balanced", FORCE)
    res = engine.condense(types.MappingProxyType(wire), session="s")
    assert res.report["fallback_reason"] is None and res.changed
    assert res.request == make_engine("balanced", FORCE).condense(wire, session="s").request


async def test_two_closes_at_once_let_every_call_made_before_them_run(tmp_path: Any) -> None:
    """A second close (another thread, or __exit__ after an explicit close) closed the
    store under the acondense calls the first close was waiting for."""
    engine = Engine(EngineConfig(data_dir=str(tmp_path), pipeline=FORCE))
    engine.condense(_wire(), session="warm")  # the store is open
    condense = engine._condense

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.05)  # the closes come while the calls are queued
        return condense(*args, **kwargs)

    engine._condense = slow  # type: ignore[method-assign]
    calls = [asyncio.ensure_future(engine.acondense(_wire(), session=f"s{i}")) for i in range(4)]
    await asyncio.sleep(0)
    await asyncio.gather(asyncio.to_thread(engine.close), asyncio.to_thread(engine.close))
    results = await asyncio.gather(*calls)
    assert [r.report["fallback_reason"] for r in results] == [None] * 4


def test_a_condense_that_passed_the_open_check_never_runs_on_a_closed_store(
    tmp_path: Any,
) -> None:
    engine = Engine(EngineConfig(data_dir=str(tmp_path), pipeline=FORCE))
    engine.condense(_wire(), session="warm")
    engine.close()
    with pytest.raises(EngineClosed):  # as a call that was switched out after its check
        engine._locked(lambda: pytest.fail("a condense ran on the closed store"))
    with pytest.raises(EngineClosed):
        _ = engine.store  # never opened again


def test_an_unpickled_engine_from_before_the_closed_flag_works() -> None:
    engine = make_engine("balanced", FORCE)
    state = engine.__getstate__()
    for name in ("_closed", "_store_closed"):
        state.pop(name)
    copy = Engine.__new__(Engine)
    copy.__setstate__(state)
    assert copy.condense(_wire(), session="s").report["fallback_reason"] is None


@pytest.mark.parametrize(
    ("fixture", "api"),
    [
        ("anthropic_full.json", "anthropic.messages"),
        ("responses_full.json", "openai.responses"),
        ("chat_shapes.json", "openai.chat"),
    ],
)
def test_a_request_without_its_api_is_read_as_its_shape_says(fixture: str, api: str) -> None:
    # a Messages body left without api= was read as Chat: nothing condensed, the
    # counts wrong, no fallback reason
    from tests.conftest import load_fixture

    wire = load_fixture(fixture)
    guessed = make_engine("balanced", FORCE).condense(wire, one_shot=True)
    named = make_engine("balanced", FORCE).condense(wire, api=api, one_shot=True)
    assert guessed.report["api"] == api
    assert guessed.request == named.request
    assert guessed.report["tokens_before"] == named.report["tokens_before"]


def test_an_explicit_api_is_taken_as_given() -> None:
    # a Chat body named Messages is read as Messages (and its tool role refused), not
    # guessed over
    from ctxwarden import MalformedRequest

    engine = make_engine("balanced", FORCE)
    with pytest.raises(MalformedRequest):
        engine.condense(_wire(), api="anthropic.messages", one_shot=True)
    assert engine.condense(_wire(), one_shot=True).report["api"] == "openai.chat"


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        ((5,), {}, TypeError),
        (("",), {}, TypeError),
        (("s",), {"tenant": ""}, ValueError),
        (("s",), {"as_sent_for": "3600"}, TypeError),
    ],
)
def test_forget_session_refuses_arguments_condense_refuses(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception]
) -> None:
    # forget_session(5) wrote a state under the key 5 that no condense could name
    engine = make_engine("balanced", FORCE)
    with pytest.raises(error):
        engine.forget_session(*args, **kwargs)
    engine.forget_session("s", as_sent_for=60)  # a right call still works


def test_a_mapping_that_is_no_dict_is_read_as_its_shape_says() -> None:
    from types import MappingProxyType

    from tests.conftest import load_fixture

    wire = load_fixture("responses_full.json")
    out = make_engine("balanced", FORCE).condense(MappingProxyType(wire), one_shot=True)
    assert out.report["api"] == "openai.responses"


def test_a_top_level_integer_past_64_bits_is_unreadable_before_any_pass() -> None:
    # helper-126: it ran every pass and stored originals, then fell back as a
    # validation failure, on every request of the session
    from ctxwarden import Engine, EngineConfig

    engine = Engine(EngineConfig(preset="balanced", pipeline=FORCE, store={"backend": "memory"}))
    wire = {**_wire(), "metadata": {"seed": 2**70}}
    out = engine.condense(wire, "openai.chat", session="s")
    assert out.report["fallback_reason"].startswith("unreadable: ")
    assert out.report["artifacts_stored"] == 0 and out.request == wire
