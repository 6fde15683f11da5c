package dev.dlock.gateway;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.Iterator;
import java.util.Map;
import java.util.stream.Stream;

/**
 * A client of dlock's lock gateway ({@code dlock gateway}, docs/gateway.md):
 * dlock's fair, fenced locks, semaphores, read-write locks and elections over
 * HTTP/JSON, with the JDK alone.
 *
 * <pre>{@code
 * Client client = new Client("http://127.0.0.1:8420");
 * try (Lease lease = client.lock("jobs/close-expired-orders", new LockOptions().ttl(Duration.ofSeconds(10)))) {
 *     closeExpiredOrders(lease.token()); // fence every write with the token
 * }
 * }</pre>
 *
 * <p>Errors: an error reply throws the {@link GatewayException} subclass
 * named after its code; a wait that ends ungranted throws
 * {@link WaitTimeoutException}; a network failure the HttpClient's
 * IOException. Leases and tickets live in the gateway instance that granted
 * them: behind a load balancer, reach the same instance
 * ({@link Lease#instance()}). Safe for concurrent use.
 */
public final class Client {
    /**
     * The longest wait one long poll asks for; the gateway caps it too (30 s
     * by default), and the client polls again with its ticket until its own
     * wait ends.
     */
    public static final Duration MAX_POLL = Duration.ofSeconds(30);

    /** How much longer than its wait a poll may take: the gateway's answer and the network's delays. */
    static final Duration REQUEST_SLACK = Duration.ofSeconds(10);

    private final URI base;
    private final HttpClient http;
    private final Duration timeout;

    /** A client of the gateway at baseUrl ({@code http://host:port}), each request bounded by 10 s. */
    public Client(String baseUrl) {
        this(URI.create(baseUrl), Duration.ofSeconds(10));
    }

    /** A client of the gateway at baseUrl whose requests that do not wait in a queue are bounded by timeout. */
    public Client(URI baseUrl, Duration timeout) {
        String s = baseUrl.toString();
        this.base = URI.create(s.endsWith("/") ? s.substring(0, s.length() - 1) : s);
        this.timeout = timeout;
        this.http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(timeout).build();
    }

    static final class Reply {
        final int status;
        final Map<String, Object> body;
        final String instance;

        Reply(int status, Map<String, Object> body, String instance) {
            this.status = status;
            this.body = body;
            this.instance = instance;
        }
    }

    private HttpRequest request(String method, String path, Map<String, Object> body, Duration timeout) {
        HttpRequest.Builder b = HttpRequest.newBuilder(base.resolve(base.getPath() + path))
                .timeout(timeout)
                .header("Accept", "application/json");
        if (body != null) {
            b.header("Content-Type", "application/json").method(method, HttpRequest.BodyPublishers.ofString(Json.write(body)));
        } else {
            b.method(method, HttpRequest.BodyPublishers.noBody());
        }
        return b.build();
    }

    private static Reply decode(HttpResponse<String> resp) throws GatewayException {
        String instance = resp.headers().firstValue("Dlock-Gateway-Instance").orElse("");
        if (resp.statusCode() >= 400) {
            throw error(resp.statusCode(), resp.body());
        }
        return new Reply(resp.statusCode(), Json.object(resp.body()), instance);
    }

    static GatewayException error(int status, String body) {
        try {
            @SuppressWarnings("unchecked")
            Map<String, Object> e = (Map<String, Object>) Json.object(body).get("error");
            return GatewayException.of(status, (String) e.get("code"), (String) e.get("message"));
        } catch (RuntimeException notAnError) {
            return GatewayException.of(status, "internal", "status " + status + ": " + body);
        }
    }

    Reply call(String method, String path) throws IOException, InterruptedException {
        return decode(http.send(request(method, path, null, timeout), HttpResponse.BodyHandlers.ofString()));
    }

    /**
     * Takes a lease on key, with one attempt unless opts says how long to wait.
     *
     * @throws GatewayException.LockedException when the key is held and there is no wait
     * @throws WaitTimeoutException when the wait ends ungranted (its place is given up)
     * @throws GatewayException for the other error replies (kind_mismatch, invalid_key, ...)
     */
    public Lease acquire(String key, LockOptions opts) throws IOException, InterruptedException {
        Duration wait = opts.waitSet ? opts.waitFor : Duration.ZERO;
        if (wait != null && wait.isZero()) {
            long sent = System.nanoTime();
            Reply r = decode(http.send(request("POST", "/v1/acquire", opts.body(key), timeout), HttpResponse.BodyHandlers.ofString()));
            return new Lease(this, r.body, sent, r.instance);
        }
        return (Lease) poll("/v1/acquire", key, opts, wait, false);
    }

