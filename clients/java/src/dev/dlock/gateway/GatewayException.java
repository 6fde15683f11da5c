package dev.dlock.gateway;

import java.io.IOException;

/**
 * An error reply of the gateway: its HTTP {@link #status()}, its stable
 * {@link #code()} and a message for people. Each code has a subclass nested
 * here, named after it ({@code locked}: {@link LockedException},
 * {@code lease_lost}: {@link LeaseLostException}, ...), so that callers catch
 * the case they handle. The 410s, and a lease whose deadline passed before a
 * renewal succeeded, are {@link LeaseEndedException}s.
 */
public class GatewayException extends IOException {
    private static final long serialVersionUID = 1L;

    private final int status;
    private final String code;

    /** An error with the reply's status (0 for one the client raises itself), code and message. */
    public GatewayException(int status, String code, String message) {
        super(message + " (" + status + " " + code + ")");
        this.status = status;
        this.code = code;
    }

    /** The reply's HTTP status; 0 when the client raised the error itself. */
    public int status() {
        return status;
    }

    /** The error's stable code, as the gateway's API lists them. */
    public String code() {
        return code;
    }

    /** The exception for an error reply's code. */
    static GatewayException of(int status, String code, String message) {
        switch (code) {
            case "malformed_json": return new MalformedJsonException(status, code, message);
            case "invalid_request": return new InvalidRequestException(status, code, message);
            case "invalid_key": return new InvalidKeyException(status, code, message);
            case "body_too_large": return new BodyTooLargeException(status, code, message);
            case "not_found": return new NotFoundException(status, code, message);
            case "method_not_allowed": return new MethodNotAllowedException(status, code, message);
            case "lease_not_found": return new LeaseNotFoundException(status, code, message);
            case "lease_expired": return new LeaseExpiredException(status, code, message);
            case "lease_released": return new LeaseReleasedException(status, code, message);
            case "lease_lost": return new LeaseLostException(status, code, message);
            case "lease_streamed": return new LeaseStreamedException(status, code, message);
            case "ticket_not_found": return new TicketNotFoundException(status, code, message);
            case "ticket_mismatch": return new TicketMismatchException(status, code, message);
            case "ticket_in_use": return new TicketInUseException(status, code, message);
            case "locked": return new LockedException(status, code, message);
            case "no_leader": return new NoLeaderException(status, code, message);
            case "kind_mismatch": return new KindMismatchException(status, code, message);
            case "too_many_leases": return new TooManyLeasesException(status, code, message);
            case "too_many_waiters": return new TooManyWaitersException(status, code, message);
            case "unsupported": return new UnsupportedException(status, code, message);
            case "backend_unavailable": return new BackendUnavailableException(status, code, message);
            case "gateway_closing": return new GatewayClosingException(status, code, message);
            case "internal": return new InternalException(status, code, message);
            case "deadline_passed": return new DeadlinePassedException(message);
            default: return new GatewayException(status, code, message);
        }
    }

    /** The lease is no longer held: expired, released, lost, or past its deadline. */
    public static class LeaseEndedException extends GatewayException {
        private static final long serialVersionUID = 1L;

        LeaseEndedException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /**
     * The lease's local deadline passed before a renewal succeeded: it may
     * have been granted to another client. Code {@code deadline_passed}.
     */
    public static final class DeadlinePassedException extends LeaseEndedException {
        private static final long serialVersionUID = 1L;

        DeadlinePassedException(String message) {
            super(0, "deadline_passed", message);
        }
    }

    /** The gateway's error {@code malformed_json}. */
    public static final class MalformedJsonException extends GatewayException {
        private static final long serialVersionUID = 1L;

        MalformedJsonException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code invalid_request}. */
    public static final class InvalidRequestException extends GatewayException {
        private static final long serialVersionUID = 1L;

        InvalidRequestException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code invalid_key}. */
    public static final class InvalidKeyException extends GatewayException {
        private static final long serialVersionUID = 1L;

        InvalidKeyException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code body_too_large}. */
    public static final class BodyTooLargeException extends GatewayException {
        private static final long serialVersionUID = 1L;

        BodyTooLargeException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code not_found}. */
    public static final class NotFoundException extends GatewayException {
        private static final long serialVersionUID = 1L;

        NotFoundException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code method_not_allowed}. */
    public static final class MethodNotAllowedException extends GatewayException {
        private static final long serialVersionUID = 1L;

        MethodNotAllowedException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code lease_not_found}. */
    public static final class LeaseNotFoundException extends GatewayException {
        private static final long serialVersionUID = 1L;

        LeaseNotFoundException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code lease_expired}. */
    public static final class LeaseExpiredException extends LeaseEndedException {
        private static final long serialVersionUID = 1L;

        LeaseExpiredException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code lease_released}. */
    public static final class LeaseReleasedException extends LeaseEndedException {
        private static final long serialVersionUID = 1L;

        LeaseReleasedException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code lease_lost}. */
    public static final class LeaseLostException extends LeaseEndedException {
        private static final long serialVersionUID = 1L;

        LeaseLostException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code lease_streamed}. */
    public static final class LeaseStreamedException extends GatewayException {
        private static final long serialVersionUID = 1L;

        LeaseStreamedException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code ticket_not_found}. */
    public static final class TicketNotFoundException extends GatewayException {
        private static final long serialVersionUID = 1L;

        TicketNotFoundException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code ticket_mismatch}. */
    public static final class TicketMismatchException extends GatewayException {
        private static final long serialVersionUID = 1L;

        TicketMismatchException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code ticket_in_use}. */
    public static final class TicketInUseException extends GatewayException {
        private static final long serialVersionUID = 1L;

        TicketInUseException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code locked}. */
    public static final class LockedException extends GatewayException {
        private static final long serialVersionUID = 1L;

        LockedException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code no_leader}. */
    public static final class NoLeaderException extends GatewayException {
        private static final long serialVersionUID = 1L;

        NoLeaderException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code kind_mismatch}. */
    public static final class KindMismatchException extends GatewayException {
        private static final long serialVersionUID = 1L;

        KindMismatchException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code too_many_leases}. */
    public static final class TooManyLeasesException extends GatewayException {
        private static final long serialVersionUID = 1L;

        TooManyLeasesException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code too_many_waiters}. */
    public static final class TooManyWaitersException extends GatewayException {
        private static final long serialVersionUID = 1L;

        TooManyWaitersException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code unsupported}. */
    public static final class UnsupportedException extends GatewayException {
        private static final long serialVersionUID = 1L;

        UnsupportedException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code backend_unavailable}. */
    public static final class BackendUnavailableException extends GatewayException {
        private static final long serialVersionUID = 1L;

        BackendUnavailableException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code gateway_closing}. */
    public static final class GatewayClosingException extends GatewayException {
        private static final long serialVersionUID = 1L;

        GatewayClosingException(int status, String code, String message) {
            super(status, code, message);
        }
    }

    /** The gateway's error {@code internal}. */
    public static final class InternalException extends GatewayException {
        private static final long serialVersionUID = 1L;

        InternalException(int status, String code, String message) {
            super(status, code, message);
        }
    }
}
