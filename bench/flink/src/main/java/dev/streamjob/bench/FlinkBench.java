package dev.streamjob.bench;

import dev.streamjob.bench.Records.Bid;
import dev.streamjob.bench.Records.CountSum;
import dev.streamjob.bench.Records.GenCountOut;
import dev.streamjob.bench.Records.GenRecord;
import dev.streamjob.bench.Records.Q1Out;
import dev.streamjob.bench.Records.Q2Out;
import dev.streamjob.bench.Records.Q5Out;
import dev.streamjob.bench.Records.Q7Out;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.stream.Stream;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.configuration.WebOptions;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.runtime.checkpoint.AbstractCheckpointStats;
import org.apache.flink.runtime.checkpoint.CheckpointStatsSnapshot;
import org.apache.flink.runtime.checkpoint.CompletedCheckpointStats;
import org.apache.flink.runtime.executiongraph.ArchivedExecutionGraph;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobmaster.JobResult;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.graph.StreamGraph;
import org.apache.flink.streaming.api.windowing.assigners.SlidingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;

/**
 * Runs one benchmark query on an in-process Flink MiniCluster and prints one JSON line.
 *
 * <pre>
 * FlinkBench QUERY INPUT_DIR OUTPUT_DIR PARALLELISM [CHECKPOINT_INTERVAL_MS] [options]
 *   QUERY: q0 | q1 | q2 | q5 | q7 | gen-count
 *   options: --codec zstd|snappy|gzip|lz4_raw|uncompressed   (default zstd)
 *            --checkpoint-dir DIR                             (default: a temp dir, deleted)
 * </pre>
 */
public final class FlinkBench {
    private FlinkBench() {}

