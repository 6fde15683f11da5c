package main

// The usage texts of dlock elect and dlock leader; see usage.go.

const usageElect = `Usage:
    dlock elect [flags] KEY -- PROGRAM [ARGS...]

Campaigns in the election KEY and, once elected, runs PROGRAM (without a
shell) while it leads, with DLOCK_KEY, DLOCK_TOKEN (the term's fencing
token), DLOCK_MODE and DLOCK_LEADER_VALUE (--value) in its environment.
When PROGRAM exits, dlock resigns (the next candidate, in arrival order,
leads at once), waits --pause and campaigns again, at the end of the line;
with --once it exits instead, with PROGRAM's status. Run it on every
machine that could do the job: one PROGRAM runs at a time, and another
machine's takes over when it exits, or within the TTL when its machine
dies. ` + "`dlock leader KEY`" + ` shows who leads and the value it published.

PROGRAM is supervised as by dlock run: it runs in a process group of its
own; SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to
it, and all but the last two also end dlock elect once PROGRAM has exited
(with PROGRAM's status; while dlock campaigns, they end it with 128+N);
if leadership is lost while PROGRAM runs, dlock stops the group (SIGTERM,
then SIGKILL after --grace) and campaigns again (with --once: exits 79);
if dlock is killed, a watchdog kills the group. Another leader may start
as soon as leadership is lost: pass $DLOCK_TOKEN to what you write, as a
fencing token.

Flags:
    --backend URL           lock server (DLOCK_BACKEND; default etcd://127.0.0.1:2379)
    --value V               what the leader publishes, e.g. its address, for dlock leader
                            (DLOCK_VALUE; default empty)
    --once                  exit when PROGRAM exits, instead of campaigning again (DLOCK_ONCE)
    --pause D               time between a term and the next campaign (DLOCK_PAUSE; default 1s)
    --ttl D                 lease length, renewed every D/3 (DLOCK_TTL; default 10s;
                            on ZooKeeper the session timeout, and only that)
    --grace D               time between SIGTERM and SIGKILL after leadership is lost;
                            less than the TTL (DLOCK_GRACE; default TTL/3, at most 5s)
    --connect-timeout D     time to reach the server (DLOCK_CONNECT_TIMEOUT; default 5s)
    --metrics-addr HOST:PORT  serve Prometheus metrics at /metrics while dlock runs;
                            port 0 picks a free one (DLOCK_METRICS_ADDR; default: none)
    -v, --verbose           say when dlock campaigns, leads and resigns (DLOCK_VERBOSE)

Flags may also follow KEY; dlock reads none after PROGRAM.

Exit status: PROGRAM's (after --once, or a signal), or dlock's own:
    64 usage   69 server unreachable   78 bad URL or credentials
    79 leadership lost (--once)   80 KEY is another kind   126 cannot execute
    127 not found   128+N signal N while campaigning

Examples:
    $ dlock elect --value "$(hostname):8080" scheduler -- ./scheduler
    $ dlock elect --once --ttl 30s migrate -- ./migrate.sh
    $ dlock leader scheduler
`

const usageLeader = `Usage:
    dlock leader [flags] KEY

Prints who leads the election KEY: the value the leader published, its
fencing token, since when it leads, its host and pid. Exits 0 when
somebody leads and 81 when nobody does (the line then says "no leader").

With --watch, prints the current state and then every change (a new
leader, nobody leading), one line each, as the server reports them, until
interrupted (SIGINT, SIGTERM or SIGHUP: exit 0). A watcher that falls
behind skips to the latest state.

Flags:
    --backend URL           lock server (DLOCK_BACKEND; default etcd://127.0.0.1:2379)
    --watch                 print every change until interrupted (DLOCK_WATCH)
    --json                  print JSON (DLOCK_JSON), with --watch one object per line;
                            see docs/cli.md for the fields
    --connect-timeout D     time to reach the server (DLOCK_CONNECT_TIMEOUT; default 5s)

Exit status: 0 somebody leads (--watch: interrupted)   81 no leader
    64 usage   69 server unreachable   78 bad URL or credentials   80 KEY is another kind

Examples:
    $ dlock leader scheduler
    scheduler: led by build-7 pid 4242 since 14:02:11 (2m3s ago), token 1187, value "build-7:8080"
    $ dlock leader --json scheduler | jq -r .leader.value
    $ dlock leader --watch scheduler
`
