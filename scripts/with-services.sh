#!/usr/bin/env bash
# Run a command with the services the tests need: Redis, PostgreSQL and Chromium.
# Installs them with apt-get when missing and running as root (as in CI), starts them
# on private loopback ports under a temporary directory, exports their addresses, runs
# the command, and stops them. Without them the tests that need them say so and fail
# only if CTXWARDEN_REQUIRE_SERVICES=1 (set by .ci/run).
set -u
work=$(mktemp -d /tmp/ctxwarden-services.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  if [ -n "${pgbin:-}" ] && [ -d "$work/pg" ]; then
    "$pgbin/pg_ctl" -D "$work/pg" -m immediate stop >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

need=()
command -v redis-server >/dev/null || need+=(redis-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null || need+=(chromium)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "with-services: installing ${need[*]}" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") \
    >"$work/apt.log" 2>&1 || { echo "with-services: apt-get failed:" >&2; tail -5 "$work/apt.log" >&2; }
fi

if command -v redis-server >/dev/null; then
  port=$((20000 + RANDOM % 20000))
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize no >"$work/redis.log" 2>&1 &
  pids+=($!)
  export CTXWARDEN_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
fi

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -n "$pgbin" ]; then
  pgport=$((40000 + RANDOM % 20000))
  runas=()
  if [ "$(id -u)" = 0 ]; then
    id ctxwarden_pg >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin ctxwarden_pg 2>/dev/null
    chown -R ctxwarden_pg "$work" 2>/dev/null; chmod 755 "$work"
    runas=(runuser -u ctxwarden_pg --)
  fi
  mkdir -p "$work/pg" && chown ctxwarden_pg "$work/pg" 2>/dev/null
  if "${runas[@]}" "$pgbin/initdb" -D "$work/pg" -U postgres -A trust >"$work/initdb.log" 2>&1 \
    && "${runas[@]}" "$pgbin/pg_ctl" -D "$work/pg" -o "-p $pgport -k $work -c listen_addresses=127.0.0.1" \
       -l "$work/pg.log" -w start >/dev/null 2>&1; then
    export CTXWARDEN_TEST_POSTGRES_URL="postgresql://postgres@127.0.0.1:$pgport/postgres"
  else
    echo "with-services: postgres did not start" >&2; tail -5 "$work/initdb.log" "$work/pg.log" >&2 2>/dev/null
  fi
fi

command -v chromium >/dev/null && export CTXWARDEN_TEST_CHROMIUM=$(command -v chromium)

# wait for redis
if [ -n "${CTXWARDEN_TEST_REDIS_URL:-}" ]; then
  for _ in $(seq 50); do
    (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break
    sleep 0.1
  done
fi

"$@"