    /** {@link #acquire} with the gateway's defaults and no wait. */
    public Lease acquire(String key) throws IOException, InterruptedException {
        return acquire(key, new LockOptions());
    }

    /**
     * Acquires (waiting as long as it takes unless opts says otherwise) and
     * renews the lease every TTL/3 in a background thread until it is
     * closed. {@link Lease#lost()} completes if it ends early, and closing it
     * then throws that error.
     */
    public Lease lock(String key, LockOptions opts) throws IOException, InterruptedException {
        Lease lease = acquire(key, opts.waitSet ? opts : copyWait(opts, null));
        lease.startRenewing();
        return lease;
    }

    /**
     * Acquires (waiting as long as it takes unless opts says otherwise) and
     * holds the lease for as long as the streaming response stays open;
     * closing the {@link Hold} releases it. No renewals: the stream keeps the
     * lease.
     */
    public Hold hold(String key, LockOptions opts) throws IOException, InterruptedException {
        return (Hold) poll("/v1/hold", key, opts, opts.waitSet ? opts.waitFor : null, true);
    }

    private static LockOptions copyWait(LockOptions o, Duration wait) {
        LockOptions c = new LockOptions();
        c.kind = o.kind;
        c.mode = o.mode;
        c.limit = o.limit;
        c.ttl = o.ttl;
        c.value = o.value;
        c.note = o.note;
        return c.waitFor(wait);
    }

    /**
     * Polls until granted or the wait (null: no limit) has passed, presenting
     * the ticket of each ungranted poll to the next so that the waiter keeps
     * its place in the key's FIFO queue.
     */
    private Object poll(String path, String key, LockOptions opts, Duration wait, boolean stream)
            throws IOException, InterruptedException {
        long end = wait == null ? 0 : System.nanoTime() + wait.toNanos();
        String ticket = null;
        while (true) {
            long left = wait == null ? MAX_POLL.toNanos() : Math.max(0, end - System.nanoTime());
            Duration pollWait = Duration.ofNanos(Math.min(left, MAX_POLL.toNanos()));
            Map<String, Object> body = opts.body(key);
            // At least 1 ms: a wait_ms of 0 is one attempt, answered 409 rather than 202.
            body.put("wait_ms", Math.max(1, pollWait.toMillis()));
            if (ticket != null) {
                body.put("ticket", ticket);
            }
            HttpRequest req = request("POST", path, body, pollWait.plus(REQUEST_SLACK));
            long sent = System.nanoTime();
            if (stream) {
                HttpResponse<Stream<String>> resp = http.send(req, HttpResponse.BodyHandlers.ofLines());
                String instance = resp.headers().firstValue("Dlock-Gateway-Instance").orElse("");
                Stream<String> lines = resp.body();
                if (resp.statusCode() == 200) {
                    Iterator<String> it = lines.iterator();
                    try {
                        Map<String, Object> ev = Json.object(it.next());
                        if (!"granted".equals(ev.get("event"))) {
                            throw GatewayException.of(200, "internal", "the stream began with " + ev);
                        }
                        return new Hold(lines, it, new Lease(this, ev, sent, instance), ev);
                    } catch (RuntimeException | GatewayException e) {
                        lines.close();
                        throw e;
                    }
                }
                String text = String.join("\n", (Iterable<String>) lines::iterator);
                lines.close();
                if (resp.statusCode() >= 400) {
                    throw error(resp.statusCode(), text);
                }
                ticket = (String) Json.object(text).get("ticket");
            } else {
                Reply r = decode(http.send(req, HttpResponse.BodyHandlers.ofString()));
                if (r.status == 200) {
                    return new Lease(this, r.body, sent, r.instance);
                }
                ticket = (String) r.body.get("ticket"); // 202: not granted yet
            }
            if (wait != null && end - System.nanoTime() <= 0) {
                try {
                    call("DELETE", "/v1/tickets/" + ticket); // give the place up at once; it expires anyway
                } catch (IOException ignored) {
                    // the ticket expires on its own
                }
                throw new WaitTimeoutException("dlockgw: key " + key + " not granted within " + wait);
            }
        }
    }
}
