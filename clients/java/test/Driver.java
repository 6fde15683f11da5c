import dev.dlock.gateway.Client;
import dev.dlock.gateway.GatewayException;
import dev.dlock.gateway.Hold;
import dev.dlock.gateway.Lease;
import dev.dlock.gateway.LockOptions;
import dev.dlock.gateway.WaitTimeoutException;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The Java client driven by the Go tests (clients/internal/clienttest), in
 * the line protocol of clients/python/tests/driver.py: one command a line on
 * stdin, each run in a thread of its own, replies prefixed by the command's
 * name on stdout.
 */
public final class Driver {
    static Client client;
    static final Map<String, Lease> leases = new ConcurrentHashMap<>();
    static final Map<String, Hold> holds = new ConcurrentHashMap<>();
    static final HttpClient http = HttpClient.newHttpClient();

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static void watch(String name, Lease lease) {
        lease.lost().thenAccept(e -> say(name + " lost " + e.code() + " " + e.getClass().getSimpleName()));
    }

    static LockOptions opts(String ttlMs) {
        return new LockOptions().ttl(Duration.ofMillis(Long.parseLong(ttlMs)));
    }

    static void run(String[] w) {
        String cmd = w[0];
        String name = w[1];
        try {
            switch (cmd) {
                case "acquire": {
                    long wait = Long.parseLong(w[4]);
                    Lease l = client.acquire(w[2], opts(w[3]).waitFor(wait < 0 ? null : Duration.ofMillis(wait)));
                    leases.put(name, l);
                    say(name + " ok " + l.tokenString() + " " + l.remaining().toMillis());
                    break;
                }
                case "renew": {
                    Lease l = leases.get(name);
                    l.renew();
                    say(name + " ok " + l.tokenString() + " " + l.remaining().toMillis());
                    break;
                }
                case "release":
                    leases.get(name).release();
                    say(name + " ok");
                    break;
                case "valid":
                    say(name + " ok " + leases.get(name).valid());
                    break;
                case "lock": {
                    Lease l = client.lock(w[2], opts(w[3]));
                    leases.put(name, l);
                    watch(name, l);
                    say(name + " ok " + l.tokenString());
                    break;
                }
                case "unlock":
                    leases.remove(name).close();
                    say(name + " ok");
                    break;
                case "hold": {
                    Hold h = client.hold(w[2], opts(w[3]));
                    holds.put(name, h);
                    leases.put(name, h.lease());
                    watch(name, h.lease());
                    say(name + " ok " + h.lease().tokenString());
                    break;
                }
                case "unhold":
                    holds.remove(name).close();
                    say(name + " ok");
                    break;
                case "events": {
                    StringBuilder kinds = new StringBuilder();
                    for (Map<String, Object> ev; (ev = holds.get(name).nextEvent(Duration.ofSeconds(30))) != null; ) {
                        kinds.append(kinds.length() > 0 ? "," : "").append(ev.get("event"));
                    }
                    say(name + " ok " + kinds);
                    break;
                }
                case "fence":
                    try {
                        String answer = CloseExpiredOrders.closeExpiredOrders(http, URI.create(w[2]), leases.get(name).token());
                        say(name + " ok " + answer);
                    } catch (CloseExpiredOrders.StaleTokenException e) {
                        say(name + " stale");
                    }
                    break;
                default:
                    say(name + " error unknown_command " + cmd);
            }
        } catch (GatewayException e) {
            say(name + " error " + e.code() + " " + e.getClass().getSimpleName());
        } catch (WaitTimeoutException e) {
            say(name + " error wait_timeout " + e.getClass().getSimpleName());
        } catch (Exception e) {
            say(name + " error exception " + e);
        }
    }

    public static void main(String[] args) throws Exception {
        client = new Client(args[0]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            String[] w = line.trim().split("\\s+");
            if (w.length >= 2) {
                Thread t = new Thread(() -> run(w));
                t.setDaemon(true);
                t.start();
            }
        }
    }
}
