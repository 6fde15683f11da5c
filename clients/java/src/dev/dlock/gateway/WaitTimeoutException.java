package dev.dlock.gateway;

import java.io.IOException;

/** A wait for a lease ended ungranted; its place in the queue was given up. */
public final class WaitTimeoutException extends IOException {
    private static final long serialVersionUID = 1L;

    WaitTimeoutException(String message) {
        super(message);
    }
}
