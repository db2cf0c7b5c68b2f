#!/usr/bin/env bash
# Strict replay of a fixed sample of the real corpus, for CI and for a quick local check.
#
#   scripts/replay-sample.sh [CORPUS_DIR] [EVERY]      (defaults: ../shared/corpus/sessions 20)
#
# Takes every EVERY-th session of CORPUS_DIR in byte order (the same files on every
# machine, spread over all agent sources), replays them through exact, mask:10 and the
# default configuration, and exits 1 when a gate of benchmarks/ci_gates.toml fails.
# A missing corpus is a skip, unless CI is set (CI always has ../shared beside the clone):
# then it is a failure, so that CI never passes without having replayed anything.
set -euo pipefail
cd "$(dirname "$0")/.."
corpus=${1:-../shared/corpus/sessions}
every=${2:-20}
bin=${CTXWARDEN_BIN:-.venv/bin/ctxwarden}

if [ ! -d "$corpus" ]; then
  if [ -n "${CI:-}" ]; then
    echo "replay-sample: corpus not found at $corpus (required in CI)" >&2
    exit 1
  fi
  echo "replay-sample: corpus not found at $corpus; skipped" >&2
  exit 0
fi
mapfile -t sample < <(find "$corpus" -maxdepth 1 -type f \( -name '*.json' -o -name '*.json.gz' \) \
  | LC_ALL=C sort | awk -v n="$every" 'NR % n == 1')
if [ ${#sample[@]} -eq 0 ]; then
  echo "replay-sample: no sessions in $corpus" >&2
  exit 1
fi
echo "replay-sample: ${#sample[@]} sessions (every ${every}th of $corpus)"
exec "$bin" replay "${sample[@]}" --strict --gates benchmarks/ci_gates.toml --quiet
