package dev.streamjob.flink.testjob;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.serialization.SimpleStringEncoder;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.connector.file.sink.FileSink;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.functions.sink.filesystem.rollingpolicies.OnCheckpointRollingPolicy;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

import java.util.HashMap;
import java.util.Map;

/**
 * The stateful Flink job the tests run on Flink 1.20 and 2.3 (compiled against each): numbers
 * 0..records-1 from Flink's sequence source (its splits are checkpointed), keyed by number mod
 * keys, a running count per key in ValueState, every record written as one line
 * {@code key,number,count,revision} by Flink's FileSink (files are visible once a checkpoint
 * commits them). Every number therefore appears in exactly one committed line across restores;
 * the last count per key equals the number of records of that key.
 *
 * <p>Arguments (--name value): output (required), records (default 100000), keys (10), rate
 * (records per second per subtask, 0 = unthrottled; default 2000), revision (a label written
 * into each line: an "image bump" without a graph change), counter-uid ("counter"; changing it
 * orphans the count state), max-parallelism (unset by default), source-uid ("numbers"),
 * audit-uid (unset: no audit; set: a stateful pass-through operator with that uid, which a later
 * revision can drop), audit-type ("long": its state a Long; "tally": an {@link AuditTally} POJO),
 * count-state ("long", the default: the counter's state "count" a Long; "string": the same state
 * retyped to a String, which Flink's restore refuses; "renamed": a Long under the name "total",
 * which Flink restores and drops the old count), fail ("true": every record throws, a build that
 * never checkpoints), leak-file (unset by default:
 * a path on the TaskManager's own disk; once it exists, the throttle allocates native memory
 * without bound, as a leaking native library or an unbounded RocksDB would, until the kernel
 * kills the TaskManager for its container's memory limit), poison-file (unset by default: a path on
 * the TaskManager's own disk; once it exists, every record through the throttle there throws, as
 * a job hitting a bad record or a broken dependency does: Flink restarts the job from its latest
 * checkpoint again and again, and no savepoint can be taken).
 */
public final class CountingJob {
    public static void main(String[] argv) throws Exception {
        Map<String, String> args = parse(argv);
        String output = required(args, "output");
        long records = Long.parseLong(args.getOrDefault("records", "100000"));
        int keys = Integer.parseInt(args.getOrDefault("keys", "10"));
        int rate = Integer.parseInt(args.getOrDefault("rate", "2000"));
        String revision = args.getOrDefault("revision", "1");

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        if (args.containsKey("max-parallelism")) {
            env.setMaxParallelism(Integer.parseInt(args.get("max-parallelism")));
        }
        DataStream<Long> numbers = env.fromSequence(0, records - 1)
                .uid(args.getOrDefault("source-uid", "numbers"))
                .name("numbers");
        DataStream<Long> throttled = numbers.map(new Throttle(rate, args.get("leak-file"), args.get("poison-file"))).uid("throttle").name("throttle");
        if (args.containsKey("audit-uid")) {
            // An extra stateful operator a later revision may drop (allowNonRestoredState), its
            // state a Long or (audit-type tally) a POJO.
            KeyedProcessFunction<Long, Long, Long> audit =
                    "tally".equals(args.get("audit-type")) ? new TallyAudit() : new Audit();
            throttled = throttled.keyBy(n -> n % keys).process(audit)
                    .uid(args.get("audit-uid")).name("audit");
        }
        DataStream<String> lines = throttled
                .keyBy(n -> n % keys)
                .process(new RunningCount(revision, Boolean.parseBoolean(args.getOrDefault("fail", "false")),
                        args.getOrDefault("count-state", "long")))
                .uid(args.getOrDefault("counter-uid", "counter"))
                .name("counter");
        // Roll on every checkpoint, so a checkpoint commits every line written before it.
        lines.sinkTo(FileSink.forRowFormat(new Path(output), new SimpleStringEncoder<String>("UTF-8"))
                        .withRollingPolicy(OnCheckpointRollingPolicy.build())
                        .build())
                .uid("file-sink")
                .name("file-sink");
        env.execute("counting-job");
    }

    /** Keeps the job running long enough to checkpoint, savepoint and upgrade it mid-stream. */
    static final class Throttle extends RichMapFunction<Long, Long> {
        private final int perSecond;
        /** Null: never leak. */
        private final String leakFile;
        /** Null: never fail. */
        private final String poisonFile;
        private transient long started;
        private transient long emitted;
        private transient long nextLeakCheck;
        private transient long nextPoisonCheck;

        Throttle(int perSecond, String leakFile, String poisonFile) {
            this.perSecond = perSecond;
            this.leakFile = leakFile;
            this.poisonFile = poisonFile;
        }

        @Override
        public void open(OpenContext context) {
            started = System.nanoTime();
            emitted = 0;
        }

