"""One worker of `dlock demo --gateway`, in Python: the demo's job (close the
next expired order, one job at a time under the lock "order") through the
lock gateway with the dlockgw client, each ledger call fenced by the lease's
token. It reports to the demo what RunWorker reports in Go (waiting,
acquired, releasing, released or lost, closed or rejected, finished).

    python3 demo_worker.py GATEWAY_URL LEDGER_URL NAME JOB_TIME_MS

On purpose it does not check the lease before it writes: no check closes
the gap between checking and writing, and the demo shows that the ledger's
token check is what stops a holder paused past its TTL.
"""

import datetime
import json
import sys
import time
import urllib.error
import urllib.request

import dlockgw

KEY = "order"            # the lock every worker takes
FENCE = "close-orders"   # the ledger's fence (httpfence)


class Stale(Exception):
    """The ledger refused the token: a newer holder has written."""


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


class Worker:
    def __init__(self, gateway, ledger, name, job_time):
        self.client = dlockgw.Client(gateway)
        self.ledger = ledger.rstrip("/")
        self.name = name
        self.job_time = job_time

    def post(self, path, body, token=None):
        """POST body to the ledger; the decoded answer. Fenced with token."""
        req = urllib.request.Request(self.ledger + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        if token is not None:
            req.add_header("Dlock-Fence", FENCE)
            req.add_header("Dlock-Token", str(token))
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            if e.code == 409 and e.headers.get("Dlock-Refused") == "stale":
                raise Stale("fence %s: token %d is below %s" % (FENCE, token, e.headers.get("Dlock-Recorded")))
            raise RuntimeError("ledger %s: %d %s" % (path, e.code, e.read()[:200]))
        return json.loads(raw) if raw.strip() else {}

    def event(self, kind, token=None, since=None, detail=None):
        """Tell the demo; a lost report only costs a progress line."""
        e = {"worker": self.name, "kind": kind, "at": now()}
        if token is not None:
            e["token"] = token
        if since is not None:
            e["since"] = since
        if detail is not None:
            e["detail"] = detail
        try:
            self.post("/event", e)
        except (OSError, RuntimeError):
            pass

    def job(self, token):
        """One job under the lock; True when no expired order was left."""
        try:
            order = self.post("/read", {"worker": self.name}, token).get("order", 0)
            if order == 0:
                return True
            time.sleep(self.job_time / 2)  # working on the order
            self.post("/step", {"worker": self.name, "order": order}, token)
            time.sleep(self.job_time / 2)
            res = self.post("/close", {"worker": self.name, "order": order}, token)
            if not res.get("accepted"):
                raise RuntimeError("ledger /close: %s" % res.get("reason"))
            self.event("closed", token, detail=str(order))
        except Stale as e:
            self.event("rejected", token, detail=str(e))
        return False

    def run(self):
        while True:
            self.event("waiting")
            since = None
            try:
                # Renewed in the background every TTL/3; leaving the block
                # releases it, and raises if the lease had ended first.
                with self.client.lock(KEY, note="dlock demo worker %s (Python)" % self.name) as lease:
                    token = lease.token
                    self.event("acquired", token)
                    finished = self.job(token)
                    # Announced before the release, so that the demo hears
                    # of it before the next holder's grant.
                    self.event("releasing", token)
                    since = now()
            except dlockgw.LeaseEndedError as e:
                if since is None:
                    raise
                self.event("lost", token, since=since, detail=str(e))
            else:
                self.event("released", token, since=since)
            if finished:
                self.event("finished")
                return


def main(argv):
    if len(argv) != 5:
        print("usage: demo_worker.py GATEWAY_URL LEDGER_URL NAME JOB_TIME_MS (started by dlock demo --gateway)", file=sys.stderr)
        return 2
    try:
        Worker(argv[1], argv[2], argv[3], int(argv[4]) / 1000.0).run()
    except Exception as e:  # the demo prints it as this worker's failure
        print("error: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
