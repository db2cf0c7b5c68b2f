#!/usr/bin/env bash
# Run a command with the services the tests need: Redis, PostgreSQL and Chromium.
#
#   scripts/with-services.sh .venv/bin/pytest -q tests/store
#
# Installs them with apt-get when missing and running as root (as in CI; system services
# are kept from starting during the install), starts private instances on free loopback
# ports under a temporary directory, exports
#   CTXWARDEN_TEST_REDIS_URL  CTXWARDEN_TEST_POSTGRES_URL  CTXWARDEN_TEST_CHROMIUM
# runs the command, stops every process it started (also on Ctrl-C or TERM) and exits
# with the command's status. A service that cannot be had is reported on stderr and its
# variable left unset: the tests that need it then skip, or fail when
# CTXWARDEN_REQUIRE_SERVICES=1 (set by .ci/run).
set -u
work=$(mktemp -d /tmp/ctxwarden-services.XXXXXX)
chmod 755 "$work"
redis_pid=""
pgbin=""
pg_started=""
runas=()

log() { echo "with-services: $*" >&2; }

cleanup() {
  if [ -n "$redis_pid" ]; then
    kill "$redis_pid" 2>/dev/null
    wait "$redis_pid" 2>/dev/null
  fi
  if [ -n "$pg_started" ]; then
    "${runas[@]}" "$pgbin/pg_ctl" -D "$work/pg" -m fast -w stop >/dev/null 2>&1 \
      || log "postgres did not stop cleanly (see $work/pgrun/pg.log)"
  fi
  rm -rf "$work"
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {  # a random loopback port nobody listens on (base, span)
  local p
  for _ in $(seq 100); do
    p=$(($1 + RANDOM % $2))
    port_in_use "$p" || { echo "$p"; return 0; }
  done
  return 1
}

# --- install what is missing -------------------------------------------------------
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null || need+=(chromium fonts-liberation)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing ${need[*]}"
    # Keep the packages' init scripts from starting system-wide daemons we would leak.
    policy=/usr/sbin/policy-rc.d
    own_policy=""
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=1
    fi
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends "${need[@]}") >"$work/apt.log" 2>&1 \
      || { log "apt-get failed:"; tail -5 "$work/apt.log" >&2; }
    [ -n "$own_policy" ] && rm -f "$policy"
  else
    log "missing ${need[*]} (install them, or run as root with apt-get)"
  fi
fi

# --- Redis ---------------------------------------------------------------------------
if command -v redis-server >/dev/null && port=$(free_port 20000 20000); then
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize no --dir "$work" >"$work/redis.log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 100); do
    if redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then
      export CTXWARDEN_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
      break
    fi
    kill -0 "$redis_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "${CTXWARDEN_TEST_REDIS_URL:-}" ] || { log "redis did not start"; tail -5 "$work/redis.log" >&2; }
fi

# --- PostgreSQL ------------------------------------------------------------------------
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -n "$pgbin" ] && pgport=$(free_port 40000 20000); then
  if [ "$(id -u)" = 0 ]; then  # postgres refuses to run as root
    id ctxwarden_pg >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin ctxwarden_pg
    runas=(runuser -u ctxwarden_pg --)
  fi
  mkdir -p "$work/pg" "$work/pgrun"
  [ "$(id -u)" = 0 ] && chown ctxwarden_pg "$work/pg" "$work/pgrun"
  if "${runas[@]}" "$pgbin/initdb" -D "$work/pg" -U postgres -A trust >"$work/initdb.log" 2>&1; then
    pg_started=1  # from here on cleanup stops it, even if start fails half way
    if "${runas[@]}" "$pgbin/pg_ctl" -D "$work/pg" -l "$work/pgrun/pg.log" -w -t 60 start \
      -o "-p $pgport -k $work/pgrun -c listen_addresses=127.0.0.1 -c fsync=off \
-c synchronous_commit=off -c full_page_writes=off" >/dev/null 2>&1; then
      export CTXWARDEN_TEST_POSTGRES_URL="postgresql://postgres@127.0.0.1:$pgport/postgres"
    else
      log "postgres did not start"; tail -5 "$work/pgrun/pg.log" >&2 2>/dev/null
    fi
  else
    log "initdb failed"; tail -5 "$work/initdb.log" >&2
  fi
fi

if command -v chromium >/dev/null; then
  CTXWARDEN_TEST_CHROMIUM=$(command -v chromium)
  export CTXWARDEN_TEST_CHROMIUM
fi

"$@"
status=$?
exit "$status"
