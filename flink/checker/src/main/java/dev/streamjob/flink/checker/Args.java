package dev.streamjob.flink.checker;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** Command line: --savepoint P --jar J [--class C] [--parallelism N] [--allow-non-restored-state] [--conf k=v]... [-- args...] */
final class Args {
    String savepoint;
    String jar;
    String entryClass;
    int parallelism = 1;
    boolean allowNonRestoredState;
    final Map<String, String> conf = new LinkedHashMap<>();
    final List<String> programArgs = new ArrayList<>();

    static Args parse(String[] argv) {
        Args a = new Args();
        for (int i = 0; i < argv.length; i++) {
            String arg = argv[i];
            switch (arg) {
                case "--":
                    for (int k = i + 1; k < argv.length; k++) {
                        a.programArgs.add(argv[k]);
                    }
                    i = argv.length;
                    break;
                case "--savepoint":
                    a.savepoint = value(argv, ++i, arg);
                    break;
                case "--jar":
                    a.jar = value(argv, ++i, arg);
                    break;
                case "--class":
                    a.entryClass = value(argv, ++i, arg);
                    break;
                case "--parallelism":
                    try {
                        a.parallelism = Integer.parseInt(value(argv, ++i, arg));
                    } catch (NumberFormatException e) {
                        throw new IllegalArgumentException("--parallelism takes a number");
                    }
                    break;
                case "--allow-non-restored-state":
                    a.allowNonRestoredState = true;
                    break;
                case "--conf": {
                    String kv = value(argv, ++i, arg);
                    int eq = kv.indexOf('=');
                    if (eq <= 0) {
                        throw new IllegalArgumentException("--conf takes key=value, got " + kv);
                    }
                    a.conf.put(kv.substring(0, eq), kv.substring(eq + 1));
                    break;
                }
                default:
                    throw new IllegalArgumentException("unknown argument " + arg);
            }
        }
        if (a.savepoint == null || a.jar == null) {
            throw new IllegalArgumentException("--savepoint and --jar are required");
        }
        return a;
    }

    private static String value(String[] argv, int i, String flag) {
        if (i >= argv.length) {
            throw new IllegalArgumentException(flag + " needs a value");
        }
        return argv[i];
    }
}
