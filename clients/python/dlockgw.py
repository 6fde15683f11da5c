"""A client of dlock's lock gateway, standard library only (Python 3.9+).

The gateway (``dlock gateway``, docs/gateway.md) serves dlock's fair, fenced
locks, semaphores, read-write locks and elections over HTTP/JSON::

    import dlockgw

    client = dlockgw.Client("http://127.0.0.1:8420")
    with client.lock("jobs/close-expired-orders", ttl=10) as lease:
        close_expired_orders(token=lease.token)   # fence every write
        if lease.lost.is_set():
            ...  # the lease ended: stop, the work may overlap another holder's

Safety: a lease can end at any moment (a pause longer than its TTL, a
network cut). ``Lease.valid()`` is false from the lease's local deadline on,
which is never later than the gateway's; but a process paused between that
check and its write still writes late. Pass ``Lease.token`` to the store you
write to and let it refuse a lower token than it has seen (docs/fencing.md).

Errors: every error reply of the gateway raises the subclass of
:class:`GatewayError` named after its code (``locked`` raises
:class:`LockedError`, ``lease_lost`` :class:`LeaseLostError`, ...). A wait
that ends ungranted raises :class:`WaitTimeoutError`; a network failure
raises the ``OSError`` of ``http.client``.

Leases and tickets live in the gateway instance that granted them: a client
behind a load balancer must reach the same instance (``Lease.instance``).
"""

import collections
import http.client
import json
import socket
import threading
import time
import urllib.parse

__all__ = [
    "Client", "Lease", "Hold", "Error", "GatewayError", "WaitTimeoutError",
    "LeaseEndedError", "DeadlinePassedError",
]

#: The longest wait one long poll asks for; the gateway caps it too (30 s by
#: default), and the client polls again with its ticket until its own wait ends.
MAX_POLL = 30.0

#: How many unread events a Hold keeps (a keep-alive comes every few seconds).
MAX_EVENTS = 1000

#: How much longer than the poll's wait a request may take before its socket
#: times out: the gateway's answer and the network's delays.
REQUEST_SLACK = 10.0


class Error(Exception):
    """The base of every error this module raises itself."""


class GatewayError(Error):
    """An error reply of the gateway: ``status`` (HTTP), ``code`` (stable) and
    ``message`` (for people). Catch a subclass to branch on the code."""

    code = ""

    def __init__(self, status, code, message):
        super().__init__("%s (%d %s)" % (message, status, code))
        self.status = status
        self.code = code
        self.message = message


class WaitTimeoutError(Error, TimeoutError):
    """A wait for a lease ended ungranted; its place in the queue was given up."""


class LeaseEndedError(GatewayError):
    """The lease is no longer held: expired, released, lost or past its
    deadline. ``Lease.error`` holds the one that ended a lease."""


class DeadlinePassedError(LeaseEndedError):
    """The lease's local deadline passed before a renewal succeeded: it may
    have been granted to another client."""

    code = "deadline_passed"


def _class_name(code):
    return "".join(p.capitalize() for p in code.split("_")) + "Error"


# One class per error code of the gateway (gateway/openapi.yaml). The 410s
# derive from LeaseEndedError.
_ENDED = {"lease_expired", "lease_released", "lease_lost"}
_CODES = [
    "malformed_json", "invalid_request", "invalid_key", "body_too_large",
    "not_found", "method_not_allowed", "lease_not_found", "lease_expired",
    "lease_released", "lease_lost", "lease_streamed", "ticket_not_found",
    "ticket_mismatch", "ticket_in_use", "locked", "no_leader",
    "kind_mismatch", "too_many_leases", "too_many_waiters", "unsupported",
    "backend_unavailable", "gateway_closing", "internal",
]
_ERRORS = {}
for _code in _CODES:
    _base = LeaseEndedError if _code in _ENDED else GatewayError
    _cls = type(_class_name(_code), (_base,), {
        "code": _code,
        "__doc__": "The gateway's error ``%s``." % _code,
        "__module__": __name__,
    })
    _ERRORS[_code] = _cls
    globals()[_cls.__name__] = _cls
    __all__.append(_cls.__name__)
del _code, _base, _cls


def _error(status, body):
    """The exception for an error reply."""
    try:
        e = json.loads(body)["error"]
        code, message = e["code"], e["message"]
    except (ValueError, KeyError, TypeError):
        code, message = "internal", "status %d: %r" % (status, body[:200])
    return _ERRORS.get(code, GatewayError)(status, code, message)


