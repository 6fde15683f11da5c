package main

// The usage texts are written by hand, with examples; docs/cli.md says the
// same at length. Keep flags, variables and exit codes in step with both.

const usageMain = `dlock: distributed locks from the command line.

Usage:
    dlock run [flags] KEY -- PROGRAM [ARGS...]   run PROGRAM while holding the lock KEY
                                                 (--limit N: one of N permits; --shared: a read lease)
    dlock elect [flags] KEY -- PROGRAM [ARGS...] run PROGRAM while leading the election KEY,
                                                 and campaign again when it exits (--once: exit)
    dlock leader [flags] KEY                     who leads the election KEY (--watch: every change)
    dlock status [flags] KEY                     who holds KEY, who waits for it (--watch: live)
    dlock ls [flags] [PREFIX]                    every held or awaited lock
    dlock revoke [flags] KEY                     end KEY's grants on the server (--holder TOKEN: one)
    dlock serve [flags]                          run a lock server (an embedded etcd)
    dlock gateway [flags]                        serve the locks over HTTP/JSON, for any language
    dlock demo [flags]                           watch a lock fail, and fencing save the day
    dlock version [--json]                       print dlock's version (also dlock --version)
    dlock completion bash|zsh                    print a shell completion script
    dlock help [COMMAND]                         show the usage of a command

Flags may come before or after the arguments (dlock status KEY --json);
after --, nothing is a flag. dlock run stops reading flags at PROGRAM.

Every flag can also be set by an environment variable: --backend by
DLOCK_BACKEND, --no-wait by DLOCK_NO_WAIT, and so on. Flags win.

The lock server is named by --backend (DLOCK_BACKEND), by default
etcd://127.0.0.1:2379, where ` + "`dlock serve`" + ` listens:
    etcd://host:2379[,host2:2379]    etcds://user:password@host:2379
    redis://[user:password@]host:6379[/db]
    zk://host:2181[,host2:2181]      zks://host:port?cacert=ca.pem

Example:
    $ dlock serve &
    $ dlock run nightly-report -- ./make-report.sh --since yesterday
    $ dlock run --limit 3 exports -- ./export.sh     # at most 3 at once
    $ dlock status nightly-report
    $ dlock demo

See docs/cli.md for exit codes and details.
`

