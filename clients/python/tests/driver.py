"""The Python client driven by the Go tests (clients/internal/clienttest),
which speak to it in lines on stdin and read its replies on stdout:

    acquire NAME KEY TTL_MS WAIT_MS   NAME ok TOKEN REMAINING_MS  (WAIT_MS -1: no limit)
    renew NAME                        NAME ok TOKEN REMAINING_MS
    release NAME                      NAME ok
    valid NAME                        NAME ok true|false
    lock NAME KEY TTL_MS              NAME ok TOKEN, renewed until unlock;
                                      NAME lost CODE CLASS if it ends early
    unlock NAME                       NAME ok
    hold NAME KEY TTL_MS              NAME ok TOKEN; NAME lost CODE CLASS when it ends
    unhold NAME                       NAME ok
    events NAME                       NAME ok KIND,KIND,...: the hold's events, until it has ended
    fence NAME DB                     NAME ok CLOSED, or NAME stale: the example's fenced write

A failed command answers NAME error CODE CLASS. Each command runs in a
thread of its own, so that one waiting does not hold up the others.
"""

import os
import sys
import threading

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))
sys.path.insert(0, os.path.join(here, "..", "examples"))
import dlockgw  # noqa: E402
import close_expired_orders as job  # noqa: E402

client = dlockgw.Client(sys.argv[1])
leases = {}
locks = {}
holds = {}
out = threading.Lock()


def say(*words):
    with out:
        print(*words, flush=True)


def watch(name, lease):
    lease.lost.wait()
    say(name, "lost", lease.error.code, type(lease.error).__name__)


def run(words):
    cmd, name, args = words[0], words[1], words[2:]
    try:
        if cmd == "acquire":
            wait = int(args[2])
            lease = client.acquire(args[0], ttl=int(args[1]) / 1000, wait=None if wait < 0 else wait / 1000)
            leases[name] = lease
            say(name, "ok", lease.token, int(lease.remaining() * 1000))
        elif cmd == "renew":
            lease = leases[name]
            lease.renew()
            say(name, "ok", lease.token, int(lease.remaining() * 1000))
        elif cmd == "release":
            leases[name].release()
            say(name, "ok")
        elif cmd == "valid":
            say(name, "ok", "true" if leases[name].valid() else "false")
        elif cmd == "lock":
            cm = client.lock(args[0], ttl=int(args[1]) / 1000)
            lease = cm.__enter__()
            locks[name] = cm
            leases[name] = lease
            threading.Thread(target=watch, args=(name, lease), daemon=True).start()
            say(name, "ok", lease.token)
        elif cmd == "unlock":
            locks.pop(name).__exit__(None, None, None)
            say(name, "ok")
        elif cmd == "hold":
            h = client.hold(args[0], ttl=int(args[1]) / 1000)
            holds[name] = h
            leases[name] = h.lease
            threading.Thread(target=watch, args=(name, h.lease), daemon=True).start()
            say(name, "ok", h.lease.token)
        elif cmd == "unhold":
            holds.pop(name).close()
            say(name, "ok")
        elif cmd == "events":
            say(name, "ok", ",".join(ev["event"] for ev in holds[name].events(timeout=30)))
        elif cmd == "fence":
            try:
                n = job.close_expired_orders(job.open_db(args[0]), job.KEY, leases[name].token)
                say(name, "ok", n)
            except job.StaleTokenError:
                say(name, "stale")
        else:
            say(name, "error", "unknown_command", cmd)
    except dlockgw.GatewayError as e:
        say(name, "error", e.code, type(e).__name__)
    except dlockgw.WaitTimeoutError as e:
        say(name, "error", "wait_timeout", type(e).__name__)
    except Exception as e:  # noqa: BLE001 - the test reads it instead of waiting
        say(name, "error", "exception", repr(e).replace("\n", " "))


for line in sys.stdin:
    words = line.split()
    if len(words) >= 2:
        threading.Thread(target=run, args=(words,), daemon=True).start()