        @Override
        public Long map(Long value) throws Exception {
            if (leakFile != null && System.nanoTime() >= nextLeakCheck) {
                nextLeakCheck = System.nanoTime() + 200_000_000L;
                if (java.nio.file.Files.exists(java.nio.file.Paths.get(leakFile))) {
                    leakNativeMemory();
                }
            }
            if (poisonFile != null && System.nanoTime() >= nextPoisonCheck) {
                nextPoisonCheck = System.nanoTime() + 200_000_000L;
                if (java.nio.file.Files.exists(java.nio.file.Paths.get(poisonFile))) {
                    throw new IllegalStateException("poison-file " + poisonFile + " exists: record " + value + " fails");
                }
            }
            if (perSecond > 0) {
                emitted++;
                long due = started + emitted * 1_000_000_000L / perSecond;
                long wait = due - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
            }
            return value;
        }
    }

    /**
     * Allocates and touches native memory outside every limit the JVM knows (heap, direct,
     * metaspace) until the process is killed: only the container's memory limit stops it.
     * Reflection, because sun.misc.Unsafe is not on the compile-time API.
     */
    static void leakNativeMemory() throws Exception {
        Class<?> unsafeClass = Class.forName("sun.misc.Unsafe");
        java.lang.reflect.Field field = unsafeClass.getDeclaredField("theUnsafe");
        field.setAccessible(true);
        Object unsafe = field.get(null);
        java.lang.reflect.Method allocate = unsafeClass.getMethod("allocateMemory", long.class);
        java.lang.reflect.Method fill =
                unsafeClass.getMethod("setMemory", long.class, long.class, byte.class);
        long chunk = 64L << 20;
        for (long total = chunk; ; total += chunk) {
            long address = (long) allocate.invoke(unsafe, chunk);
            fill.invoke(unsafe, address, chunk, (byte) 1);
            System.err.println("leak-file: " + (total >> 20) + " MiB of native memory allocated");
        }
    }

    /** Passes every number on and counts them per key: state that can be left behind. */
    static final class Audit extends KeyedProcessFunction<Long, Long, Long> {
        private transient ValueState<Long> seen;

        @Override
        public void open(OpenContext context) {
            seen = getRuntimeContext().getState(new ValueStateDescriptor<>("seen", Types.LONG));
        }

        @Override
        public void processElement(Long value, Context ctx, Collector<Long> out) throws Exception {
            Long n = seen.value();
            seen.update(n == null ? 1L : n + 1);
            out.collect(value);
        }
    }

    /** The audit with its count in an {@link AuditTally} POJO. */
    static final class TallyAudit extends KeyedProcessFunction<Long, Long, Long> {
        private transient ValueState<AuditTally> seen;

        @Override
        public void open(OpenContext context) {
            seen = getRuntimeContext().getState(new ValueStateDescriptor<>("seen", Types.POJO(AuditTally.class)));
        }

        @Override
        public void processElement(Long value, Context ctx, Collector<Long> out) throws Exception {
            AuditTally tally = seen.value();
            if (tally == null) {
                tally = new AuditTally();
            }
            tally.seen++;
            seen.update(tally);
            out.collect(value);
        }
    }

    static final class RunningCount extends KeyedProcessFunction<Long, Long, String> {
        private final String revision;
        /** A broken build: every record fails it, before its first checkpoint. */
        private final boolean fail;
        /** How the count is kept: "long", "string" (retyped) or "renamed" (see the class comment). */
        private final String countState;
        private transient ValueState<Long> count;
        private transient ValueState<String> countText;

        RunningCount(String revision, boolean fail, String countState) {
            this.revision = revision;
            this.fail = fail;
            this.countState = countState;
        }

        @Override
        public void open(OpenContext context) {
            if ("string".equals(countState)) {
                countText = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.STRING));
            } else {
                String name = "renamed".equals(countState) ? "total" : "count";
                count = getRuntimeContext().getState(new ValueStateDescriptor<>(name, Types.LONG));
            }
        }

        @Override
        public void processElement(Long value, Context ctx, Collector<String> out) throws Exception {
            if (fail) {
                throw new IllegalStateException("revision " + revision + " is broken (--fail true)");
            }
            long next;
            if (countText != null) {
                String current = countText.value();
                next = (current == null ? 0 : Long.parseLong(current)) + 1;
                countText.update(Long.toString(next));
            } else {
                Long current = count.value();
                next = (current == null ? 0 : current) + 1;
                count.update(next);
            }
            out.collect(ctx.getCurrentKey() + "," + value + "," + next + "," + revision);
        }
    }

    private static Map<String, String> parse(String[] argv) {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("arguments are --name value pairs; got " + argv[i]);
            }
            args.put(argv[i].substring(2), argv[++i]);
        }
        return args;
    }

    private static String required(Map<String, String> args, String name) {
        String value = args.get(name);
        if (value == null) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return value;
    }
}