const usageRun = `Usage:
    dlock run [flags] KEY -- PROGRAM [ARGS...]

Takes the lock KEY, runs PROGRAM (without a shell) with DLOCK_KEY,
DLOCK_TOKEN and DLOCK_MODE in its environment, releases the lock when
PROGRAM exits and exits with PROGRAM's status (128+N if signal N killed
it). Like flock(1), across machines.

With --limit N, KEY is a semaphore: up to N PROGRAMs run at once, each
under one of its permits. With --shared, KEY is a read-write lock and
PROGRAM holds a read lease, together with any other readers; --exclusive
takes its write lease, alone. Waiters of every kind are served in arrival
order: a reader behind a waiting writer waits. A key is one kind while
anybody holds or waits for it: every user of KEY must give the same
--limit, or all --shared/--exclusive, or none of them (exit 80 otherwise).

PROGRAM runs in a process group of its own, which dlock acts on as a
whole, so that nothing PROGRAM started runs on without the lock: dlock
forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to it; if
the lease is lost while PROGRAM runs (the server stopped answering, or
the key was deleted), dlock sends the group SIGTERM, then SIGKILL after
the grace period, and exits with 79; what PROGRAM leaves running when it
exits is stopped the same way before the lock is released; and if dlock
is killed, a watchdog process kills the group. Another holder may start
as soon as the lease is lost: pass $DLOCK_TOKEN to what you write, as a
fencing token, so that late writes can be rejected.

Flags:
    --backend URL           lock server (DLOCK_BACKEND; default etcd://127.0.0.1:2379)
    --ttl D                 lease length, renewed every D/3 (DLOCK_TTL; default 10s;
                            on ZooKeeper the session timeout, and only that)
    --wait D                give up if the lock is not granted within D (DLOCK_WAIT;
                            default: wait as long as it takes)
    -n, --no-wait           give up at once if the lock is held (exit 75, or -E's N;
                            DLOCK_NO_WAIT)
    -E, --conflict-exit-code N  with --no-wait, exit N if the lock is held, printing
                            nothing (-v prints it); -n -E 0 is cron's quiet skip
                            (DLOCK_CONFLICT_EXIT_CODE; default 75, with an error)
    --hold-at-least D       keep the lock until D after it was taken, even if PROGRAM
                            exits sooner: dlock waits, renewing it, then releases it, so
                            that a --no-wait run fired a little later skips
                            (DLOCK_HOLD_AT_LEAST; default 0)
    --hold-at-most D        release the lock D after it was taken if PROGRAM still runs,
                            and stop PROGRAM as on a lost lease (exit 82), so that a job
                            that hangs cannot keep it for ever (DLOCK_HOLD_AT_MOST;
                            default 0: no limit)
    --lock-delay D          if the lease ends other than by release (it expired, or
                            dlock revoke ended it), grant KEY to nobody else for D, so
                            that PROGRAM has time to notice; at most 1m (DLOCK_LOCK_DELAY;
                            default 0: none)
    --limit N               take one of N permits of the semaphore KEY (DLOCK_LIMIT)
    --shared                take a read lease of the read-write lock KEY (DLOCK_SHARED)
    --exclusive             take the write lease of the read-write lock KEY (DLOCK_EXCLUSIVE)
    --grace D               time between SIGTERM and SIGKILL after the lease is lost;
                            less than the TTL (DLOCK_GRACE; default TTL/3, at most 5s)
    --connect-timeout D     time to reach the server (DLOCK_CONNECT_TIMEOUT; default 5s)
    --metrics-addr HOST:PORT  serve Prometheus metrics at /metrics while dlock runs;
                            port 0 picks a free one (DLOCK_METRICS_ADDR; default: none)
    -v, --verbose           say when dlock waits, acquires and releases (DLOCK_VERBOSE)

Flags may also follow KEY; dlock reads none after PROGRAM, whose flags
are its own. With --, PROGRAM may start with a dash.

Exit status: PROGRAM's, or dlock's own:
    64 usage   69 server unreachable   75 locked (--no-wait)   78 bad URL or credentials
    79 lease lost   80 KEY is another kind   82 --hold-at-most passed   124 --wait passed
    126 cannot execute   127 not found   128+N signal N

Examples:
    $ dlock run nightly-report -- ./make-report.sh
    $ dlock run --no-wait --ttl 30s close-orders -- sh -c 'close-orders --token "$DLOCK_TOKEN"'
    $ dlock run --no-wait --hold-at-least 30s close-orders -- ./close-orders.sh   # from cron on every host
    $ dlock run -n -E 0 --hold-at-most 10m close-orders -- ./close-orders.sh    # quiet skip, hung job stopped
    $ DLOCK_BACKEND=redis://cache:6379 dlock run --wait 1m deploy -- make deploy
    $ dlock run --limit 3 exports -- ./export.sh
    $ dlock run --shared prices -- ./read-prices.sh
    $ dlock run --exclusive prices -- ./update-prices.sh
`