class Lease:
    """A lease granted by the gateway.

    ``token`` is the fencing token (an int, from ``token_str``), ``lease_id``
    the capability to renew and release it. ``deadline`` is a
    ``time.monotonic()`` reading: the moment the request that granted or last
    renewed the lease was sent, plus the ``valid_for_ms`` of its reply, which
    the gateway counts from its receipt; so the deadline is never later than
    the gateway's. ``lost`` is a ``threading.Event`` set when the lease ends
    other than by :meth:`release`, and ``error`` then says why.

    A Lease is safe for use from several threads.
    """

    def __init__(self, client, reply, sent, instance):
        self._client = client
        self._mu = threading.Lock()
        self.lease_id = reply["lease_id"]
        self.key = reply["key"]
        self.kind = reply["kind"]
        self.mode = reply["mode"]
        self.limit = reply.get("limit")
        self.token = int(reply["token_str"])
        self.ttl = reply["ttl_ms"] / 1000.0
        self.streamed = bool(reply.get("streamed"))
        self.instance = instance
        self.deadline = sent + reply["valid_for_ms"] / 1000.0
        self.lost = threading.Event()
        self.error = None
        self._released = False

    def __repr__(self):
        return "<Lease %s token=%d remaining=%.3fs>" % (self.key, self.token, self.remaining())

    def valid(self):
        """Whether the lease is held: not ended, and its deadline not passed."""
        with self._mu:
            return self.error is None and not self._released and time.monotonic() < self.deadline

    def remaining(self):
        """Seconds until the deadline; 0 once the lease is no longer valid."""
        with self._mu:
            if self.error is not None or self._released:
                return 0.0
            return max(0.0, self.deadline - time.monotonic())

    def renew(self):
        """Keep the lease for another TTL from this request's receipt.

        Raises the lease's error once it has ended, LeaseExpiredError,
        LeaseLostError or LeaseReleasedError when the gateway says it has (and
        sets ``lost``), LeaseStreamedError for a hold's lease (its stream keeps
        it), GatewayError or OSError otherwise."""
        with self._mu:
            if self.error is not None:
                raise self.error
        sent = time.monotonic()
        try:
            reply = self._client._call("POST", "/v1/leases/%s/renew" % self.lease_id)[0]
        except LeaseEndedError as e:
            self._end(e)
            raise
        with self._mu:
            self.deadline = sent + reply["valid_for_ms"] / 1000.0
            self.ttl = reply["ttl_ms"] / 1000.0

    def release(self):
        """Release the lease: the next waiter is granted.

        Raises LeaseLostError if the lease had been lost before (work done
        under it may have overlapped with another holder's), LeaseExpiredError
        if it was not renewed in time, LeaseReleasedError for a second release,
        BackendUnavailableError when the release is not confirmed (the backend
        frees the key when the TTL runs out)."""
        with self._mu:
            self._released = True
        try:
            self._client._call("DELETE", "/v1/leases/%s" % self.lease_id)
        except LeaseEndedError as e:
            if not isinstance(e, LeaseReleasedError):
                self._end(e)
            raise

    def _end(self, err):
        with self._mu:
            if self.error is None:
                self.error = err
        self.lost.set()

    def _update(self, deadline):
        with self._mu:
            self.deadline = deadline


class _Renewer(threading.Thread):
    """Renews a lease every TTL/3 until stopped or the lease ends. A renewal
    that fails for a passing reason (the gateway unreachable, 503) is tried
    again, sooner, until the deadline: then the lease is lost."""

    def __init__(self, lease):
        super().__init__(name="dlockgw-renew-%s" % lease.key, daemon=True)
        self.lease = lease
        self.stop = threading.Event()

    def run(self):
        lease = self.lease
        interval = lease.ttl / 3
        while not self.stop.wait(interval):
            try:
                lease.renew()
                interval = lease.ttl / 3
                continue
            except LeaseEndedError:
                return  # renew set lost
            except (GatewayError, OSError) as e:
                err = e
            left = lease.deadline - time.monotonic()
            if left <= 0:
                lease._end(DeadlinePassedError(0, "deadline_passed",
                                               "no renewal succeeded before the lease's deadline: %s" % err))
                return
            interval = min(lease.ttl / 10, left / 2)


class _Locked:
    """The context manager of :meth:`Client.lock`."""

    def __init__(self, client, key, kw):
        self._client, self._key, self._kw = client, key, kw
        self._lease = None
        self._renewer = None

    def __enter__(self):
        self._lease = self._client.acquire(self._key, **self._kw)
        self._renewer = _Renewer(self._lease)
        self._renewer.start()
        return self._lease

    def __exit__(self, exc_type, exc, tb):
        self._renewer.stop.set()
        self._renewer.join()
        lease = self._lease
        try:
            lease.release()
        except (GatewayError, OSError) as e:
            if exc_type is None:
                raise (lease.error or e)
            return False
        if exc_type is None and lease.error is not None:
            raise lease.error  # released, but the deadline had passed first
        return False


