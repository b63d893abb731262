# Throwaway PostgreSQL 15 and Redis on 127.0.0.1, for bin/test and bin/bench (sourced, not run).
#
#   start_throwaway_postgres [extra postgres -c options...]   # exports DATABASE_URL
#   start_throwaway_redis                                      # exports REDIS_URL, CELERY_BROKER_URL
#   stop_throwaway_servers                                     # call from the EXIT trap
#
# Each server gets a free port and its own temporary folder, removed on stop, so two runs
# side by side never collide. Needs: $VENV/bin/python (for free_port), die().
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGDATA_DIR="" PG_STARTED="" REDIS_DIR="" REDIS_PID=""

# PostgreSQL refuses to run as root (initdb: "cannot be run as root").
as_postgres() {
    if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# Any free TCP port on the loopback.
free_port() {
    "$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

postgres_available() {
    [[ -x $PGBIN/pg_ctl ]] && { [[ $(id -u) != 0 ]] || id postgres >/dev/null 2>&1; }
}

start_throwaway_postgres() {
    PGDATA_DIR=$(mktemp -d -t nodewarden-pg.XXXXXX)
    [[ $(id -u) == 0 ]] && chown postgres:postgres "$PGDATA_DIR"
    local port options opt
    port=$(free_port)
    as_postgres "$PGBIN/initdb" -D "$PGDATA_DIR/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
        >"$PGDATA_DIR/initdb.log" 2>&1 || { cat "$PGDATA_DIR/initdb.log" >&2; die "initdb failed"; }
    # The socket goes into our own folder: /var/run/postgresql may not exist.
    options="-p $port -k $PGDATA_DIR -c listen_addresses=127.0.0.1"
    for opt in "$@"; do options+=" -c $opt"; done
    PG_STARTED=1
    as_postgres "$PGBIN/pg_ctl" -D "$PGDATA_DIR/data" -l "$PGDATA_DIR/postgres.log" -w -t 30 -o "$options" \
        start >/dev/null || { tail -n 30 "$PGDATA_DIR/postgres.log" >&2; die "PostgreSQL did not start"; }
    # CREATEDB: pytest-django creates test_nodewarden_gw0, _gw1, ... itself.
    "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
        -c "CREATE ROLE nodewarden LOGIN PASSWORD 'nodewarden' CREATEDB;" \
        -c "CREATE DATABASE nodewarden OWNER nodewarden;"
    export DATABASE_URL="postgresql://nodewarden:nodewarden@127.0.0.1:$port/nodewarden"
}

start_throwaway_redis() {
    REDIS_DIR=$(mktemp -d -t nodewarden-redis.XXXXXX)
    local port
    port=$(free_port)
    # No RDB snapshots, no AOF: nothing outlives the run.
    redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
        --dir "$REDIS_DIR" --logfile "$REDIS_DIR/redis.log" --daemonize no &
    REDIS_PID=$!
    for _ in $(seq 100); do
        [[ $(redis-cli -p "$port" ping 2>/dev/null) == PONG ]] && break
        kill -0 "$REDIS_PID" 2>/dev/null || break
        sleep 0.05
    done
    [[ $(redis-cli -p "$port" ping 2>/dev/null) == PONG ]] \
        || { tail -n 30 "$REDIS_DIR/redis.log" >&2; die "Redis did not start"; }
    export REDIS_URL="redis://127.0.0.1:$port/0"
    export CELERY_BROKER_URL=$REDIS_URL
}

stop_throwaway_servers() {
    if [[ -n $REDIS_PID ]]; then
        kill "$REDIS_PID" 2>/dev/null
        wait "$REDIS_PID" 2>/dev/null
    fi
    if [[ -n $PG_STARTED ]]; then
        # "immediate": no checkpoint, the data is thrown away anyway.
        as_postgres "$PGBIN/pg_ctl" -D "$PGDATA_DIR/data" -m immediate -w stop >/dev/null 2>&1
    fi
    local dir
    for dir in "$PGDATA_DIR" "$REDIS_DIR"; do
        [[ -n $dir ]] && rm -rf "$dir"
    done
    return 0
}
