package dev.dlock.gateway;

import java.time.Duration;
import java.util.Collections;
import java.util.Iterator;
import java.util.Map;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * A streaming hold: the lease is held while the response stays open.
 *
 * <p>{@link #lease()} is the granted lease; its deadline moves with each
 * keep-alive (the keep-alive's validity counted from when it arrived: an
 * estimate, since the gateway counts it from when it sent it). Its
 * {@link Lease#lost()} completes when the stream ends with {@code lost} or
 * {@code released}, or breaks. {@link #nextEvent} gives the events
 * ({@code granted}, {@code keepalive}, then {@code lost} or {@code released})
 * in order. {@link #close()} closes the stream, which releases the lease.
 * Safe for concurrent use.
 */
public final class Hold implements AutoCloseable {
    private static final Map<String, Object> END = Collections.emptyMap();

    private final Stream<String> lines;
    private final Lease lease;
    /** How many unread events a hold keeps (a keep-alive comes every few seconds). */
    public static final int MAX_EVENTS = 1000;

    // Keep-alives nobody reads must not pile up: the oldest events go first.
    private final LinkedBlockingQueue<Map<String, Object>> events = new LinkedBlockingQueue<>(MAX_EVENTS);
    private final Thread reader;
    private volatile boolean closed;
    private volatile boolean ended;

    Hold(Stream<String> lines, Iterator<String> it, Lease lease, Map<String, Object> granted) {
        this.lines = lines;
        this.lease = lease;
        lease.heldBy(this);
        put(granted);
        reader = new Thread(() -> read(it), "dlockgw-hold-" + lease.key());
        reader.setDaemon(true);
        reader.start();
    }

    /** The lease the stream holds. */
    public Lease lease() {
        return lease;
    }

    private void read(Iterator<String> it) {
        GatewayException.LeaseEndedException end = null;
        try {
            while (end == null && it.hasNext()) {
                String line = it.next();
                long arrived = System.nanoTime();
                Map<String, Object> ev = Json.object(line);
                String kind = (String) ev.get("event");
                if ("keepalive".equals(kind)) {
                    lease.deadline(arrived + Lease.millis(ev, "valid_for_ms"));
                } else if ("lost".equals(kind)) {
                    String code = ev.get("code") instanceof String ? (String) ev.get("code") : "lease_lost";
                    GatewayException e = GatewayException.of(0, code, String.valueOf(ev.get("message")));
                    end = e instanceof GatewayException.LeaseEndedException
                            ? (GatewayException.LeaseEndedException) e
                            : (GatewayException.LeaseEndedException) GatewayException.of(0, "lease_lost", e.getMessage());
                } else if ("released".equals(kind)) {
                    end = (GatewayException.LeaseEndedException) GatewayException.of(0, "lease_released", "released by id");
                }
                put(ev);
            }
            if (end == null && !closed) {
                end = lostBecause("the stream ended without an end event");
            }
        } catch (RuntimeException e) { // the stream broke (UncheckedIOException) or sent bad JSON
            if (!closed) {
                end = lostBecause("the stream broke: " + e);
            }
        }
        if (end != null) {
            lease.end(end);
        }
        ended = true;
        put(END);
    }

    private void put(Map<String, Object> ev) {
        while (!events.offer(ev)) {
            events.poll();
        }
    }

    private static GatewayException.LeaseEndedException lostBecause(String why) {
        return (GatewayException.LeaseEndedException) GatewayException.of(0, "lease_lost", why);
    }

    /**
     * The stream's next event, the granted event first; null when the
     * stream has ended or none arrives within the timeout.
     */
    public Map<String, Object> nextEvent(Duration timeout) throws InterruptedException {
        Map<String, Object> ev = events.poll(timeout.toNanos(), TimeUnit.NANOSECONDS);
        if (ev == END) {
            put(END); // later calls see the end too
            return null;
        }
        return ev;
    }

    /** Whether the stream has ended. */
    public boolean ended() {
        return ended;
    }

    /** Closes the stream: the gateway releases the lease. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        lines.close(); // cancels the response body: the connection closes
        reader.interrupt(); // a read blocked in the body's queue ends
        try {
            reader.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