class Hold:
    """A streaming hold: the lease is held while the response stays open.

    ``lease`` is the granted lease; its deadline moves with each keep-alive
    (the keep-alive's validity counted from when it arrived, an estimate:
    the gateway counts it from when it sent it). Iterate :meth:`events` for
    the events as dicts (``granted``, ``keepalive``, then ``lost`` or
    ``released``), or wait on ``lease.lost``. :meth:`close` (or leaving the
    ``with`` block) closes the stream, which releases the lease.
    """

    def __init__(self, conn, resp, lease, granted):
        self._conn, self._resp = conn, resp
        self.lease = lease
        # Keep-alives nobody reads must not pile up: the oldest events go first.
        self._events = collections.deque([granted], maxlen=MAX_EVENTS)
        self._cond = threading.Condition()
        self._done = False
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="dlockgw-hold-%s" % lease.key, daemon=True)
        self._reader.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _read(self):
        end = None
        try:
            while end is None:
                line = self._resp.readline()
                if not line:
                    break
                arrived = time.monotonic()
                ev = json.loads(line)
                kind = ev.get("event")
                if kind == "keepalive":
                    self.lease._update(arrived + ev["valid_for_ms"] / 1000.0)
                elif kind == "lost":
                    code = ev.get("code", "lease_lost")
                    end = _ERRORS.get(code, LeaseLostError)(0, code, ev.get("message", "lost"))
                elif kind == "released":
                    end = LeaseReleasedError(0, "lease_released", "released by id")
                with self._cond:
                    self._events.append(ev)
                    self._cond.notify_all()
        except (OSError, ValueError, http.client.HTTPException) as e:
            if end is None and not self._closed:
                end = LeaseLostError(0, "lease_lost", "the stream broke: %s" % e)
        if end is None and not self._closed:
            end = LeaseLostError(0, "lease_lost", "the stream ended without an end event")
        if end is not None:
            self.lease._end(end)
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def events(self, timeout=None):
        """Yield the stream's events as dicts, the granted event first, until
        it ends or is closed, or no event arrives within ``timeout`` seconds.
        Each event is yielded once, to whichever caller takes it; of the
        events nobody takes, the newest MAX_EVENTS are kept."""
        while True:
            with self._cond:
                if not self._cond.wait_for(lambda: self._events or self._done, timeout):
                    return
                if not self._events:
                    return
                ev = self._events.popleft()
            yield ev

    def close(self):
        """Close the stream: the gateway releases the lease."""
        if self._closed:
            return
        self._closed = True
        try:
            # Shutting the socket down ends the reader's blocked read.
            self._conn.sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError):
            pass
        self._conn.close()
        self._reader.join()


