"""How condense time grows with the history (not a test): one long synthetic session.

The corpus sessions stop at a few hundred messages; agents in long tasks send more.
This chains the histories of the first ``--sessions`` corpus sessions of one source into
one conversation (the first session's system prompt and task, then every session's
exchange, call ids made unique), sends it turn by turn through one ``Engine`` (memory
store) exactly as a proxy would, and prints the median and p95 condense time per band
of history length.

    .venv/bin/python benchmarks/engine_scaling.py [CORPUS_DIR] [--preset balanced] [--store sqlite]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ctxwarden import Engine, EngineConfig
from ctxwarden.io import load_session, session_requests

ROOT = Path(__file__).resolve().parents[1]


def long_history(files: list[Path]) -> tuple[str, list[dict[str, Any]]]:
    """The model and the chained message list of ``files`` (see module doc)."""
    messages: list[dict[str, Any]] = []
    model = ""
    for k, path in enumerate(files):
        session = load_session(path)
        requests = [r for r, _ in session_requests(session)]
        last = requests[-1]["messages"]
        model = model or requests[-1].get("model", "")
        for item in copy.deepcopy(last if not messages else last[2:]):
            for call in item.get("tool_calls") or []:
                call["id"] = f"{call['id']}_{k}"
            if item.get("tool_call_id"):
                item["tool_call_id"] = f"{item['tool_call_id']}_{k}"
            messages.append(item)
    return model, messages


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", nargs="?", default=str(ROOT.parent / "shared/corpus/sessions"))
    parser.add_argument("--preset", default="balanced")
    parser.add_argument("--source", default="minisweagent", help="session file name prefix")
    parser.add_argument("--sessions", type=int, default=12)
    parser.add_argument("--band", type=int, default=250, help="history length per row")
    parser.add_argument(
        "--store", choices=("memory", "sqlite"), default="memory",
        help="sqlite: a fresh store file in a temporary directory (the default backend)",
    )  # fmt: skip
    args = parser.parse_args()
    files = sorted(Path(args.corpus).glob(f"{args.source}*.json.gz"))[: args.sessions]
    model, messages = long_history(files)
    with tempfile.TemporaryDirectory() as data_dir:
        engine = Engine(
            EngineConfig(preset=args.preset, store={"backend": args.store}, data_dir=data_dir)
        )
        try:
            _time(engine, model, messages, args.band, f"{args.preset}, {args.store} store", files)
        finally:
            engine.close()


def _time(
    engine: Engine, model: str, messages: list[dict[str, Any]], band_size: int, label: str,
    files: list[Path],
) -> None:  # fmt: skip
    engine.counter_for(engine.registry.lookup(model))  # the vocabulary loads untimed
    times: dict[int, list[float]] = {}
    for n in range(2, len(messages)):
        if messages[n]["role"] != "assistant" or messages[n - 1]["role"] == "assistant":
            continue  # a request is the history before each assistant turn
        request = {"model": model, "messages": messages[:n]}
        started = time.perf_counter()
        engine.condense(request, session="long")
        times.setdefault(n // band_size, []).append((time.perf_counter() - started) * 1000)
    print(f"{label}: {len(messages)} messages from {len(files)} sessions")
    for band, values in sorted(times.items()):
        values.sort()
        p95 = values[int(0.95 * (len(values) - 1))]
        print(
            f"  messages {band * band_size:5}-{(band + 1) * band_size - 1:<5} "
            f"requests {len(values):4}  p50 {statistics.median(values):6.2f} ms  p95 {p95:6.2f} ms"
        )


if __name__ == "__main__":
    main()
