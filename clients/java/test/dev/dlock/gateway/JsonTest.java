package dev.dlock.gateway;

import java.math.BigDecimal;
import java.util.List;
import java.util.Map;

/** Checks the JSON reader and writer; exits 1 with what failed. Run by clients/internal/clienttest. */
public final class JsonTest {
    private static int failures;

    private static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAIL: " + what);
            failures++;
        }
    }

    private static void refused(String text) {
        try {
            Json.parse(text);
            check(false, "accepted " + text);
        } catch (IllegalArgumentException expected) {
            // refused, as it must be
        }
    }

    public static void main(String[] args) {
        Map<String, Object> m = Json.object(
                " {\"a\": 1, \"b\": \"x\\u00e9\\n\\\"\", \"c\": [true, false, null], \"d\": {\"e\": -2.5e3},"
                        + " \"t\": 18446744073709551615} ");
        check(m.get("a").equals(1L), "integer as Long: " + m.get("a"));
        check(m.get("b").equals("x\u00e9\n\""), "escapes: " + m.get("b"));
        check(m.get("c").equals(java.util.Arrays.asList(true, false, null)), "array: " + m.get("c"));
        check(((Map<?, ?>) m.get("d")).get("e").equals(new BigDecimal("-2.5e3")), "fraction: " + m.get("d"));
        check(m.get("t").equals(new BigDecimal("18446744073709551615")), "uint64 above Long.MAX_VALUE: " + m.get("t"));
        check(((List<?>) Json.parse("[]")).isEmpty() && ((Map<?, ?>) Json.parse("{}")).isEmpty(), "empty containers");
        for (String bad : new String[] {"", "{", "{\"a\":1,}", "[1,]", "{\"a\":1}x", "{a:1}", "'a'", "01", "1.", "-",
                "\"\t\"", "\"\\x\"", "tru", "{\"a\":1,\"a\":2}", "[1 2]", "\"abc"}) {
            refused(bad);
        }
        String out = Json.write(Map.of("k", "a\"b\\c\u0001"));
        check(out.equals("{\"k\":\"a\\\"b\\\\c\\u0001\"}"), "write: " + out);
        check(Json.object(out).get("k").equals("a\"b\\c\u0001"), "write, then read");
        if (failures > 0) {
            System.exit(1);
        }
        System.out.println("ok");
    }
}