const usageStatus = `Usage:
    dlock status [flags] KEY

Shows what KEY is (a lock, a semaphore of N permits, a read-write lock,
a leader election), who holds it (each holder's mode, host, pid, the command it runs, fencing
token, since when, TTL left) and who waits for it, in the order they will
be served.

With --watch, shows the status again after every change (a grant, a
release, an expiry, a waiter joining or leaving), as the server reports
it, until interrupted (SIGINT, SIGTERM or SIGHUP: exit 0). On a terminal
each state replaces the screen; in a pipe or a file the states follow each
other, a blank line apart (with --json, one object per line). On Redis,
only leader elections send change notices, and no waiter does: see
docs/cli.md.

Flags:
    --backend URL           lock server (DLOCK_BACKEND; default etcd://127.0.0.1:2379)
    --json                  print JSON (DLOCK_JSON); see docs/cli.md for the fields
    --watch                 show the status again after every change, until interrupted (DLOCK_WATCH)
    --connect-timeout D     time to reach the server (DLOCK_CONNECT_TIMEOUT; default 5s)

Examples:
    $ dlock status nightly-report
    nightly-report (lock): held by build-7 pid 4242, 1 waiting

    ROLE      MODE       HOST     PID   TOKEN  SINCE                 TTL LEFT  NOTE
    holder    exclusive  build-7  4242  1187   14:02:11 (2m3s ago)   9.4s      ./make-report.sh
    waiter 1  exclusive  build-9  977   -      14:03:40 (34.5s ago)  9.9s      ./make-report.sh

    $ dlock status exports
    exports (semaphore of 2 permits): 2 of 2 held, 1 waiting
    ...
    $ dlock status --json exports | jq '.holders[].token'
    $ dlock status --watch nightly-report
    $ dlock status --watch --json exports | jq -c '[.holders | length, (.waiters | length)]'
`

const usageRevoke = `Usage:
    dlock revoke [flags] KEY

Ends the grants of KEY on the server: every holder's, or with --holder
only the one whose fencing token is TOKEN (dlock status KEY shows the
tokens). It prints what it revoked. Waiters keep their places and are
granted as after a release, once the revoked leases' lock-delays (dlock
run --lock-delay) have passed.

A revoke does NOT stop the holder's process: its lease learns of the
revoke at its next renewal (within a third of its TTL; dlock run then
stops PROGRAM and exits 79), and until then it may still be working
beside the next holder. The next holder's fencing token is above the
revoked one, so stores that check $DLOCK_TOKEN refuse the revoked
holder's late writes; a lock-delay gives it time to stop first.

Flags:
    --backend URL           lock server (DLOCK_BACKEND; default etcd://127.0.0.1:2379)
    --holder TOKEN          revoke only the holder with this fencing token; exit 1,
                            revoking nothing, if no holder has it (DLOCK_HOLDER)
    --json                  print the revoked holders as a JSON list (DLOCK_JSON)
    --connect-timeout D     time to reach the server (DLOCK_CONNECT_TIMEOUT; default 5s)

Exit status: 0 revoked (or nobody held KEY), 1 no holder has --holder's
token, or the backend cannot revoke; 64 usage, 69 server unreachable,
78 bad URL or credentials.

Examples:
    $ dlock revoke nightly-report
    revoked nightly-report's holder build-7 pid 4242 (token 1187) running "./make-report.sh"
    $ dlock revoke --holder 1187 exports
`

const usageList = `Usage:
    dlock ls [flags] [PREFIX]

Lists the keys starting with PREFIX (all, without it) that are held or
waited for: kind, number of holders and waiters, and the holder granted
first (for a lock, its holder): token, since when, TTL left.

Flags:
    --backend URL           lock server (DLOCK_BACKEND; default etcd://127.0.0.1:2379)
    --json                  print JSON (DLOCK_JSON), a list of what status --json prints
    --connect-timeout D     time to reach the server (DLOCK_CONNECT_TIMEOUT; default 5s)

Examples:
    $ dlock ls
    $ dlock ls --json reports/
`

const usageServe = `Usage:
    dlock serve [flags]

Runs a single-node etcd inside dlock, for machines that have no etcd,
Redis or ZooKeeper: the other commands use it by default. It listens on
loopback unless told otherwise, has no TLS and no authentication, and
stops on SIGINT or SIGTERM. It prints its URL on stdout.

Flags:
    --listen HOST:PORT      client address (DLOCK_LISTEN; default 127.0.0.1:2379;
                            port 0 picks a free one, with a throwaway data dir)
    --data-dir DIR          etcd's data (DLOCK_DATA_DIR; default: a directory per
                            address under the user cache dir, e.g. ~/.cache/dlock/)
    --log-level LEVEL       etcd's log level: debug, info, warn, error (DLOCK_LOG_LEVEL;
                            default error)
    --metrics-addr HOST:PORT  serve etcd's Prometheus metrics at /metrics; port 0
                            picks a free one (DLOCK_METRICS_ADDR; default: none)

Examples:
    $ dlock serve &
    $ dlock serve --listen 127.0.0.1:0     # prints etcd://127.0.0.1:PORT
`

