package dev.streamjob.flink.checker.state;

import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.functions.RuntimeContext;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.PrioritizedOperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.SubTaskInitializationMetricsBuilder;
import org.apache.flink.runtime.checkpoint.metadata.CheckpointMetadata;
import org.apache.flink.runtime.execution.Environment;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.JobVertex;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.operators.coordination.OperatorEventDispatcher;
import org.apache.flink.runtime.state.StateBackend;
import org.apache.flink.runtime.state.StateBackendLoader;
import org.apache.flink.runtime.state.metainfo.StateMetaInfoSnapshot;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;
import org.apache.flink.state.api.runtime.SavepointEnvironment;
import org.apache.flink.streaming.api.graph.StreamConfig;
import org.apache.flink.streaming.api.operators.AbstractUdfStreamOperator;
import org.apache.flink.streaming.api.operators.InternalTimeServiceManager;
import org.apache.flink.streaming.api.operators.InternalTimeServiceManagerImpl;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.api.operators.SimpleOperatorFactory;
import org.apache.flink.streaming.api.operators.StreamOperator;
import org.apache.flink.streaming.api.operators.StreamOperatorFactory;
import org.apache.flink.streaming.api.operators.StreamOperatorFactoryUtil;
import org.apache.flink.streaming.api.operators.StreamOperatorStateContext;
import org.apache.flink.streaming.api.operators.StreamTaskStateInitializer;
import org.apache.flink.streaming.api.operators.StreamTaskStateInitializerImpl;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.tasks.StreamTask;
import org.apache.flink.streaming.runtime.tasks.StreamTaskCancellationContext;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Decides per state, as Flink's restore would, whether the new job can restore a savepoint.
 *
 * <p>For every operator of the new job (sources and sinks excepted: never created, never opened)
 * it restores that operator's part of the savepoint into the state backend the job configures
 * (Flink's own StreamTaskStateInitializerImpl, as a real task does; parallelism 1, one key group
 * per saved keyed handle unless {@code allKeyGroups}), then creates the operator from its
 * StreamConfig and calls initializeState() and open(): the job's own code registers its state
 * descriptors and Flink's backend code decides compatibility and throws what a real restore
 * would throw. The backends are wrapped by a {@link Recorder}. Measured against Flink's real
 * restore on 1.20 and 2.3, heap and RocksDB (flink/state-matrix/).
 *
 * <p>What it cannot see: state an operator registers only while it processes records (it shows
 * as LEFT_BEHIND), and failures of data in key groups it did not sample. An operator's own
 * initializeState() and open() run (that is where state is registered), so code there that
 * reaches out (opens a connection) does so from the check pod.
 */
public final class StateProbe {
    static final Logger LOG = LoggerFactory.getLogger(StateProbe.class);

    /** Every state's verdict, in the order of the new job's graph. */
    public final List<Row> rows = new ArrayList<>();
    /** Per operator uid: the first exception Flink's own code threw (what the restore fails with). */
    public final Map<String, String> firstFailure = new LinkedHashMap<>();
    /** Per operator uid: a failure of initializeState()/open() outside any state registration. */
    public final Map<String, String> undecided = new LinkedHashMap<>();

    private final JobGraph jobGraph;
    private final Configuration conf;
    private final ExecutionConfig executionConfig;
    private final ClassLoader cl;
    private final long checkpointId;
    private final boolean allKeyGroups;

    private StateProbe(JobGraph jobGraph, Configuration conf, ClassLoader cl, long checkpointId,
            boolean allKeyGroups) throws Exception {
        this.jobGraph = jobGraph;
        this.conf = conf;
        this.cl = cl;
        this.executionConfig = jobGraph.getSerializedExecutionConfig().deserializeValue(cl);
        this.checkpointId = checkpointId;
        this.allKeyGroups = allKeyGroups;
    }