class Client:
    """A client of the gateway at ``base_url`` (``http://host:port``).

    ``timeout`` bounds each request that does not wait in a queue, in
    seconds. A Client is safe for use from several threads: each request
    has a connection of its own.
    """

    def __init__(self, base_url, timeout=10.0):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("dlockgw: base_url %r: want http://host:port or https://host:port" % base_url)
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path.rstrip("/")
        self.timeout = timeout

    def _conn(self, timeout):
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=timeout)

    def _send(self, method, path, body, timeout):
        conn = self._conn(timeout)
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, self._prefix + path, body=data, headers=headers)
        return conn, conn.getresponse()

    def _call(self, method, path, body=None, timeout=None):
        """Send a request; return the decoded 200 or 202 reply, its status and
        the instance header, or raise the reply's error."""
        conn, resp = self._send(method, path, body, self.timeout if timeout is None else timeout)
        try:
            raw = resp.read()
        finally:
            conn.close()
        if resp.status >= 400:
            raise _error(resp.status, raw.decode("utf-8", "replace"))
        return json.loads(raw), resp.status, resp.getheader("Dlock-Gateway-Instance")

    @staticmethod
    def _request(key, kind, ttl, limit, mode, value, note):
        body = {"key": key}
        if kind is not None:
            body["kind"] = kind
        if ttl is not None:
            body["ttl_ms"] = int(round(ttl * 1000))
        if limit is not None:
            body["limit"] = limit
        if mode is not None:
            body["mode"] = mode
        if value is not None:
            body["value"] = value
        if note is not None:
            body["metadata"] = {"note": note}
        return body

    def _poll(self, path, body, wait, first):
        """Poll until granted or ``wait`` seconds have passed, presenting the
        ticket of each ungranted poll to the next so that the waiter keeps
        its place in the queue. ``first(conn, resp, sent)`` reads a grant."""
        end = None if wait is None else time.monotonic() + wait
        ticket = None
        while True:
            left = MAX_POLL if end is None else max(0.0, end - time.monotonic())
            req = dict(body)
            # At least 1 ms: a wait_ms of 0 is one attempt, answered 409 rather than 202.
            req["wait_ms"] = max(1, int(min(left, MAX_POLL) * 1000))
            if ticket is not None:
                req["ticket"] = ticket
            sent = time.monotonic()
            conn, resp = self._send("POST", path, req, req["wait_ms"] / 1000.0 + REQUEST_SLACK)
            if resp.status == 200:
                return first(conn, resp, sent)
            try:
                raw = resp.read()
            finally:
                conn.close()
            if resp.status >= 400:
                raise _error(resp.status, raw.decode("utf-8", "replace"))
            ticket = json.loads(raw)["ticket"]  # 202: not granted yet
            if end is not None and time.monotonic() >= end:
                self._cancel(ticket)
                raise WaitTimeoutError("dlockgw: key %r not granted within %gs" % (body["key"], wait))

    def _cancel(self, ticket):
        """Give the ticket's place up at once; it expires anyway."""
        try:
            self._call("DELETE", "/v1/tickets/%s" % ticket)
        except (GatewayError, OSError):
            pass

    def acquire(self, key, kind=None, ttl=None, wait=0, limit=None, mode=None, value=None, note=None):
        """Take a lease on ``key`` and return it (:class:`Lease`).

        ``kind`` is ``lock`` (the default), ``semaphore`` (with ``limit``
        permits), ``rwmutex`` (``mode`` ``exclusive`` or ``shared``) or
        ``election`` (with ``value``); ``ttl`` the lease's TTL in seconds
        (default the gateway's); ``wait`` how many seconds to wait in the
        key's FIFO queue: 0 for one attempt, None for as long as it takes.
        ``note`` is shown beside the holder by ``GET /v1/keys``.

        Raises LockedError when ``wait`` is 0 and the key is held,
        WaitTimeoutError when the wait ends ungranted, KindMismatchError,
        InvalidKeyError, InvalidRequestError, TooManyLeasesError,
        TooManyWaitersError, BackendUnavailableError, OSError."""
        body = self._request(key, kind, ttl, limit, mode, value, note)

        def granted(conn, resp, sent):
            try:
                reply = json.loads(resp.read())
            finally:
                conn.close()
            return Lease(self, reply, sent, resp.getheader("Dlock-Gateway-Instance"))

        if wait == 0:
            sent = time.monotonic()
            reply, _, instance = self._call("POST", "/v1/acquire", body)
            return Lease(self, reply, sent, instance)
        return self._poll("/v1/acquire", body, wait, granted)

    def lock(self, key, kind=None, ttl=None, wait=None, limit=None, mode=None, value=None, note=None):
        """A context manager that acquires a lease (waiting as long as it
        takes by default), renews it every TTL/3 in a background thread, and
        releases it on exit. The lease's ``lost`` event is set if it ends
        early; leaving the block then raises the error that ended it (unless
        the block raised), since the work done under it may have overlapped
        with another holder's."""
        return _Locked(self, key, dict(kind=kind, ttl=ttl, wait=wait, limit=limit, mode=mode, value=value, note=note))

    def hold(self, key, kind=None, ttl=None, wait=None, limit=None, mode=None, value=None, note=None):
        """Acquire as :meth:`lock` does (waiting as long as it takes by
        default) and hold the lease for as long as the streaming response
        stays open: returns a :class:`Hold`, a context manager whose exit
        closes the stream and so releases the lease. No renewals: the
        gateway keeps the lease while the stream is open."""
        body = self._request(key, kind, ttl, limit, mode, value, note)

        def granted(conn, resp, sent):
            conn.sock.settimeout(None)  # the stream stays open for as long as it holds
            try:
                ev = json.loads(resp.readline())
                if ev.get("event") != "granted":
                    raise GatewayError(resp.status, "internal", "the stream began with %r" % ev)
            except BaseException:
                conn.close()
                raise
            return Hold(conn, resp, Lease(self, ev, sent, resp.getheader("Dlock-Gateway-Instance")), ev)

        return self._poll("/v1/hold", body, wait, granted)