const usageGateway = `Usage:
    dlock gateway [flags]

Serves the locks, semaphores, read-write locks and elections of a backend
over HTTP/JSON, so that programs in any language take them with dlock's
guarantees: explicit leases that the client renews within their TTL,
long polls that keep their place in the queue, and streaming holds that
last as long as their response stays open. The API is described in
docs/gateway.md and served at /openapi.yaml. Beyond loopback it needs
TLS (--tls-cert, --tls-key) and an auth method: bearer tokens from a file
(--auth-tokens, read again on SIGHUP), client certificates
(--tls-client-ca), or both. It stops on SIGINT or SIGTERM,
releasing its leases, and prints its URL on stdout. Its dashboard, at
that URL (printed on stderr too), shows the keys live: holders with their
time left, waiters in order, semaphore usage, election leaders.

Flags:
    --backend URL           lock server (DLOCK_BACKEND; default etcd://127.0.0.1:2379)
    --connect-timeout D     time allowed to reach it (DLOCK_CONNECT_TIMEOUT; default 5s)
    --listen HOST:PORT      address to serve on (DLOCK_LISTEN; default
                            127.0.0.1:8420; port 0 picks a free one)
    --tls-cert FILE         serve HTTPS with this PEM certificate (DLOCK_TLS_CERT)
    --tls-key FILE          and its PEM private key (DLOCK_TLS_KEY)
    --tls-client-ca FILE    require client certificates of these PEM CAs
                            (DLOCK_TLS_CLIENT_CA)
    --auth-tokens FILE      require a bearer token of this file, lines
                            TOKEN NAME PERMISSION... with lock:PREFIX,
                            read:PREFIX or admin (DLOCK_AUTH_TOKENS; mode 600)
    --rate-limit N          requests a second per principal (DLOCK_RATE_LIMIT;
                            default 0: none)
    --max-streams N         streams open at once per principal
                            (DLOCK_MAX_STREAMS; default 0: none)
    --lease-key-file FILE   sign lease ids with the secret in this file
                            (DLOCK_LEASE_KEY_FILE; 32 bytes or more; mode 600):
                            instances given the same file renew and release
                            each other's leases on Redis and etcd (an etcd
                            URL gets lease_per_grant=true unless it says
                            otherwise)
    --max-leases N          leases held at once, waits included (DLOCK_MAX_LEASES;
                            default 10000)
    --max-waiters N         long polls, waiting holds, tickets and election
                            observers at once (DLOCK_MAX_WAITERS; default 1000)

Examples:
    $ dlock gateway --backend redis://localhost:6379/0 &
    $ curl -s -d '{"key":"orders","ttl_ms":10000}' http://127.0.0.1:8420/v1/acquire
    $ curl -s -X POST http://127.0.0.1:8420/v1/leases/LEASE_ID/renew
    $ curl -s -X DELETE http://127.0.0.1:8420/v1/leases/LEASE_ID
    $ curl -sN -d '{"key":"orders","wait_ms":30000}' http://127.0.0.1:8420/v1/hold
    $ dlock gateway --listen 0.0.0.0:8443 --tls-cert gw.pem --tls-key gw-key.pem \
          --auth-tokens /etc/dlock/tokens
    $ curl -s --cacert ca.pem -H "Authorization: Bearer $TOKEN" \
          -d '{"key":"orders/42"}' https://gw.example.com:8443/v1/acquire
`

