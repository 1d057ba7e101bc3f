#!/usr/bin/env bash
# memory-db entrypoint (plain containers; CloudNativePG does not use it).
#
# On first start (empty $PGDATA): initdb, shared_preload_libraries=age, listen on all addresses with
# scram-sha-256 for TCP clients, create $POSTGRES_DB owned by $POSTGRES_USER, create the extensions
# age, vector, pg_trgm and btree_gin in template1 (so every later database has them) and in $POSTGRES_DB, then run
# /docker-entrypoint-initdb.d/*.sql and *.sh. Then (every start) postgres runs in the foreground; extra
# arguments are passed to it (e.g. `-c shared_buffers=1GB`).
#
# Environment: POSTGRES_PASSWORD (required unless POSTGRES_HOST_AUTH_METHOD=trust), POSTGRES_USER
# (default postgres, a superuser), POSTGRES_DB (default $POSTGRES_USER), PGDATA.
set -euo pipefail

PGDATA=${PGDATA:-/var/lib/postgresql/data}
POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
POSTGRES_HOST_AUTH_METHOD=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
export PGDATA

log() { printf 'memory-db: %s\n' "$*" >&2; }

if [ "$(id -u)" = 0 ]; then
  # Started as root (e.g. `--user 0`): fix the ownership of the data directory, then drop privileges.
  install -d -o postgres -g postgres -m 0700 "$PGDATA"
  install -d -o postgres -g postgres -m 2775 /var/run/postgresql
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

initialise() {
  if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
    log "set POSTGRES_PASSWORD (or POSTGRES_HOST_AUTH_METHOD=trust, for throw-away local use only)"
    exit 1
  fi
  log "initialising $PGDATA"
  local pwfile
  pwfile=$(mktemp)
  printf '%s\n' "${POSTGRES_PASSWORD:-}" >"$pwfile"
  initdb -D "$PGDATA" -U "$POSTGRES_USER" -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host="$POSTGRES_HOST_AUTH_METHOD" --pwfile="$pwfile" >/dev/null
  rm -f "$pwfile"
  cat >>"$PGDATA/postgresql.conf" <<CONF

# memory-db
listen_addresses = '*'
shared_preload_libraries = 'age'
max_connections = 200
CONF
  printf 'host all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"

  # Socket only while initialising, so that no client sees a half-initialised database.
  pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
  local psql=(psql -X -q -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -h /var/run/postgresql)
  if [ "$POSTGRES_DB" != postgres ]; then
    "${psql[@]}" -d postgres -v db="$POSTGRES_DB" -v owner="$POSTGRES_USER" <<'SQL'
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'owner')
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db') \gexec
SQL
  fi
  local db ext
  for db in template1 "$POSTGRES_DB"; do
    for ext in age vector pg_trgm btree_gin; do
      # One statement per call: a failure must not undo the extensions created before it.
      "${psql[@]}" -d "$db" -c "CREATE EXTENSION IF NOT EXISTS $ext"
    done
  done
  local f
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sql) log "running $f"; "${psql[@]}" -d "$POSTGRES_DB" -f "$f" ;;
      *.sh) log "running $f"; bash "$f" ;;
      *) ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  log "initialised: database $POSTGRES_DB with age, vector, pg_trgm, btree_gin"
}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  initialise
fi
exec postgres -D "$PGDATA" "$@"