    public static void main(String[] args) throws Exception {
        List<String> pos = new ArrayList<>();
        String codecName = "zstd";
        String checkpointDirArg = null;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--codec":
                    codecName = args[++i];
                    break;
                case "--checkpoint-dir":
                    checkpointDirArg = args[++i];
                    break;
                default:
                    pos.add(args[i]);
            }
        }
        if (pos.size() < 4 || pos.size() > 5) {
            System.err.println(
                    "usage: FlinkBench QUERY INPUT_DIR OUTPUT_DIR PARALLELISM [CHECKPOINT_INTERVAL_MS]"
                            + " [--codec C] [--checkpoint-dir D]");
            System.exit(2);
        }
        String query = pos.get(0);
        Path inputDir = Path.of(pos.get(1)).toAbsolutePath();
        Path outputDir = Path.of(pos.get(2)).toAbsolutePath();
        int parallelism = Integer.parseInt(pos.get(3));
        long checkpointMs = pos.size() == 5 ? Long.parseLong(pos.get(4)) : 10_000L;
        CompressionCodecName codec = CompressionCodecName.valueOf(codecName.toUpperCase(Locale.ROOT));

        Path input = inputDir.resolve(query.equals("gen-count") ? "generator.csv" : "bids.csv");
        if (!Files.isRegularFile(input)) {
            throw new IllegalArgumentException("missing input file " + input);
        }
        if (Files.isDirectory(outputDir)) {
            try (Stream<Path> s = Files.list(outputDir)) {
                if (s.findAny().isPresent()) {
                    throw new IllegalArgumentException("output dir is not empty: " + outputDir);
                }
            }
        }
        Files.createDirectories(outputDir);
        long events = countRecords(input);

        boolean tempCheckpointDir = checkpointDirArg == null;
        Path checkpointDir =
                tempCheckpointDir
                        ? Files.createTempDirectory("flink-bench-checkpoints")
                        : Path.of(checkpointDirArg).toAbsolutePath();

        Configuration conf = new Configuration();
        conf.set(CoreOptions.DEFAULT_PARALLELISM, parallelism);
        conf.set(TaskManagerOptions.NUM_TASK_SLOTS, parallelism);
        conf.set(PipelineOptions.OBJECT_REUSE, true);
        conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(checkpointMs));
        conf.set(CheckpointingOptions.CHECKPOINTING_CONSISTENCY_MODE, CheckpointingMode.EXACTLY_ONCE);
        conf.set(CheckpointingOptions.ENABLE_UNALIGNED, false);
        conf.set(CheckpointingOptions.MAX_CONCURRENT_CHECKPOINTS, 1);
        conf.set(StateBackendOptions.STATE_BACKEND, "hashmap");
        conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, checkpointDir.toUri().toString());
        conf.set(WebOptions.CHECKPOINTS_HISTORY_SIZE, 100_000);
        conf.set(RestOptions.BIND_PORT, "0"); // never clash with another process on 8081
        conf.set(RestOptions.ADDRESS, "127.0.0.1");
        conf.set(RestOptions.BIND_ADDRESS, "127.0.0.1");

        StreamExecutionEnvironment env = new StreamExecutionEnvironment(conf);
        build(env, query, input.toString(), outputDir.toString(), codec);
        StreamGraph streamGraph = env.getStreamGraph();
        streamGraph.setJobName("streamjob-bench-" + query + "-p" + parallelism);
        JobGraph jobGraph = streamGraph.getJobGraph();
        JobID jobId = jobGraph.getJobID();
        if (System.getenv("BENCH_DEBUG") != null) {
            System.err.println("checkpoint coordinator config: "
                    + jobGraph.getCheckpointingSettings().getCheckpointCoordinatorConfiguration());
        }

        MiniClusterConfiguration mcConf =
                new MiniClusterConfiguration.Builder()
                        .setConfiguration(conf)
                        .setNumTaskManagers(1)
                        .setNumSlotsPerTaskManager(parallelism)
                        .build();
        double seconds;
        double endOfInputSeconds = -1;
        List<Long> durations = new ArrayList<>();
        List<Long> triggerOffsets = new ArrayList<>();
        long t0Millis;
        long jobRunningMs;
        try (MiniCluster cluster = new MiniCluster(mcConf)) {
            cluster.start();
            long t0 = System.nanoTime();
            t0Millis = System.currentTimeMillis();
            cluster.submitJob(jobGraph).get();
            CompletableFuture<JobResult> result = cluster.requestJobResult(jobId);
            JobResult jr = result.get();
            long t1 = System.nanoTime();
            seconds = (t1 - t0) / 1e9;
            long eoi = CsvFormats.END_OF_INPUT_NANOS.get();
            if (eoi != 0) {
                endOfInputSeconds = (eoi - t0) / 1e9;
            }
            if (!jr.isSuccess()) {
                throw new RuntimeException(
                        "job failed", jr.getSerializedThrowable().get().deserializeError(FlinkBench.class.getClassLoader()));
            }
            ArchivedExecutionGraph graph = cluster.getArchivedExecutionGraph(jobId).get();
            jobRunningMs = graph.getStatusTimestamp(JobStatus.FINISHED) - graph.getStatusTimestamp(JobStatus.RUNNING);
            CheckpointStatsSnapshot stats = graph.getCheckpointStatsSnapshot();
            if (stats != null) {
                List<AbstractCheckpointStats> all = new ArrayList<>(stats.getHistory().getCheckpoints());
                all.sort(Comparator.comparingLong(AbstractCheckpointStats::getCheckpointId));
                for (AbstractCheckpointStats s : all) {
                    if (s instanceof CompletedCheckpointStats) {
                        durations.add(s.getEndToEndDuration());
                        triggerOffsets.add(s.getTriggerTimestamp() - t0Millis);
                        if (System.getenv("BENCH_DEBUG") != null) {
                            System.err.println("checkpoint " + s.getCheckpointId() + " " + s.getProperties()
                                    + " subtasks=" + s.getNumberOfSubtasks() + " acked=" + s.getNumberOfAcknowledgedSubtasks());
                        }
                    }
                }
            }
        }
        if (tempCheckpointDir) {
            deleteRecursively(checkpointDir);
        }

        ReadBack.Result out = ReadBack.read(outputDir);
        String sumColumn = primarySumColumn(query);
        long outputSum = out.columnSums.getOrDefault(sumColumn, 0L);

        StringBuilder json = new StringBuilder();
        json.append("{\"engine\":\"flink\"");
        json.append(",\"version\":\"").append(EnvironmentInformation.getVersion()).append('"');
        json.append(",\"query\":\"").append(query).append('"');
        json.append(",\"parallelism\":").append(parallelism);
        json.append(",\"checkpointIntervalMs\":").append(checkpointMs);
        json.append(",\"events\":").append(events);
        json.append(",\"seconds\":").append(String.format(Locale.ROOT, "%.3f", seconds));
        json.append(",\"eventsPerSecond\":").append(String.format(Locale.ROOT, "%.1f", events / seconds));
        json.append(",\"endOfInputSeconds\":").append(String.format(Locale.ROOT, "%.3f", endOfInputSeconds));
        json.append(",\"jobRunningSeconds\":").append(String.format(Locale.ROOT, "%.3f", jobRunningMs / 1e3));
        json.append(",\"checkpointDurationsMs\":").append(durations);
        json.append(",\"checkpointTriggeredAtMs\":").append(triggerOffsets);
        json.append(",\"checkpointP99Ms\":").append(percentile(durations, 0.99));
        json.append(",\"codec\":\"").append(codec.name().toLowerCase(Locale.ROOT)).append('"');
        json.append(",\"outputFiles\":").append(out.files);
        json.append(",\"outputRecords\":").append(out.records);
        json.append(",\"outputSumColumn\":\"").append(sumColumn).append('"');
        json.append(",\"outputSum\":").append(outputSum);
        json.append(",\"columnSums\":{");
        boolean first = true;
        for (Map.Entry<String, Long> e : out.columnSums.entrySet()) {
            if (!first) {
                json.append(',');
            }
            first = false;
            json.append('"').append(e.getKey()).append("\":").append(e.getValue());
        }
        json.append("}}");
        System.out.println(json);
        System.out.flush();
        // MiniCluster leaves non-daemon threads behind in some versions: exit explicitly.
        System.exit(0);
    }

    /** The column whose checksum is "outputSum" (see ReadBack for the per-type definition). */
    static String primarySumColumn(String query) {
        switch (query) {
            case "q0":
            case "q2":
                return "price";
            case "q1":
                return "price_eur";
            case "q5":
                return "count";
            case "q7":
                return "max_price";
            case "gen-count":
                return "sum_value";
            default:
                throw new IllegalArgumentException(query);
        }
    }

    static void build(
            StreamExecutionEnvironment env, String query, String input, String output, CompressionCodecName codec) {
        if (query.equals("gen-count")) {
            DataStream<GenRecord> gen =
                    env.fromSource(
                                    FileSource.forRecordStreamFormat(
                                                    new CsvFormats.GenFormat(),
                                                    new org.apache.flink.core.fs.Path(input))
                                            .build(),
                                    WatermarkStrategy.<GenRecord>forBoundedOutOfOrderness(Duration.ZERO)
                                            .withTimestampAssigner((r, ts) -> r.ts),
                                    "generator.csv")
                            .setParallelism(1);
            gen.keyBy(r -> r.key)
                    .window(TumblingEventTimeWindows.of(Duration.ofSeconds(1)))
                    .aggregate(new CountSumAgg(), new GenCountWindow())
                    .sinkTo(ParquetOut.sink(output, ParquetOut.GEN_COUNT_SCHEMA, ParquetOut.GEN_COUNT_WRITER, codec));
            return;
        }
        DataStream<Bid> bids =
                env.fromSource(
                                FileSource.forRecordStreamFormat(
                                                new CsvFormats.BidFormat(), new org.apache.flink.core.fs.Path(input))
                                        .build(),
                                WatermarkStrategy.<Bid>forBoundedOutOfOrderness(Duration.ZERO)
                                        .withTimestampAssigner((b, ts) -> b.date_time),
                                "bids.csv")
                        .setParallelism(1);
        switch (query) {
            case "q0":
                bids.sinkTo(ParquetOut.sink(output, ParquetOut.BID_SCHEMA, ParquetOut.BID_WRITER, codec));
                break;
            case "q1":
                bids.map(
                                b -> {
                                    Q1Out o = new Q1Out();
                                    o.auction = b.auction;
                                    o.bidder = b.bidder;
                                    o.price_eur = b.price * 0.908;
                                    o.date_time = b.date_time;
                                    return o;
                                })
                        .returns(Q1Out.class)
                        .sinkTo(ParquetOut.sink(output, ParquetOut.Q1_SCHEMA, ParquetOut.Q1_WRITER, codec));
                break;
            case "q2":
                bids.filter(b -> b.auction % 123 == 0)
                        .map(
                                b -> {
                                    Q2Out o = new Q2Out();
                                    o.auction = b.auction;
                                    o.price = b.price;
                                    return o;
                                })
                        .returns(Q2Out.class)
                        .sinkTo(ParquetOut.sink(output, ParquetOut.Q2_SCHEMA, ParquetOut.Q2_WRITER, codec));
                break;
            case "q5":
                bids.keyBy(b -> b.auction)
                        .window(SlidingEventTimeWindows.of(Duration.ofSeconds(10), Duration.ofSeconds(2)))
                        .aggregate(new CountAgg(), new Q5Window())
                        .sinkTo(ParquetOut.sink(output, ParquetOut.Q5_SCHEMA, ParquetOut.Q5_WRITER, codec));
                break;
            case "q7":
                bids.keyBy(b -> 0)
                        .window(TumblingEventTimeWindows.of(Duration.ofSeconds(10)))
                        .aggregate(new MaxPriceAgg(), new Q7Window())
                        .sinkTo(ParquetOut.sink(output, ParquetOut.Q7_SCHEMA, ParquetOut.Q7_WRITER, codec));
                break;
            default:
                throw new IllegalArgumentException("unknown query " + query);
        }
    }

    // ---- incremental aggregates (one accumulator per key and window) ----

    public static final class CountAgg implements AggregateFunction<Bid, Long, Long> {
        @Override
        public Long createAccumulator() {
            return 0L;
        }

        @Override
        public Long add(Bid value, Long acc) {
            return acc + 1;
        }

        @Override
        public Long getResult(Long acc) {
            return acc;
        }

        @Override
        public Long merge(Long a, Long b) {
            return a + b;
        }
    }

    public static final class MaxPriceAgg implements AggregateFunction<Bid, Long, Long> {
        @Override
        public Long createAccumulator() {
            return Long.MIN_VALUE;
        }

        @Override
        public Long add(Bid value, Long acc) {
            return Math.max(acc, value.price);
        }

        @Override
        public Long getResult(Long acc) {
            return acc;
        }

        @Override
        public Long merge(Long a, Long b) {
            return Math.max(a, b);
        }
    }

    public static final class CountSumAgg implements AggregateFunction<GenRecord, CountSum, CountSum> {
        @Override
        public CountSum createAccumulator() {
            return new CountSum();
        }

        @Override
        public CountSum add(GenRecord value, CountSum acc) {
            acc.count++;
            acc.sum += value.value;
            return acc;
        }

        @Override
        public CountSum getResult(CountSum acc) {
            return acc;
        }

        @Override
        public CountSum merge(CountSum a, CountSum b) {
            a.count += b.count;
            a.sum += b.sum;
            return a;
        }
    }

    public static final class Q5Window extends ProcessWindowFunction<Long, Q5Out, Long, TimeWindow> {
        @Override
        public void process(Long key, Context ctx, Iterable<Long> counts, Collector<Q5Out> out) {
            Q5Out o = new Q5Out();
            o.auction = key;
            o.window_start = ctx.window().getStart();
            o.window_end = ctx.window().getEnd();
            o.count = counts.iterator().next();
            out.collect(o);
        }
    }

    public static final class Q7Window extends ProcessWindowFunction<Long, Q7Out, Integer, TimeWindow> {
        @Override
        public void process(Integer key, Context ctx, Iterable<Long> max, Collector<Q7Out> out) {
            Q7Out o = new Q7Out();
            o.window_start = ctx.window().getStart();
            o.window_end = ctx.window().getEnd();
            o.max_price = max.iterator().next();
            out.collect(o);
        }
    }

    public static final class GenCountWindow
            extends ProcessWindowFunction<CountSum, GenCountOut, String, TimeWindow> {
        @Override
        public void process(String key, Context ctx, Iterable<CountSum> acc, Collector<GenCountOut> out) {
            CountSum cs = acc.iterator().next();
            GenCountOut o = new GenCountOut();
            o.key = key;
            o.window_start = ctx.window().getStart();
            o.window_end = ctx.window().getEnd();
            o.count = cs.count;
            o.sum_value = cs.sum;
            out.collect(o);
        }
    }

    // ---- helpers ----

    /** Data lines of a CSV file: line breaks, minus the header, plus an unterminated last line. */
    static long countRecords(Path file) throws IOException {
        long lines = 0;
        int last = '\n';
        byte[] buf = new byte[1 << 20];
        try (InputStream in = Files.newInputStream(file)) {
            int n;
            while ((n = in.read(buf)) > 0) {
                for (int i = 0; i < n; i++) {
                    if (buf[i] == '\n') {
                        lines++;
                    }
                }
                last = buf[n - 1];
            }
        }
        if (last != '\n') {
            lines++;
        }
        return Math.max(0, lines - 1);
    }

    static long percentile(List<Long> values, double p) {
        if (values.isEmpty()) {
            return -1;
        }
        List<Long> sorted = new ArrayList<>(values);
        sorted.sort(null);
        int idx = (int) Math.ceil(p * sorted.size()) - 1;
        return sorted.get(Math.max(0, Math.min(sorted.size() - 1, idx)));
    }

    static void deleteRecursively(Path p) throws IOException {
        if (!Files.exists(p)) {
            return;
        }
        try (Stream<Path> s = Files.walk(p)) {
            s.sorted(Comparator.reverseOrder()).forEach(x -> x.toFile().delete());
        }
    }
}
