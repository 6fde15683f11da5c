package dev.dlock.gateway;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * What to acquire and how long to wait: {@code new LockOptions().ttl(Duration.ofSeconds(10)).waitFor(Duration.ofSeconds(30))}.
 * Every field left unset takes the gateway's default: a lock, the
 * gateway's TTL (10 s). The wait's default depends on the call: none for
 * {@link Client#acquire}, as long as it takes for {@link Client#lock} and
 * {@link Client#hold}. Not safe for concurrent mutation; a built value may be
 * shared.
 */
public final class LockOptions {
    String kind;
    String mode;
    Integer limit;
    Duration ttl;
    Duration waitFor;
    boolean waitSet;
    String value;
    String note;

    /** A lock ({@code lock}), {@code semaphore}, {@code rwmutex} or {@code election}. */
    public LockOptions kind(String kind) {
        this.kind = kind;
        return this;
    }

    /** A rwmutex's {@code exclusive} (write, the default) or {@code shared} (read) lease. */
    public LockOptions mode(String mode) {
        this.mode = mode;
        return this;
    }

    /** A semaphore's permits; required for a semaphore, refused for the other kinds. */
    public LockOptions limit(int limit) {
        this.limit = limit;
        return this;
    }

    /** The lease's TTL, 100 ms to 24 h; etcd rounds it to whole seconds, ZooKeeper fixes it. */
    public LockOptions ttl(Duration ttl) {
        this.ttl = ttl;
        return this;
    }

    /**
     * How long to wait in the key's FIFO queue: {@link Duration#ZERO} for one
     * attempt, null for as long as it takes. The client polls again with its
     * ticket until then, keeping its place.
     */
    public LockOptions waitFor(Duration wait) {
        this.waitFor = wait;
        this.waitSet = true;
        return this;
    }

    /** An election candidate's published value. */
    public LockOptions value(String value) {
        this.value = value;
        return this;
    }

    /** A note shown beside the holder by {@code GET /v1/keys} and {@code dlock status}. */
    public LockOptions note(String note) {
        this.note = note;
        return this;
    }

    Map<String, Object> body(String key) {
        Map<String, Object> b = new LinkedHashMap<>();
        b.put("key", key);
        if (kind != null) {
            b.put("kind", kind);
        }
        if (mode != null) {
            b.put("mode", mode);
        }
        if (limit != null) {
            b.put("limit", limit);
        }
        if (ttl != null) {
            b.put("ttl_ms", ttl.toMillis());
        }
        if (value != null) {
            b.put("value", value);
        }
        if (note != null) {
            Map<String, Object> md = new LinkedHashMap<>();
            md.put("note", note);
            b.put("metadata", md);
        }
        return b;
    }
}
