package dev.dlock.gateway;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * A lease granted by the gateway. {@link #token()} is the fencing token,
 * {@link #leaseId()} the capability to renew and release it.
 *
 * <p>The lease's deadline is a {@link System#nanoTime()} reading: when the
 * request that granted or last renewed it was sent, plus the reply's
 * {@code valid_for_ms}, which the gateway counts from its receipt; so it is
 * never later than the gateway's. {@link #valid()} is false from then on. A
 * process paused between that check and a write still writes late: pass the
 * token to the store and let it refuse a lower one than it has seen.
 *
 * <p>{@link #lost()} completes with the error that ended the lease other than
 * by {@link #release()}. Closing a lease (try-with-resources) stops its
 * renewals and releases it. Safe for concurrent use.
 */
public final class Lease implements AutoCloseable {
    private final Client client;
    private final String leaseId;
    private final String key;
    private final String kind;
    private final String mode;
    private final long token;
    private final String tokenString;
    private final boolean streamed;
    private final String instance;
    private volatile Duration ttl;
    private volatile long deadline;
    private volatile boolean released;
    private final CompletableFuture<GatewayException.LeaseEndedException> lost = new CompletableFuture<>();
    private final CountDownLatch stop = new CountDownLatch(1);
    private Thread renewer;
    private Hold hold;

    Lease(Client client, Map<String, Object> reply, long sent, String instance) {
        this.client = client;
        this.leaseId = (String) reply.get("lease_id");
        this.key = (String) reply.get("key");
        this.kind = (String) reply.get("kind");
        this.mode = (String) reply.get("mode");
        this.tokenString = (String) reply.get("token_str");
        this.token = Long.parseUnsignedLong(tokenString);
        this.streamed = Boolean.TRUE.equals(reply.get("streamed"));
        this.instance = instance;
        this.ttl = Duration.ofMillis(((Number) reply.get("ttl_ms")).longValue());
        this.deadline = sent + millis(reply, "valid_for_ms");
    }

    static long millis(Map<String, Object> reply, String field) {
        return TimeUnit.MILLISECONDS.toNanos(((Number) reply.get(field)).longValue());
    }

    /** The lease's id: the capability to renew and release it. Keep it like a password. */
    public String leaseId() {
        return leaseId;
    }

    /** The key held. */
    public String key() {
        return key;
    }

    /** {@code lock}, {@code semaphore}, {@code rwmutex} or {@code election}. */
    public String kind() {
        return kind;
    }

    /** {@code exclusive} or {@code shared}. */
    public String mode() {
        return mode;
    }

    /** The fencing token, above every earlier grant's on the key (a uint64: compare with Long.compareUnsigned). */
    public long token() {
        return token;
    }

    /** The fencing token in decimal. */
    public String tokenString() {
        return tokenString;
    }

    /** The TTL the gateway granted. */
    public Duration ttl() {
        return ttl;
    }

    /** Whether a streaming hold keeps the lease (it is not renewed). */
    public boolean streamed() {
        return streamed;
    }

    /** The gateway instance that holds the lease (Dlock-Gateway-Instance): renew and release go there. */
    public String instance() {
        return instance;
    }

    /** Completes with the error that ended the lease, when it ends other than by {@link #release()}. */
    public CompletableFuture<GatewayException.LeaseEndedException> lost() {
        return lost;
    }

    /** Whether the lease is held: not ended, and its deadline not passed. */
    public boolean valid() {
        return !released && !lost.isDone() && System.nanoTime() - deadline < 0;
    }

    /** The time left until the deadline; zero once the lease is no longer valid. */
    public Duration remaining() {
        if (released || lost.isDone()) {
            return Duration.ZERO;
        }
        long left = deadline - System.nanoTime();
        return left > 0 ? Duration.ofNanos(left) : Duration.ZERO;
    }

    /**
     * Keeps the lease for another TTL from this request's receipt.
     *
     * @throws GatewayException.LeaseEndedException once the lease has ended
     *     (expired, lost, released: {@link #lost()} completes with it)
     * @throws GatewayException.LeaseStreamedException for a hold's lease: its stream keeps it
     * @throws IOException when the gateway cannot be reached
     */
    public void renew() throws IOException, InterruptedException {
        if (lost.isDone()) {
            throw lost.getNow(null);
        }
        long sent = System.nanoTime();
        Map<String, Object> reply;
        try {
            reply = client.call("POST", "/v1/leases/" + leaseId + "/renew").body;
        } catch (GatewayException.LeaseEndedException e) {
            end(e);
            throw e;
        }
        deadline = sent + millis(reply, "valid_for_ms");
        ttl = Duration.ofMillis(((Number) reply.get("ttl_ms")).longValue());
    }

    /**
     * Releases the lease: the next waiter is granted.
     *
     * @throws GatewayException.LeaseLostException if the lease had been lost
     *     before: work done under it may have overlapped with another holder's
     * @throws GatewayException.LeaseExpiredException if it was not renewed in time
     * @throws GatewayException.LeaseReleasedException for a second release
     * @throws GatewayException.BackendUnavailableException when the release is
     *     not confirmed (the backend frees the key when the TTL runs out)
     */
    public void release() throws IOException, InterruptedException {
        released = true;
        try {
            client.call("DELETE", "/v1/leases/" + leaseId);
        } catch (GatewayException.LeaseEndedException e) {
            if (!(e instanceof GatewayException.LeaseReleasedException)) {
                end(e);
            }
            throw e;
        }
    }

    /**
     * Stops the renewals of {@link Client#lock}, or closes a hold's stream,
     * and releases the lease. Throws the error that ended the lease early,
     * if it did: the work done under it may have overlapped with another
     * holder's.
     */
    @Override
    public void close() throws IOException {
        if (hold != null) {
            hold.close();
        } else {
            stop.countDown();
            try {
                if (renewer != null) {
                    renewer.join();
                }
                release();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new InterruptedIOException("interrupted while releasing " + key);
            } catch (IOException e) {
                throw lost.isDone() ? lost.getNow(null) : e;
            }
        }
        if (lost.isDone()) {
            throw lost.getNow(null);
        }
    }

    void end(GatewayException.LeaseEndedException e) {
        lost.complete(e);
    }

    void deadline(long nanos) {
        deadline = nanos;
    }

    void heldBy(Hold h) {
        hold = h;
    }

    /**
     * Renews every TTL/3 until closed or the lease ends. A renewal that fails
     * for a passing reason (the gateway unreachable, 503) is tried again,
     * sooner, until the deadline: then the lease is lost.
     */
    void startRenewing() {
        renewer = new Thread(() -> {
            long interval = ttl.toNanos() / 3;
            try {
                while (!stop.await(interval, TimeUnit.NANOSECONDS)) {
                    IOException err;
                    try {
                        renew();
                        interval = ttl.toNanos() / 3;
                        continue;
                    } catch (GatewayException.LeaseEndedException e) {
                        return; // renew completed lost
                    } catch (IOException e) {
                        err = e;
                    }
                    long left = deadline - System.nanoTime();
                    if (left <= 0) {
                        end(new GatewayException.DeadlinePassedException(
                                "no renewal succeeded before the lease's deadline: " + err.getMessage()));
                        return;
                    }
                    interval = Math.min(ttl.toNanos() / 10, left / 2);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "dlockgw-renew-" + key);
        renewer.setDaemon(true);
        renewer.start();
    }
}
