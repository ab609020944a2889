package dev.streamjob.flink.checker;

/** Just enough JSON writing for the verdict line (no dependency beyond Flink's own jars). */
final class Json {
    private final StringBuilder out = new StringBuilder();
    private boolean first = true;

    static String error(String message) {
        return new Json().open().field("verdict", "error").field("message", message).close().toString();
    }

    /** {@code s} as a JSON string literal. */
    static String quote(String s) {
        Json j = new Json();
        j.string(s);
        return j.toString();
    }

    Json open() {
        comma();
        out.append('{');
        first = true;
        return this;
    }

    Json close() {
        out.append('}');
        first = false;
        return this;
    }

    Json openArray() {
        out.append('[');
        first = true;
        return this;
    }

    Json closeArray() {
        out.append(']');
        first = false;
        return this;
    }

    Json key(String key) {
        comma();
        string(key);
        out.append(':');
        first = true; // the value follows without a comma
        return this;
    }

    Json field(String key, String value) {
        key(key);
        first = false;
        if (value == null) {
            out.append("null");
        } else {
            string(value);
        }
        return this;
    }

    /** An array element. */
    Json value(String value) {
        comma();
        string(value);
        return this;
    }

    Json field(String key, int value) {
        key(key);
        first = false;
        out.append(value);
        return this;
    }

    private void comma() {
        if (!first) {
            out.append(',');
        }
        first = false;
    }

    private void string(String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        out.append('"');
    }

    @Override
    public String toString() {
        return out.toString();
    }
}