    /**
     * Probes every operator of {@code jobGraph} that the savepoint holds state for.
     *
     * @param uidByNode the stream graph's node ids and their uids (null: none set)
     * @param sourceOrSinkNodes the stream graph's source and sink node ids
     */
    public static StateProbe run(JobGraph jobGraph, Map<Integer, String> uidByNode, Set<Integer> sourceOrSinkNodes,
            CheckpointMetadata metadata, Configuration conf, ClassLoader cl, boolean allKeyGroups) throws Exception {
        StateProbe probe = new StateProbe(jobGraph, conf, cl, metadata.getCheckpointId(), allKeyGroups);
        Map<OperatorID, OperatorState> saved = new LinkedHashMap<>();
        for (OperatorState s : metadata.getOperatorStates()) {
            saved.put(s.getOperatorID(), s);
        }
        Thread thread = Thread.currentThread();
        ClassLoader previous = thread.getContextClassLoader();
        thread.setContextClassLoader(cl);
        try {
            for (JobVertex vertex : jobGraph.getVerticesSortedTopologicallyFromSources()) {
                StreamConfig vertexConfig = new StreamConfig(vertex.getConfiguration());
                for (Map.Entry<Integer, StreamConfig> e : vertexConfig.getTransitiveChainedTaskConfigsWithSelf(cl).entrySet()) {
                    StreamConfig opConfig = e.getValue();
                    OperatorState state = saved.get(opConfig.getOperatorID());
                    if (!hasState(state)) {
                        continue; // nothing to restore: whatever it registers starts empty
                    }
                    String uid = uidByNode.get(e.getKey());
                    if (uid == null) {
                        uid = opConfig.getOperatorName() + " (id " + opConfig.getOperatorID() + ")";
                    }
                    probe.operator(uid, opConfig, state, sourceOrSinkNodes.contains(e.getKey()));
                }
            }
        } finally {
            thread.setContextClassLoader(previous);
        }
        return probe;
    }

    private void operator(String uid, StreamConfig opConfig, OperatorState state, boolean sourceOrSinkNode)
            throws Exception {
        SavedMeta meta = SavedMeta.read(state, cl);
        StreamOperatorFactory<?> factory = opConfig.getStreamOperatorFactory(cl);
        String skip = sourceOrSinkNode ? "source or sink" : sourceOrSink(factory);
        if (skip != null) {
            for (String name : meta.names()) {
                rows.add(new Row(uid, name, meta.kind(name), Row.Verdict.NOT_CHECKED,
                        skip + ": the pre-check never creates it"));
            }
            return;
        }
        if (meta.readError != null) {
            rows.add(new Row(uid, "(meta data)", "-", Row.Verdict.INCOMPATIBLE, meta.readError));
            firstFailure.putIfAbsent(uid, meta.readError);
            return;
        }
        probe(uid, opConfig, state, meta, state.getMaxParallelism());
    }