const usageDemo = `Usage:
    dlock demo [flags]

Plays the seeds' scenario: worker processes run a job that closes expired
orders, one at a time under the lock "order", against a shared ledger that
rejects writes carrying a stale fencing token (or, with --store, in a
SQLite or PostgreSQL database that rejects them). Midway, dlock kills one
holder (SIGKILL) and freezes another (SIGSTOP) for longer than its TTL,
then resumes it: it wakes up believing it still holds the lock and
writes. Then a verdict, computed from what the ledger saw: jobs done,
overlapping critical sections, stale writes rejected, time from the kill
to the next grant, hand-off latency. Exits 0 when no order was closed
twice, 1 otherwise.

By default it starts its own etcd: no setup needed.

Flags:
    --backend URL           use this lock server instead (DLOCK_BACKEND), e.g. redis://localhost:6379
    --workers N             worker processes, at least 3 (DLOCK_WORKERS; default 4)
    --jobs N                orders to close, at least 3 (DLOCK_JOBS; default 6)
    --ttl D                 lease length, 1s to 1m (DLOCK_TTL; default 2s)
    --job-time D            how long one job works (DLOCK_JOB_TIME; default 400ms)
    --no-fencing            the ledger accepts stale tokens: see the damage (DLOCK_NO_FENCING)
    --store S               where the orders are closed (DLOCK_STORE): memory (default, the
                            ledger, fenced by httpfence), sqlite[:PATH] (a new SQLite
                            database, default a temporary file, fenced by sqlfence) or
                            postgres://… (a PostgreSQL database you give: the demo creates
                            tables dlock_demo_orders, dlock_demo_refunds, dlock_demo_fences,
                            refuses to run if one exists and holds rows, and drops them at
                            the end)
    --keep-tables           with postgres://…: keep the demo's tables at the end, to look at
                            (DLOCK_KEEP_TABLES)
    --gateway               workers in Python and Java, taking the lock through a gateway
                            the demo serves over the backend (DLOCK_GATEWAY); needs
                            python3 and a JDK (javac, java); with --store memory only
    --json                  print the verdict as JSON on stdout, progress on stderr (DLOCK_JSON)
    --timeout D             give up after D (DLOCK_TIMEOUT; default 2m)

Examples:
    $ dlock demo
    $ go -C cmd/dlock run . demo         # from a clone of dlock, without installing
    $ dlock demo --no-fencing
    $ dlock demo --gateway                  # Python and Java workers through the gateway
    $ dlock demo --store sqlite:orders.db   # then: sqlite3 orders.db 'SELECT * FROM dlock_demo_refunds'
    $ PGPASSWORD=… dlock demo --store 'postgres://me@db.example:5432/scratch?search_path=demo'
    $ dlock demo --backend redis://localhost:6379 --workers 6 --jobs 12
`

const usageVersion = `Usage:
    dlock version [--json]
    dlock --version

Prints dlock's version: the module version (` + "`(devel)`" + ` when built from a
clone), the commit and whether the tree had changes (when built from a
clone with Git), and the Go version and platform it was built with.

Flags:
    --json                  print JSON (DLOCK_JSON): version, module, revision,
                            modified, time, go, platform

Examples:
    $ dlock version
    $ dlock version --json | jq -r .revision
`

const usageCompletion = `Usage:
    dlock completion bash|zsh

Prints a script that makes the shell complete dlock's commands and flags.

Examples:
    $ source <(dlock completion bash)             # this bash; for all: put
    $ dlock completion bash > ~/.local/share/bash-completion/completions/dlock
    $ dlock completion zsh > "${fpath[1]}/_dlock"  # then restart zsh
`

const usageHelp = `Usage:
    dlock help [COMMAND]

Shows the usage of COMMAND, or of dlock.

Examples:
    $ dlock help run
`

// usageOf returns the usage text of a visible command.
func usageOf(name string) (string, bool) {
	cmd, ok := lookupCommand(name)
	if !ok || cmd.hidden {
		return "", false
	}
	return cmd.usage, true
}
