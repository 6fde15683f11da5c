import dev.dlock.gateway.Client;
import dev.dlock.gateway.GatewayException;
import dev.dlock.gateway.Lease;
import dev.dlock.gateway.LockOptions;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.time.Instant;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * One worker of {@code dlock demo --gateway}, in Java: the demo's job (close
 * the next expired order, one job at a time under the lock "order") through
 * the lock gateway with the dev.dlock.gateway client, each ledger call fenced
 * by the lease's token. It reports to the demo what RunWorker reports in Go
 * (waiting, acquired, releasing, released or lost, closed or rejected,
 * finished).
 *
 * <pre>
 * java -cp out DemoWorker GATEWAY_URL LEDGER_URL NAME JOB_TIME_MS
 * </pre>
 *
 * On purpose it does not check the lease before it writes: no check closes
 * the gap between checking and writing, and the demo shows that the ledger's
 * token check is what stops a holder paused past its TTL.
 */
public final class DemoWorker {
    static final String KEY = "order"; // the lock every worker takes
    static final String FENCE = "close-orders"; // the ledger's fence (httpfence)

    /** The ledger refused the token: a newer holder has written. */
    static final class StaleException extends IOException {
        private static final long serialVersionUID = 1L;

        StaleException(String message) {
            super(message);
        }
    }

    private final Client client;
    private final URI ledger;
    private final String name;
    private final Duration jobTime;
    private final HttpClient http = HttpClient.newHttpClient();

    DemoWorker(String gateway, String ledger, String name, Duration jobTime) {
        this.client = new Client(gateway);
        this.ledger = URI.create(ledger);
        this.name = name;
        this.jobTime = jobTime;
    }

    /** POSTs body to the ledger, fenced with token unless it is 0; returns the answer. */
    String post(String path, String body, long token) throws IOException, InterruptedException {
        HttpRequest.Builder req = HttpRequest.newBuilder(ledger.resolve(path))
                .timeout(Duration.ofSeconds(30))
                .header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(body));
        if (token != 0) {
            req.header("Dlock-Fence", FENCE).header("Dlock-Token", Long.toUnsignedString(token));
        }
        HttpResponse<String> resp = http.send(req.build(), HttpResponse.BodyHandlers.ofString());
        if (resp.statusCode() == 409 && "stale".equals(resp.headers().firstValue("Dlock-Refused").orElse(""))) {
            throw new StaleException("fence " + FENCE + ": token " + Long.toUnsignedString(token) + " is below "
                    + resp.headers().firstValue("Dlock-Recorded").orElse("?"));
        }
        if (resp.statusCode() != 200) {
            throw new IOException("ledger " + path + ": " + resp.statusCode() + " " + resp.body());
        }
        return resp.body();
    }

    /** Tells the demo; a lost report only costs a progress line. */
    void event(String kind, long token, Instant since, String detail) {
        StringBuilder e = new StringBuilder("{\"worker\":").append(quote(name))
                .append(",\"kind\":").append(quote(kind))
                .append(",\"at\":").append(quote(Instant.now().toString()));
        if (token != 0) {
            e.append(",\"token\":").append(Long.toUnsignedString(token));
        }
        if (since != null) {
            e.append(",\"since\":").append(quote(since.toString()));
        }
        if (detail != null) {
            e.append(",\"detail\":").append(quote(detail));
        }
        try {
            post("/event", e.append('}').toString(), 0);
        } catch (IOException | InterruptedException ignored) {
            // only a progress line is lost
        }
    }

    /** One job under the lock; true when no expired order was left. */
    boolean job(long token) throws IOException, InterruptedException {
        String me = "{\"worker\":" + quote(name);
        try {
            long order = number(post("/read", me + "}", token), "order");
            if (order == 0) {
                return true;
            }
            Thread.sleep(jobTime.dividedBy(2).toMillis()); // working on the order
            post("/step", me + ",\"order\":" + order + "}", token);
            Thread.sleep(jobTime.dividedBy(2).toMillis());
            String res = post("/close", me + ",\"order\":" + order + "}", token);
            if (!res.matches("(?s).*\"accepted\"\\s*:\\s*true.*")) {
                throw new IOException("ledger /close: " + res.trim());
            }
            event("closed", token, null, Long.toString(order));
        } catch (StaleException e) {
            event("rejected", token, null, e.getMessage());
        }
        return false;
    }

    void run() throws IOException, InterruptedException {
        LockOptions opts = new LockOptions().note("dlock demo worker " + name + " (Java)");
        while (true) {
            event("waiting", 0, null, null);
            long token = 0;
            boolean finished = false;
            Instant since = null;
            boolean lost = false;
            // Renewed in the background every TTL/3; closing releases it,
            // and throws if the lease had ended first.
            try (Lease lease = client.lock(KEY, opts)) {
                token = lease.token();
                event("acquired", token, null, null);
                finished = job(token);
                // Announced before the release, so that the demo hears of
                // it before the next holder's grant.
                event("releasing", token, null, null);
                since = Instant.now();
            } catch (GatewayException.LeaseEndedException e) {
                if (since == null) {
                    throw e;
                }
                event("lost", token, since, e.getMessage());
                lost = true;
            }
            if (!lost) {
                event("released", token, since, null);
            }
            if (finished) {
                event("finished", 0, null, null);
                return;
            }
        }
    }

    static long number(String json, String field) throws IOException {
        Matcher m = Pattern.compile("\"" + field + "\"\\s*:\\s*(\\d+)").matcher(json);
        return m.find() ? Long.parseLong(m.group(1)) : 0;
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) {
        if (args.length != 4) {
            System.err.println("usage: DemoWorker GATEWAY_URL LEDGER_URL NAME JOB_TIME_MS (started by dlock demo --gateway)");
            System.exit(2);
        }
        try {
            new DemoWorker(args[0], args[1], args[2], Duration.ofMillis(Long.parseLong(args[3]))).run();
        } catch (Exception e) {
            System.err.println("error: " + e);
            System.exit(1);
        }
        System.exit(0);
    }
}
