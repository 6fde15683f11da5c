import dev.dlock.gateway.Client;
import dev.dlock.gateway.Lease;
import dev.dlock.gateway.LockOptions;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

/**
 * The seeds' scheduled job through the gateway: close the expired orders
 * under a lock, the write fenced by the lease's token. The orders service
 * checks the token with dlock's httpfence middleware (headers Dlock-Fence and
 * Dlock-Token), and refuses a holder whose lease has ended once a newer holder
 * has written: 409 with Dlock-Refused: stale.
 *
 * <pre>
 * java -cp out CloseExpiredOrders http://127.0.0.1:8420 http://orders.internal:8080
 * </pre>
 */
public final class CloseExpiredOrders {
    static final String KEY = "jobs/close-expired-orders";

    /** A newer holder of the lock has written: this one's lease has ended, nothing was done. */
    public static final class StaleTokenException extends IOException {
        private static final long serialVersionUID = 1L;

        StaleTokenException(String message) {
            super(message);
        }
    }

    /** Asks the orders service to close the expired orders, fenced by token; returns its answer. */
    public static String closeExpiredOrders(HttpClient http, URI service, long token)
            throws IOException, InterruptedException {
        HttpRequest req = HttpRequest.newBuilder(service.resolve("/orders/close-expired"))
                .timeout(Duration.ofSeconds(10))
                .header("Dlock-Fence", KEY)
                .header("Dlock-Token", Long.toUnsignedString(token))
                .POST(HttpRequest.BodyPublishers.noBody())
                .build();
        HttpResponse<String> resp = http.send(req, HttpResponse.BodyHandlers.ofString());
        if (resp.statusCode() == 409 && "stale".equals(resp.headers().firstValue("Dlock-Refused").orElse(""))) {
            throw new StaleTokenException("token " + Long.toUnsignedString(token) + " is below "
                    + resp.headers().firstValue("Dlock-Recorded").orElse("?"));
        }
        if (resp.statusCode() != 200) {
            throw new IOException("orders service: " + resp.statusCode() + " " + resp.body());
        }
        return resp.body().trim();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: CloseExpiredOrders GATEWAY_URL ORDERS_URL");
            System.exit(2);
        }
        Client client = new Client(args[0]);
        HttpClient http = HttpClient.newHttpClient();
        LockOptions opts = new LockOptions().ttl(Duration.ofSeconds(10)).waitFor(Duration.ofSeconds(30));
        try (Lease lease = client.lock(KEY, opts)) {
            String answer = closeExpiredOrders(http, URI.create(args[1]), lease.token());
            System.out.println(answer + " under token " + lease.tokenString());
        }
    }
}
