package dev.streamjob.precheck34.job;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.state.BroadcastState;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ReadOnlyBroadcastState;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.datastream.BroadcastStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.co.KeyedBroadcastProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.windowing.assigners.TumblingProcessingTimeWindows;
import org.apache.flink.util.Collector;

import java.io.File;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;

/**
 * A small stateful job for measuring the state pre-check (issue #34). Every stateful operator has
 * a uid; {@code --variant} changes one of them (the POJO changes come from the Stats class of the
 * jar). Modes: none (env.execute(): what the pre-check runs, its environment captures the graph),
 * {@code --mode savepoint --dir D --seconds S} (run locally, stop with a savepoint, print it),
 * {@code --mode restore --savepoint P --dir D --timeout S} (restore locally; print RESULT OK once
 * the first checkpoint completed, or RESULT FAILED with the root cause).
 */
public final class StateJob {
    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        String variant = args.getOrDefault("variant", "base");
        String mode = args.getOrDefault("mode", "plain");
        Configuration conf = new Configuration();
        if (!mode.equals("plain")) {
            File dir = new File(args.get("dir"));
            conf.setString("restart-strategy.type", "none");
            conf.setString("state.backend.type", args.getOrDefault("backend", "hashmap"));
            conf.setString("parallelism.default", "2");
            if (mode.equals("restore")) {
                conf.setString("execution.savepoint.path", args.get("savepoint"));
                conf.setString("execution.checkpointing.interval", "1s");
                conf.setString("execution.checkpointing.dir", new File(dir, "checkpoints").toURI().toString());
                conf.setString("state.checkpoints.dir", new File(dir, "checkpoints").toURI().toString());
            }
        }
        StreamExecutionEnvironment env = mode.equals("plain")
                ? StreamExecutionEnvironment.getExecutionEnvironment()
                : StreamExecutionEnvironment.getExecutionEnvironment(conf);
        build(env, variant, Integer.parseInt(args.getOrDefault("rate", "50")));
        if (mode.equals("plain")) {
            env.execute("state-job-" + variant);
        } else if (mode.equals("savepoint")) {
            JobClient client = env.executeAsync("state-job-" + variant);
            Thread.sleep(Long.parseLong(args.getOrDefault("seconds", "8")) * 1000);
            String path = client.stopWithSavepoint(false, new File(args.get("dir"), "savepoints").toURI().toString(),
                    SavepointFormatType.valueOf(args.getOrDefault("format", "CANONICAL"))).get();
            System.out.println("SAVEPOINT " + path);
            System.out.flush();
            System.exit(0);
        } else {
            restore(env, variant, new File(args.get("dir"), "checkpoints"), Long.parseLong(args.getOrDefault("timeout", "60")));
        }
    }

    static void restore(StreamExecutionEnvironment env, String variant, File checkpoints, long timeoutSeconds) throws Exception {
        JobClient client;
        try {
            client = env.executeAsync("state-job-" + variant);
        } catch (Exception e) {
            System.out.println("RESULT FAILED submit: " + rootCause(e));
            System.out.flush();
            System.exit(0);
            return;
        }
        long deadline = System.currentTimeMillis() + timeoutSeconds * 1000;
        File jobDir = new File(checkpoints, client.getJobID().toHexString());
        java.util.concurrent.CompletableFuture<?> result = client.getJobExecutionResult();
        while (System.currentTimeMillis() < deadline) {
            File[] chks = jobDir.listFiles((d, n) -> n.startsWith("chk-"));
            if (chks != null) {
                for (File chk : chks) {
                    if (new File(chk, "_metadata").exists()) {
                        System.out.println("RESULT OK first checkpoint " + chk.getName());
                        System.out.flush();
                        System.exit(0);
                    }
                }
            }
            if (result.isDone()) {
                try {
                    result.get();
                    System.out.println("RESULT ENDED without exception");
                } catch (Exception e) {
                    System.out.println("RESULT FAILED " + rootCause(e));
                }
                System.out.flush();
                System.exit(0);
            }
            Thread.sleep(250);
        }
        System.out.println("RESULT TIMEOUT");
        System.out.flush();
        System.exit(0);
    }

    static String rootCause(Throwable e) {
        Throwable t = e;
        while (t.getCause() != null && t.getCause() != t) {
            t = t.getCause();
        }
        String msg = t.getClass().getName() + ": " + t.getMessage();
        return msg.split("\n")[0];
    }

    static void build(StreamExecutionEnvironment env, String variant, int rate) {
        DataStream<Long> numbers = env.fromSequence(0, Long.MAX_VALUE).uid("src").name("src")
                .map(new Throttle(rate)).uid("throttle").name("throttle");

        // counter: ValueState "count" (variants change its type, kind, name, TTL, or the key type) + a timer
        DataStream<String> counted;
        if (variant.equals("key-string")) {
            counted = numbers.keyBy((KeySelector<Long, String>) n -> String.valueOf(n % 8), Types.STRING)
                    .process(new Counter<String>(variant)).uid("counter").name("counter");
        } else {
            counted = numbers.keyBy((KeySelector<Long, Long>) n -> n % 8, Types.LONG)
                    .process(new Counter<Long>(variant)).uid("counter").name("counter");
        }

        KeySelector<Long, Long> mod8 = n -> n % 8;
        DataStream<String> mapped = numbers.keyBy(mod8, Types.LONG).process(new Mapper(variant)).uid("mapper").name("mapper");
        DataStream<String> pojo = numbers.keyBy(mod8, Types.LONG).process(new PojoUser()).uid("pojo").name("pojo");
        DataStream<String> windowed;
        if (variant.equals("window-string")) {
            windowed = numbers.map(n -> String.valueOf(n)).returns(Types.STRING)
                    .keyBy((KeySelector<String, String>) s -> s.substring(s.length() - 1), Types.STRING)
                    .window(TumblingProcessingTimeWindows.of(Duration.ofSeconds(5)))
                    .reduce((a, b) -> a.length() > b.length() ? a : b).uid("window").name("window");
        } else if (variant.equals("window-value-string")) {
            windowed = numbers.map(n -> String.valueOf(n)).returns(Types.STRING)
                    .keyBy((KeySelector<String, Long>) s -> Long.parseLong(s) % 8, Types.LONG)
                    .window(TumblingProcessingTimeWindows.of(Duration.ofSeconds(5)))
                    .reduce((a, b) -> a.length() > b.length() ? a : b).uid("window").name("window");
        } else {
            windowed = numbers.keyBy(mod8, Types.LONG)
                    .window(TumblingProcessingTimeWindows.of(Duration.ofSeconds(5)))
                    .reduce(Long::sum).uid("window").name("window")
                    .map(String::valueOf).uid("window-fmt").name("window-fmt");
        }
        DataStream<String> buffered = numbers.map(new Buffer(variant)).uid("buffer").name("buffer");

        MapStateDescriptor<String, ?> rulesDesc = rulesDescriptor(variant);
        BroadcastStream<Long> rules = env.fromSequence(0, Long.MAX_VALUE).uid("rules-src").name("rules-src")
                .map(new Throttle(1)).uid("rules-throttle").name("rules-throttle")
                .broadcast(rulesDesc);
        DataStream<String> ruled = numbers.keyBy(mod8, Types.LONG).connect(rules)
                .process(new Rules(variant)).uid("rules").name("rules");

        DataStream<String> all = counted.union(mapped, pojo, windowed, buffered, ruled);
        if (variant.startsWith("async")) {
            // Flink 2.x only (testjob/v2only): an operator on async state (state API V2)
            try {
                @SuppressWarnings("unchecked")
                DataStream<String> async = (DataStream<String>) Class.forName("dev.streamjob.precheck34.job.AsyncCounter")
                        .getMethod("attach", DataStream.class, String.class).invoke(null, numbers, variant);
                all = all.union(async);
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("the async variants need Flink 2.x", e);
            }
        }
        all.sinkTo(new DiscardingSink<>()).uid("sink").name("sink");
    }

    static MapStateDescriptor<String, ?> rulesDescriptor(String variant) {
        return variant.equals("broadcast-string")
                ? new MapStateDescriptor<>("rules", Types.STRING, Types.STRING)
                : new MapStateDescriptor<>("rules", Types.STRING, Types.LONG);
    }

    /** Slows the sequence down so a savepoint can be taken mid-stream. */
    static final class Throttle extends RichMapFunction<Long, Long> {
        private final int perSecond;
        private transient long started;
        private transient long emitted;

        Throttle(int perSecond) {
            this.perSecond = perSecond;
        }

        @Override
        public void open(OpenContext context) {
            started = System.nanoTime();
        }

        @Override
        public Long map(Long value) throws Exception {
            emitted++;
            long wait = started + emitted * 1_000_000_000L / perSecond - System.nanoTime();
            if (wait > 0) {
                Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
            }
            return value;
        }
    }

    /** Value state "count" and a processing-time timer per key. */
    static final class Counter<K> extends KeyedProcessFunction<K, Long, String> {
        private final String variant;
        private transient ValueState<Long> count;
        private transient ValueState<Integer> countInt;
        private transient ValueState<String> countString;
        private transient ListState<Long> countList;

        Counter(String variant) {
            this.variant = variant;
        }

        @Override
        public void open(OpenContext context) {
            switch (variant.replaceFirst("^async-", "")) {
                case "count-int":
                    countInt = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.INT));
                    break;
                case "count-string":
                    countString = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.STRING));
                    break;
                case "count-list":
                    countList = getRuntimeContext().getListState(new ListStateDescriptor<>("count", Types.LONG));
                    break;
                case "count-renamed":
                    count = getRuntimeContext().getState(new ValueStateDescriptor<>("total", Types.LONG));
                    break;
                case "count-ttl": {
                    ValueStateDescriptor<Long> d = new ValueStateDescriptor<>("count", Types.LONG);
                    d.enableTimeToLive(StateTtlConfig.newBuilder(Duration.ofHours(1)).build());
                    count = getRuntimeContext().getState(d);
                    break;
                }
                default:
                    count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
            }
        }

        @Override
        public void processElement(Long value, Context ctx, Collector<String> out) throws Exception {
            long next;
            if (countInt != null) {
                Integer c = countInt.value();
                countInt.update(c == null ? 1 : c + 1);
                next = countInt.value();
            } else if (countString != null) {
                String c = countString.value();
                next = c == null ? 1 : Long.parseLong(c) + 1;
                countString.update(String.valueOf(next));
            } else if (countList != null) {
                countList.add(value);
                next = 0;
            } else {
                Long c = count.value();
                next = c == null ? 1 : c + 1;
                count.update(next);
            }
            ctx.timerService().registerProcessingTimeTimer(ctx.timerService().currentProcessingTime() + 3_600_000L);
            out.collect(ctx.getCurrentKey() + "=" + next);
        }
    }

    /** Map state "perBucket". */
    static final class Mapper extends KeyedProcessFunction<Long, Long, String> {
        private final String variant;
        private transient MapState<String, Long> perBucket;
        private transient MapState<String, String> perBucketString;

        Mapper(String variant) {
            this.variant = variant;
        }

        @Override
        public void open(OpenContext context) {
            if (variant.equals("map-value-string")) {
                perBucketString = getRuntimeContext().getMapState(new MapStateDescriptor<>("perBucket", Types.STRING, Types.STRING));
            } else {
                perBucket = getRuntimeContext().getMapState(new MapStateDescriptor<>("perBucket", Types.STRING, Types.LONG));
            }
        }

        @Override
        public void processElement(Long value, Context ctx, Collector<String> out) throws Exception {
            String bucket = "b" + (value % 3);
            if (perBucketString != null) {
                perBucketString.put(bucket, String.valueOf(value));
            } else {
                Long c = perBucket.get(bucket);
                perBucket.put(bucket, c == null ? 1 : c + 1);
            }
            out.collect(bucket);
        }
    }

    /** POJO value state "stats" (the Stats class differs per jar). */
    static final class PojoUser extends KeyedProcessFunction<Long, Long, String> {
        private transient ValueState<Stats> stats;

        @Override
        public void open(OpenContext context) {
            stats = getRuntimeContext().getState(new ValueStateDescriptor<>("stats", Types.POJO(Stats.class)));
        }

        @Override
        public void processElement(Long value, Context ctx, Collector<String> out) throws Exception {
            Stats s = stats.value();
            if (s == null) {
                s = new Stats();
            }
            s.add(value);
            stats.update(s);
            out.collect(s.toString());
        }
    }

    /** Operator (non-keyed) list state "buffer". */
    static final class Buffer extends RichMapFunction<Long, String> implements CheckpointedFunction {
        private final String variant;
        private transient ListState<Long> buffer;
        private transient ListState<String> bufferString;
        private transient long last;

        Buffer(String variant) {
            this.variant = variant;
        }

        @Override
        public String map(Long value) {
            last = value;
            return "b" + value;
        }

        @Override
        public void snapshotState(FunctionSnapshotContext context) throws Exception {
            if (bufferString != null) {
                bufferString.update(java.util.Collections.singletonList(String.valueOf(last)));
            } else {
                buffer.update(java.util.Collections.singletonList(last));
            }
        }

        @Override
        public void initializeState(FunctionInitializationContext context) throws Exception {
            if (variant.equals("buffer-string")) {
                bufferString = context.getOperatorStateStore().getListState(new ListStateDescriptor<>("buffer", Types.STRING));
            } else {
                buffer = context.getOperatorStateStore().getListState(new ListStateDescriptor<>("buffer", Types.LONG));
            }
        }
    }

    /** Broadcast state "rules" plus keyed value state "applied". */
    static final class Rules extends KeyedBroadcastProcessFunction<Long, Long, Long, String> {
        private final String variant;
        private transient ValueState<Long> applied;

        Rules(String variant) {
            this.variant = variant;
        }

        @Override
        public void open(OpenContext context) {
            applied = getRuntimeContext().getState(new ValueStateDescriptor<>("applied", Types.LONG));
        }

        @Override
        @SuppressWarnings("unchecked")
        public void processElement(Long value, ReadOnlyContext ctx, Collector<String> out) throws Exception {
            ReadOnlyBroadcastState<String, ?> rules = ctx.getBroadcastState((MapStateDescriptor<String, Object>) rulesDescriptor(variant));
            Object r = rules.get("latest");
            applied.update(value);
            out.collect(String.valueOf(r));
        }

        @Override
        @SuppressWarnings("unchecked")
        public void processBroadcastElement(Long value, Context ctx, Collector<String> out) throws Exception {
            BroadcastState<String, Object> rules = ctx.getBroadcastState((MapStateDescriptor<String, Object>) rulesDescriptor(variant));
            rules.put("latest", variant.equals("broadcast-string") ? String.valueOf(value) : (Object) value);
        }
    }
}