    private void probe(String uid, StreamConfig opConfig, OperatorState state, SavedMeta meta, int maxParallelism)
            throws Exception {
        Recorder rec = probeOnce(opConfig, state, maxParallelism, false);
        if (rec.restoreFailure == null) {
            verdicts(uid, meta, rec, null);
            return;
        }
        // Flink's restore of the saved state itself failed (key serializer, or reading the saved
        // data): nothing was registered. Capture the new job's descriptors against an empty backend
        // and compare them here, so every state still gets a verdict.
        String why = Reflect.describe(rec.restoreFailure);
        firstFailure.putIfAbsent(uid, why);
        Recorder capture = probeOnce(opConfig, null, maxParallelism, true);
        capture.newKeySerializer = capture.newKeySerializer != null ? capture.newKeySerializer : opConfig.getStateKeySerializer(cl);
        verdicts(uid, meta, capture, why);
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    private Recorder probeOnce(StreamConfig opConfig, OperatorState state, int maxParallelism, boolean captureOnly)
            throws Exception {
        // The task configuration: job configuration + the operator's own StreamConfig, with no
        // network outputs (the probe's task has no record writers).
        Configuration taskConf = new Configuration();
        taskConf.addAll(jobGraph.getJobConfiguration());
        taskConf.addAll(conf);
        taskConf.addAll(opConfig.getConfiguration());
        StreamConfig config = new StreamConfig(taskConf);
        config.setVertexNonChainedOutputs(Collections.emptyList());
        config.setOperatorNonChainedOutputs(Collections.emptyList());
        config.serializeAllConfigs();

        PrioritizedOperatorSubtaskState restored = state == null
                ? PrioritizedOperatorSubtaskState.emptyNotRestored()
                : ProbeTask.restoredState(state, checkpointId, allKeyGroups);
        RuntimeContext runtimeContext = ProbeTask.runtimeContext(opConfig.getOperatorName(), maxParallelism, cl, executionConfig);
        Environment env = new SavepointEnvironment.Builder(runtimeContext, executionConfig, maxParallelism)
                .setConfiguration(taskConf).setSubtaskIndex(0).setPrioritizedOperatorSubtaskState(restored).build();
        Environment emptyEnv = new SavepointEnvironment.Builder(runtimeContext, executionConfig, maxParallelism)
                .setConfiguration(taskConf).setSubtaskIndex(0)
                .setPrioritizedOperatorSubtaskState(PrioritizedOperatorSubtaskState.emptyNotRestored()).build();

        ProbeTask task = new ProbeTask(env);
        // The state backend as StreamTask#createStateBackend chooses it.
        StateBackend backend = StateBackendLoader.fromApplicationOrConfigOrDefault(
                config.getStateBackend(cl), env.getJobConfiguration(), env.getTaskManagerInfo().getConfiguration(), cl, LOG);

        Recorder rec = new Recorder();
        rec.captureOnly = captureOnly;
        InternalTimeServiceManager.Provider timers = (InternalTimeServiceManager.Provider) Proxy.newProxyInstance(
                StateProbe.class.getClassLoader(), new Class<?>[] {InternalTimeServiceManager.Provider.class},
                (proxy, m, args) -> {
                    if (!m.getName().equals("create")) return Reflect.objectMethod(proxy, m, args);
                    // args[1]: the keyed backend (1.20) / its PriorityQueueSetFactory (2.x): timers' state
                    Object[] a = args.clone();
                    a[1] = rec.keyedProxy(a[1]);
                    return Reflect.invokeStatic(InternalTimeServiceManagerImpl.class, "create", a);
                });
        StreamTaskStateInitializer real = new StreamTaskStateInitializerImpl(env, backend,
                new SubTaskInitializationMetricsBuilder(System.currentTimeMillis()), TtlTimeProvider.DEFAULT,
                timers, StreamTaskCancellationContext.alwaysRunning());
        StreamTaskStateInitializer empty = new StreamTaskStateInitializerImpl(emptyEnv, backend);
        StreamTaskStateInitializer initializer = (StreamTaskStateInitializer) Proxy.newProxyInstance(
                StateProbe.class.getClassLoader(), new Class<?>[] {StreamTaskStateInitializer.class},
                (proxy, m, args) -> {
                    if (!m.getName().equals("streamOperatorStateContext")) return Reflect.objectMethod(proxy, m, args);
                    StreamOperatorStateContext ctx;
                    try {
                        ctx = (StreamOperatorStateContext) m.invoke(real, args);
                    } catch (InvocationTargetException e) {
                        rec.restoreFailure = e.getCause();
                        throw e.getCause();
                    }
                    StreamOperatorStateContext fallback = (StreamOperatorStateContext) m.invoke(empty, args);
                    rec.fallbackKeyed = fallback.keyedStateBackend();
                    rec.fallbackOperator = fallback.operatorStateBackend();
                    rec.realKeyed = ctx.keyedStateBackend();
                    rec.realAsync = Reflect.asyncBackend(ctx);
                    rec.fallbackAsync = Reflect.asyncBackend(fallback);
                    rec.newKeySerializer = (TypeSerializer<?>) args[4];
                    return Proxy.newProxyInstance(StateProbe.class.getClassLoader(),
                            new Class<?>[] {StreamOperatorStateContext.class}, (p2, m2, a2) -> {
                                Object r = Reflect.invoke(m2, ctx, a2);
                                if ((m2.getName().equals("keyedStateBackend") || m2.getName().equals("asyncKeyedStateBackend"))
                                        && r != null) return rec.keyedProxy(r);
                                if (m2.getName().equals("operatorStateBackend") && r != null) return rec.operatorProxy(r);
                                return r;
                            });
                });

        Output<StreamRecord<Object>> output = (Output<StreamRecord<Object>>) Reflect.noOp(Output.class);
        OperatorEventDispatcher dispatcher = (OperatorEventDispatcher) Reflect.noOp(OperatorEventDispatcher.class);
        StreamOperator<Object> operator = (StreamOperator<Object>) StreamOperatorFactoryUtil.createOperator(
                (StreamOperatorFactory<Object>) config.getStreamOperatorFactory(cl), (StreamTask) task, config, output, dispatcher).f0;

        // What the real task does for each operator of its chain (initializeStateAndOpenOperators).
        boolean initialized = false;
        try {
            operator.initializeState(initializer);
            initialized = true;
            operator.open();
        } catch (Throwable t) {
            if (initialized || rec.restoreFailure == null) {
                rec.unattributed = t;
            }
        }
        // not closed: close() may run the job's own shutdown code; the check's JVM exits instead
        return rec;
    }

    /** The rows of one operator. {@code restoreFailure}: Flink's restore failed before any
     * registration; the registrations were then captured against an empty backend. */
    private void verdicts(String uid, SavedMeta meta, Recorder rec, String restoreFailure) {
        if (restoreFailure != null) {
            rows.add(new Row(uid, "(restore)", "-", Row.Verdict.INCOMPATIBLE, "Flink's backend restore failed: " + restoreFailure));
        }
        if (meta.keySnapshot != null && rec.newKeySerializer != null) {
            rows.add(Compatibility.keyRow(uid, meta, rec.newKeySerializer));
        } else if (meta.keySnapshot != null) {
            rows.add(new Row(uid, "(key)", "KEY", Row.Verdict.INCOMPATIBLE,
                    "the savepoint holds keyed state but the new operator is not keyed"));
        }
        for (Registration r : rec.registrations.values()) {
            StateMetaInfoSnapshot old = meta.lookup(r.scope, r.name);
            if (r.failure != null) {
                String why = Reflect.describe(r.failure);
                firstFailure.putIfAbsent(uid, why);
                rows.add(new Row(uid, r.name, r.kind, Row.Verdict.INCOMPATIBLE, why));
            } else if (old == null) {
                rows.add(new Row(uid, r.name, r.kind, Row.Verdict.NEW, "not in the savepoint: starts empty"));
            } else if (restoreFailure != null && !r.kind.equals(meta.kind(r.name))) {
                rows.add(new Row(uid, r.name, r.kind, Row.Verdict.INCOMPATIBLE, "computed: kind " + meta.kind(r.name)
                        + " in the savepoint, registered as " + r.kind));
            } else {
                Row row = Compatibility.compatRow(uid, r, old, rec);
                rows.add(restoreFailure == null ? row
                        : new Row(row.uid, row.state, row.kind, row.verdict, "computed (Flink's restore failed first): " + row.reason));
            }
        }
        for (String name : meta.names()) {
            if (!rec.registered(meta.scope(name), name)) {
                rows.add(new Row(uid, name, meta.kind(name), Row.Verdict.LEFT_BEHIND,
                        "in the savepoint, not registered by the new operator's initializeState()/open() (kept unused,"
                                + " or registered later at run time)"));
            }
        }
        if (rec.unattributed != null) {
            // Not a state registration: the job's own code or the probe's environment. Flink may
            // or may not fail the same way: undecided.
            String why = Reflect.describe(rec.unattributed);
            undecided.putIfAbsent(uid, why);
            rows.add(new Row(uid, "(operator)", "-", Row.Verdict.UNDECIDED,
                    "initializeState()/open() failed outside any state registration: " + why));
        }
    }

    static boolean hasState(OperatorState state) {
        if (state == null) return false;
        for (OperatorSubtaskState s : state.getStates()) {
            if (s.hasState()) return true;
        }
        return false;
    }

    /** What makes an operator a source or a sink, which the probe never creates (null: neither). */
    static String sourceOrSink(StreamOperatorFactory<?> factory) {
        if (Reflect.isA(factory.getClass(), "org.apache.flink.streaming.api.operators.SourceOperatorFactory")) return "source";
        if (factory.getClass().getName().startsWith("org.apache.flink.streaming.runtime.operators.sink.")) return "sink";
        if (factory instanceof SimpleOperatorFactory) {
            StreamOperator<?> op = ((SimpleOperatorFactory<?>) factory).getOperator();
            String name = op.getClass().getName();
            if (Reflect.isA(op.getClass(), "org.apache.flink.streaming.api.operators.StreamSource")
                    || Reflect.isA(op.getClass(), "org.apache.flink.streaming.api.operators.StreamSink")
                    || name.startsWith("org.apache.flink.streaming.runtime.operators.sink.")) {
                return "source or sink operator";
            }
            if (op instanceof AbstractUdfStreamOperator) {
                Class<?> fn = ((AbstractUdfStreamOperator<?, ?>) op).getUserFunction().getClass();
                for (String iface : new String[] {"SinkFunction", "SourceFunction", "TwoPhaseCommitSinkFunction"}) {
                    if (Reflect.hasSimpleName(fn, iface)) return "legacy " + iface;
                }
            }
        }
        return null;
    }
}
