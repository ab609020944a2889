package dev.streamjob.precheck34;

import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobInfoImpl;
import org.apache.flink.api.common.TaskInfoImpl;
import org.apache.flink.api.common.functions.RuntimeContext;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.StateDescriptor;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.TypeSerializerSchemaCompatibility;
import org.apache.flink.api.common.typeutils.TypeSerializerSnapshot;
import org.apache.flink.api.dag.Pipeline;
import org.apache.flink.client.FlinkPipelineTranslationUtil;
import org.apache.flink.client.program.PackagedProgram;
import org.apache.flink.client.program.PackagedProgramUtils;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.FSDataInputStream;
import org.apache.flink.core.memory.DataInputViewStreamWrapper;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.PrioritizedOperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.RoundRobinOperatorStateRepartitioner;
import org.apache.flink.runtime.checkpoint.StateObjectCollection;
import org.apache.flink.runtime.checkpoint.SubTaskInitializationMetricsBuilder;
import org.apache.flink.runtime.checkpoint.metadata.CheckpointMetadata;
import org.apache.flink.runtime.execution.Environment;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.JobVertex;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.state.CheckpointableKeyedStateBackend;
import org.apache.flink.runtime.state.IncrementalRemoteKeyedStateHandle;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupsStateHandle;
import org.apache.flink.runtime.state.KeyedBackendSerializationProxy;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.OperatorBackendSerializationProxy;
import org.apache.flink.runtime.state.OperatorStateBackend;
import org.apache.flink.runtime.state.OperatorStateHandle;
import org.apache.flink.runtime.state.StateBackend;
import org.apache.flink.runtime.state.StateBackendLoader;
import org.apache.flink.runtime.state.StreamStateHandle;
import org.apache.flink.runtime.state.metainfo.StateMetaInfoSnapshot;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.state.api.runtime.NeverFireProcessingTimeService;
import org.apache.flink.state.api.runtime.SavepointEnvironment;
import org.apache.flink.state.api.runtime.SavepointLoader;
import org.apache.flink.streaming.api.graph.StreamConfig;
import org.apache.flink.streaming.api.graph.StreamGraph;
import org.apache.flink.streaming.api.graph.StreamGraphHasherV2;
import org.apache.flink.streaming.api.graph.StreamNode;
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
import org.apache.flink.streaming.api.operators.AbstractUdfStreamOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.runtime.operators.coordination.OperatorEventDispatcher;
import org.apache.flink.streaming.runtime.tasks.StreamTask;
import org.apache.flink.streaming.runtime.tasks.StreamTaskCancellationContext;
import org.apache.flink.util.StateMigrationException;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.File;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Prototype for issue #34: decide per state, as Flink's restore would, whether the NEW job can
 * restore a savepoint.
 *
 * <p>Approach (b): for every operator of the new job (sources and sinks excepted: never created,
 * never opened) it restores that operator's part of the savepoint into the state backend the job
 * would use (Flink's own StreamTaskStateInitializerImpl, as a real task does; parallelism 1, one key
 * group per saved keyed handle unless --all-key-groups), then instantiates the operator from its
 * StreamConfig and calls initializeState() and open() — so the job's own code registers its state
 * descriptors and Flink's backend code performs the compatibility checks and throws what a real
 * restore would throw. The backends are wrapped in recording proxies: every registration (keyed
 * value/list/map/reducing/aggregating, timers, operator list/union, broadcast) is recorded, a
 * failing one is answered from a fresh empty backend so open() goes on and the remaining
 * descriptors are seen too.
 *
 * <p>Usage: StateProbe --savepoint P --jar J [--class C] [--parallelism N] [--conf k=v]...
 * [--all-key-groups] -- [job args]
 */
public final class StateProbe {
    static final Logger LOG = LoggerFactory.getLogger(StateProbe.class);
    static final PrintStream OUT = System.out;

    enum Verdict { COMPATIBLE_AS_IS, AFTER_MIGRATION, INCOMPATIBLE, NEW, LEFT_BEHIND, NOT_CHECKED, UNDECIDED }

    static final class Row {
        final String uid;
        final String state;
        final String kind;
        final Verdict verdict;
        final String reason;

        Row(String uid, String state, String kind, Verdict verdict, String reason) {
            this.uid = uid;
            this.state = state;
            this.kind = kind;
            this.verdict = verdict;
            this.reason = reason;
        }
    }

    static final List<Row> ROWS = new ArrayList<>();
    /** The savepoint's checkpoint id (the restored operators' isRestored() / restoredCheckpointId). */
    static long CHECKPOINT_ID = 1L;
    /** Per operator: the first exception Flink's own code threw (what the real restore fails with). */
    static final Map<String, String> FIRST_FAILURE = new LinkedHashMap<>();
    /** Per operator: a failure of initializeState()/open() outside any state registration. */
    static final Map<String, String> UNDECIDED = new LinkedHashMap<>();

    public static void main(String[] argv) throws Exception {
        System.setOut(System.err); // the job's main() may print
        String savepoint = null, jar = null, entry = null;
        int parallelism = 1;
        boolean allKeyGroups = false;
        Configuration conf = new Configuration();
        List<String> jobArgs = new ArrayList<>();
        for (int i = 0; i < argv.length; i++) {
            switch (argv[i]) {
                case "--savepoint": savepoint = argv[++i]; break;
                case "--jar": jar = argv[++i]; break;
                case "--class": entry = argv[++i]; break;
                case "--parallelism": parallelism = Integer.parseInt(argv[++i]); break;
                case "--all-key-groups": allKeyGroups = true; break;
                case "--conf": {
                    String kv = argv[++i];
                    conf.setString(kv.substring(0, kv.indexOf('=')), kv.substring(kv.indexOf('=') + 1));
                    break;
                }
                case "--":
                    for (i++; i < argv.length; i++) jobArgs.add(argv[i]);
                    break;
                default: throw new IllegalArgumentException("unknown argument " + argv[i]);
            }
        }
        if (savepoint == null || jar == null) {
            throw new IllegalArgumentException("--savepoint and --jar are required");
        }
        int rc;
        try {
            rc = run(savepoint, jar, entry, parallelism, conf, jobArgs, allKeyGroups);
        } catch (Throwable t) {
            OUT.println("ERROR the probe could not run: " + describe(t));
            t.printStackTrace();
            rc = 2;
        }
        OUT.flush();
        System.exit(rc); // the environments' I/O threads are not shut down one by one
    }

    static int run(String savepoint, String jar, String entry, int parallelism, Configuration conf,
            List<String> jobArgs, boolean allKeyGroups) throws Exception {
        PackagedProgram.Builder builder = PackagedProgram.newBuilder().setJarFile(new File(jar))
                .setArguments(jobArgs.toArray(new String[0])).setConfiguration(conf);
        if (entry != null) builder.setEntryPointClassName(entry);
        PackagedProgram program = builder.build();
        ClassLoader cl = program.getUserCodeClassLoader();

        // 1. The new job's graph, built from its main() against Flink's capturing environment.
        Pipeline pipeline = PackagedProgramUtils.getPipelineFromProgram(program, conf, parallelism, true);
        StreamGraph streamGraph = (StreamGraph) pipeline;
        Map<Integer, byte[]> hashes = new StreamGraphHasherV2().traverseStreamGraphAndGenerateHashes(streamGraph);
        Map<Integer, String> uidByNode = new LinkedHashMap<>();
        for (StreamNode node : streamGraph.getStreamNodes()) {
            uidByNode.put(node.getId(), node.getTransformationUID());
        }
        Set<Integer> sourceOrSinkNodes = new LinkedHashSet<>(streamGraph.getSourceIDs());
        sourceOrSinkNodes.addAll(streamGraph.getSinkIDs());
        JobGraph jobGraph = FlinkPipelineTranslationUtil.getJobGraph(cl, pipeline, conf, parallelism);
        ExecutionConfig executionConfig = jobGraph.getSerializedExecutionConfig().deserializeValue(cl);

        // 2. The savepoint.
        CheckpointMetadata metadata = SavepointLoader.loadSavepointMetadata(savepoint);
        CHECKPOINT_ID = metadata.getCheckpointId();
        Map<OperatorID, OperatorState> saved = new LinkedHashMap<>();
        for (OperatorState s : metadata.getOperatorStates()) {
            saved.put(s.getOperatorID(), s);
        }
        OUT.println("# Flink " + EnvironmentInformation.getVersion() + ", savepoint " + savepoint
                + " (checkpoint " + metadata.getCheckpointId() + ", " + saved.size() + " operators)");

        // 3. Every operator of the new graph.
        Thread.currentThread().setContextClassLoader(cl);
        for (JobVertex vertex : jobGraph.getVerticesSortedTopologicallyFromSources()) {
            StreamConfig vertexConfig = new StreamConfig(vertex.getConfiguration());
            for (Map.Entry<Integer, StreamConfig> e : vertexConfig.getTransitiveChainedTaskConfigsWithSelf(cl).entrySet()) {
                StreamConfig opConfig = e.getValue();
                OperatorID id = opConfig.getOperatorID();
                String uid = uidByNode.get(e.getKey());
                if (uid == null) uid = "(no uid) " + opConfig.getOperatorName() + " " + id;
                OperatorState state = saved.remove(id);
                SavedMeta meta = state == null ? new SavedMeta() : SavedMeta.read(state, cl);
                StreamOperatorFactory<?> factory = opConfig.getStreamOperatorFactory(cl);
                String skip = sourceOrSinkNodes.contains(e.getKey()) ? "source or sink node" : sourceOrSink(factory);
                OUT.println("# " + (skip != null ? "skipped (" + skip + ", never instantiated)" : "probed  ")
                        + " uid " + uid + ": " + factory.getClass().getSimpleName()
                        + (hasState(state) ? ", state in the savepoint" : ", no state in the savepoint"));
                if (skip != null) {
                    for (String name : meta.names()) {
                        ROWS.add(new Row(uid, name, meta.kind(name), Verdict.NOT_CHECKED,
                                skip + ": never instantiated nor opened by the probe"));
                    }
                    continue;
                }
                if (meta.readError != null) {
                    ROWS.add(new Row(uid, "(meta data)", "-", Verdict.INCOMPATIBLE, meta.readError));
                    FIRST_FAILURE.putIfAbsent(uid, meta.readError);
                    continue;
                }
                int maxParallelism = state != null ? state.getMaxParallelism()
                        : vertex.getMaxParallelism() > 0 ? vertex.getMaxParallelism() : 128;
                probe(uid, opConfig, state, meta, maxParallelism, jobGraph, conf, executionConfig, cl, allKeyGroups);
            }
        }
        // 4. Savepoint operators no operator of the new job maps to (Flink: "Cannot map
        // checkpoint/savepoint state ..." unless allowNonRestoredState).
        for (OperatorState state : saved.values()) {
            if (!state.getStates().iterator().hasNext()) continue;
            SavedMeta meta = SavedMeta.read(state, cl);
            for (String name : meta.names()) {
                ROWS.add(new Row("(operator " + state.getOperatorID() + ")", name, meta.kind(name), Verdict.LEFT_BEHIND,
                        "no operator of the new job has this operator id (uid removed or renamed)"));
            }
        }
        print();
        program.close();
        return !FIRST_FAILURE.isEmpty() ? 3 : UNDECIDED.isEmpty() ? 0 : 4;
    }

    // ------------------------------------------------------------------------------------------
    // One operator
    // ------------------------------------------------------------------------------------------

    @SuppressWarnings({"unchecked", "rawtypes"})
    static void probe(String uid, StreamConfig opConfig, OperatorState state, SavedMeta meta, int maxParallelism,
            JobGraph jobGraph, Configuration userConf, ExecutionConfig executionConfig, ClassLoader cl,
            boolean allKeyGroups) throws Exception {
        Recorder rec = probeOnce(uid, opConfig, state, maxParallelism, jobGraph, userConf, executionConfig, cl, allKeyGroups, false);
        if (rec.restoreFailure == null) {
            verdicts(uid, meta, rec, null, cl);
            return;
        }
        // Flink's restore of the saved state itself failed (key serializer, or reading the saved
        // data): nothing was registered. Capture the new job's descriptors against an empty backend
        // and compare them here, so every state still gets a verdict.
        String why = describe(rec.restoreFailure);
        FIRST_FAILURE.putIfAbsent(uid, why);
        Recorder capture = probeOnce(uid, opConfig, null, maxParallelism, jobGraph, userConf, executionConfig, cl, allKeyGroups, true);
        capture.newKeySerializer = capture.newKeySerializer != null ? capture.newKeySerializer : opConfig.getStateKeySerializer(cl);
        verdicts(uid, meta, capture, why, cl);
    }

    static Recorder probeOnce(String uid, StreamConfig opConfig, OperatorState state, int maxParallelism,
            JobGraph jobGraph, Configuration userConf, ExecutionConfig executionConfig, ClassLoader cl,
            boolean allKeyGroups, boolean captureOnly) throws Exception {
        // The task configuration: job configuration + the operator's own StreamConfig, with no
        // network outputs (the probe's task has no record writers).
        Configuration taskConf = new Configuration();
        taskConf.addAll(jobGraph.getJobConfiguration());
        taskConf.addAll(userConf);
        taskConf.addAll(opConfig.getConfiguration());
        StreamConfig config = new StreamConfig(taskConf);
        config.setVertexNonChainedOutputs(Collections.emptyList());
        config.setOperatorNonChainedOutputs(Collections.emptyList());
        config.serializeAllConfigs();

        PrioritizedOperatorSubtaskState restored = state == null
                ? PrioritizedOperatorSubtaskState.emptyNotRestored()
                : restoredState(state, maxParallelism, allKeyGroups);
        RuntimeContext runtimeContext = runtimeContext(opConfig.getOperatorName(), maxParallelism, cl, executionConfig);
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
                    if (!m.getName().equals("create")) return objectMethod(proxy, m, args);
                    // args[1]: the keyed backend (1.20) / its PriorityQueueSetFactory (2.x): timers' state
                    Object[] a = args.clone();
                    a[1] = rec.keyedProxy(a[1]);
                    return invokeStatic(InternalTimeServiceManagerImpl.class, "create", a);
                });
        StreamTaskStateInitializer real = new StreamTaskStateInitializerImpl(env, backend,
                new SubTaskInitializationMetricsBuilder(System.currentTimeMillis()), TtlTimeProvider.DEFAULT,
                timers, StreamTaskCancellationContext.alwaysRunning());
        StreamTaskStateInitializer empty = new StreamTaskStateInitializerImpl(emptyEnv, backend);
        StreamTaskStateInitializer initializer = (StreamTaskStateInitializer) Proxy.newProxyInstance(
                StateProbe.class.getClassLoader(), new Class<?>[] {StreamTaskStateInitializer.class},
                (proxy, m, args) -> {
                    if (!m.getName().equals("streamOperatorStateContext")) return objectMethod(proxy, m, args);
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
                    rec.realAsync = asyncBackend(ctx);
                    rec.fallbackAsync = asyncBackend(fallback);
                    rec.newKeySerializer = (TypeSerializer<?>) args[4];
                    return Proxy.newProxyInstance(StateProbe.class.getClassLoader(),
                            new Class<?>[] {StreamOperatorStateContext.class}, (p2, m2, a2) -> {
                                Object r = invoke(m2, ctx, a2);
                                if ((m2.getName().equals("keyedStateBackend") || m2.getName().equals("asyncKeyedStateBackend"))
                                        && r != null) return rec.keyedProxy(r);
                                if (m2.getName().equals("operatorStateBackend") && r != null) return rec.operatorProxy(r);
                                return r;
                            });
                });

        Output<StreamRecord<Object>> output = (Output<StreamRecord<Object>>) noOp(Output.class);
        OperatorEventDispatcher dispatcher = (OperatorEventDispatcher) noOp(OperatorEventDispatcher.class);
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
        return rec;
    }

    /** The rows of one operator. {@code restoreFailure}: Flink's restore failed before any
     * registration; the registrations were then captured against an empty backend. */
    static void verdicts(String uid, SavedMeta meta, Recorder rec, String restoreFailure, ClassLoader cl) {
        if (restoreFailure != null) {
            ROWS.add(new Row(uid, "(restore)", "-", Verdict.INCOMPATIBLE, "Flink's backend restore failed: " + restoreFailure));
        }
        if (meta.keySnapshot != null && rec.newKeySerializer != null) {
            ROWS.add(keyRow(uid, meta, rec.newKeySerializer));
        } else if (meta.keySnapshot != null) {
            ROWS.add(new Row(uid, "(key)", "KEY", Verdict.INCOMPATIBLE,
                    "the savepoint holds keyed state but the new operator is not keyed"));
        }
        for (Registration r : rec.registrations.values()) {
            StateMetaInfoSnapshot old = meta.lookup(r.scope, r.name);
            if (r.failure != null) {
                String why = describe(r.failure);
                FIRST_FAILURE.putIfAbsent(uid, why);
                ROWS.add(new Row(uid, r.name, r.kind, Verdict.INCOMPATIBLE, why));
            } else if (old == null) {
                ROWS.add(new Row(uid, r.name, r.kind, Verdict.NEW, "not in the savepoint: starts empty"));
            } else if (restoreFailure != null && !r.kind.equals(meta.kind(r.name))) {
                ROWS.add(new Row(uid, r.name, r.kind, Verdict.INCOMPATIBLE, "computed: kind " + meta.kind(r.name)
                        + " in the savepoint, registered as " + r.kind));
            } else {
                Row row = compatRow(uid, r, old, rec);
                ROWS.add(restoreFailure == null ? row
                        : new Row(row.uid, row.state, row.kind, row.verdict, "computed (Flink's restore failed first): " + row.reason));
            }
        }
        for (String name : meta.names()) {
            if (!rec.registered(meta.scope(name), name)) {
                ROWS.add(new Row(uid, name, meta.kind(name), Verdict.LEFT_BEHIND,
                        "in the savepoint, not registered by the new operator's initializeState()/open() (kept unused,"
                                + " or registered later at run time)"));
            }
        }
        if (rec.unattributed != null) {
            // Not a state registration: the job's own code or the probe's environment. Flink may
            // or may not fail the same way: undecided.
            String why = describe(rec.unattributed);
            UNDECIDED.putIfAbsent(uid, why);
            ROWS.add(new Row(uid, "(operator)", "-", Verdict.UNDECIDED,
                    "initializeState()/open() failed outside any state registration: " + why));
        }
    }

    /** Heap and RocksDB refuse a key serializer that is not compatible as is (or reconfigured). */
    static boolean hasState(OperatorState state) {
        if (state == null) return false;
        for (OperatorSubtaskState s : state.getStates()) {
            if (s.hasState()) return true;
        }
        return false;
    }

    static Row keyRow(String uid, SavedMeta meta, TypeSerializer<?> newKey) {
        TypeSerializerSchemaCompatibility<?> c = resolve(newKey, meta.keySnapshot, false);
        Verdict v = c.isCompatibleAsIs() || c.isCompatibleWithReconfiguredSerializer() ? Verdict.COMPATIBLE_AS_IS : Verdict.INCOMPATIBLE;
        return new Row(uid, "(key)", "KEY", v, "key " + simple(meta.keySnapshot) + " -> " + newKey.getClass().getSimpleName() + ": " + name(c));
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static Row compatRow(String uid, Registration r, StateMetaInfoSnapshot old, Recorder rec) {
        try {
            TypeSerializerSchemaCompatibility<?> c;
            String detail;
            if (r.scope == Scope.BROADCAST) {
                MapStateDescriptor<?, ?> d = (MapStateDescriptor<?, ?>) r.descriptor;
                TypeSerializerSchemaCompatibility<?> k = resolve(d.getKeySerializer(),
                        old.getTypeSerializerSnapshot(StateMetaInfoSnapshot.CommonSerializerKeys.KEY_SERIALIZER), false);
                TypeSerializerSchemaCompatibility<?> v = resolve(d.getValueSerializer(),
                        old.getTypeSerializerSnapshot(StateMetaInfoSnapshot.CommonSerializerKeys.VALUE_SERIALIZER), false);
                c = rank(k) >= rank(v) ? k : v;
                detail = "key " + name(k) + ", value " + name(v);
            } else {
                TypeSerializer<?> newSer = r.serializer != null ? r.serializer
                        : r.scope == Scope.OPERATOR ? ((ListStateDescriptor<?>) r.descriptor).getElementSerializer()
                        : rec.registeredSerializer(r.name, r.descriptor);
                TypeSerializerSnapshot<?> oldSnap =
                        old.getTypeSerializerSnapshot(StateMetaInfoSnapshot.CommonSerializerKeys.VALUE_SERIALIZER);
                c = resolve(newSer, oldSnap, r.scope == Scope.KEYED);
                detail = simple(oldSnap) + " -> " + newSer.getClass().getSimpleName() + ": " + name(c);
            }
            Verdict v = verdictOf(c);
            if (v == Verdict.INCOMPATIBLE && !rec.captureOnly) {
                detail += " (computed here, yet Flink's backend accepted the registration)";
            }
            return new Row(uid, r.name, r.kind, v, detail);
        } catch (Throwable t) {
            return new Row(uid, r.name, r.kind, Verdict.COMPATIBLE_AS_IS,
                    "Flink's backend accepted it; as-is/after-migration not computed: " + describe(t));
        }
    }

    static String name(TypeSerializerSchemaCompatibility<?> c) {
        return c.isIncompatible() ? "INCOMPATIBLE" : c.isCompatibleAfterMigration() ? "COMPATIBLE_AFTER_MIGRATION"
                : c.isCompatibleWithReconfiguredSerializer() ? "COMPATIBLE_WITH_RECONFIGURED_SERIALIZER" : "COMPATIBLE_AS_IS";
    }

    static int rank(TypeSerializerSchemaCompatibility<?> c) {
        return c.isIncompatible() ? 3 : c.isCompatibleAfterMigration() ? 2 : c.isCompatibleWithReconfiguredSerializer() ? 1 : 0;
    }

    static Verdict verdictOf(TypeSerializerSchemaCompatibility<?> c) {
        return c.isIncompatible() ? Verdict.INCOMPATIBLE
                : c.isCompatibleAfterMigration() ? Verdict.AFTER_MIGRATION : Verdict.COMPATIBLE_AS_IS;
    }

    /**
     * Flink's own decision, as its StateSerializerProvider makes it: 2.x
     * {@code newSnapshot.resolveSchemaCompatibility(oldSnapshot)} (keyed state through
     * TtlAwareSerializer, so TTL on/off is a migration); 1.20 has the same method (FLIP-263,
     * default-delegating to the deprecated {@code oldSnapshot.resolveSchemaCompatibility(newSerializer)}).
     */
    @SuppressWarnings({"unchecked", "rawtypes"})
    static TypeSerializerSchemaCompatibility<?> resolve(TypeSerializer<?> newSer, TypeSerializerSnapshot<?> old, boolean keyedValue) {
        if (keyedValue) {
            try {
                Class<?> aware = Class.forName("org.apache.flink.runtime.state.ttl.TtlAwareSerializer");
                Class<?> wrapper = Class.forName("org.apache.flink.runtime.state.ttl.TtlAwareSerializerSnapshotWrapper");
                TypeSerializer<?> wrapped = (TypeSerializer<?>) aware.getMethod("wrapTtlAwareSerializer", TypeSerializer.class)
                        .invoke(null, newSer);
                Object w = wrapper.getConstructor(TypeSerializerSnapshot.class).newInstance(old);
                TypeSerializerSnapshot oldAware = (TypeSerializerSnapshot) wrapper.getMethod("getTtlAwareSerializerSnapshot").invoke(w);
                return ((TypeSerializerSnapshot) wrapped.snapshotConfiguration()).resolveSchemaCompatibility(oldAware);
            } catch (ClassNotFoundException e) {
                // 1.x: no TTL-aware wrapping
            } catch (ReflectiveOperationException e) {
                throw new RuntimeException(e);
            }
        }
        return ((TypeSerializerSnapshot) newSer.snapshotConfiguration()).resolveSchemaCompatibility((TypeSerializerSnapshot) old);
    }

    // ------------------------------------------------------------------------------------------
    // The recording backends
    // ------------------------------------------------------------------------------------------

    enum Scope { KEYED, OPERATOR, BROADCAST }

    static final class Registration {
        Scope scope;
        String name;
        String kind;
        Object descriptor;
        TypeSerializer<?> serializer; // timers: the element serializer passed in
        Throwable failure;
    }

    static final class Recorder {
        final Map<String, Registration> registrations = new LinkedHashMap<>();
        Throwable restoreFailure;
        Throwable unattributed;
        boolean captureOnly;
        Object realKeyed;
        Object fallbackKeyed;
        Object realAsync; // 2.x: the async (state V2) keyed backend, when the operator uses async state
        Object fallbackAsync;
        Object fallbackOperator;
        TypeSerializer<?> newKeySerializer;
        final Map<Object, Object> proxies = new java.util.IdentityHashMap<>();

        boolean registered(Scope scope, String name) {
            return registrations.containsKey(scope + "/" + name);
        }

        Object keyedProxy(Object realBackend) {
            return proxies.computeIfAbsent(realBackend, b -> proxy(b, (proxy, m, args) -> {
                String n = m.getName();
                if ((n.equals("getPartitionedState") || n.equals("getOrCreateKeyedState"))
                        && args != null && args[args.length - 1] instanceof StateDescriptor) {
                    StateDescriptor<?, ?> d = (StateDescriptor<?, ?>) args[args.length - 1];
                    return guarded(Scope.KEYED, d.getName(), d.getType().name(), d, null, m, b, args, true);
                }
                if ((n.equals("getOrCreateKeyedState") || n.equals("createStateInternal")) && args != null
                        && args.length > 0 && args[args.length - 1] != null
                        && isA(args[args.length - 1].getClass(), "org.apache.flink.api.common.state.v2.StateDescriptor")) {
                    // 2.x state V2 (async) descriptors
                    Object d = args[args.length - 1];
                    String name = (String) d.getClass().getMethod("getStateId").invoke(d);
                    String type = String.valueOf(d.getClass().getMethod("getType").invoke(d));
                    return guarded(Scope.KEYED, name, type, d, null, m, b, args, true);
                }
                if (n.equals("create") && args != null && args.length >= 2 && args[0] instanceof String
                        && args[1] instanceof TypeSerializer) {
                    return guarded(Scope.KEYED, (String) args[0], "TIMERS", null, (TypeSerializer<?>) args[1], m, b, args, true);
                }
                return invoke(m, b, args);
            }));
        }

        Object operatorProxy(Object realBackend) {
            return proxies.computeIfAbsent(realBackend, b -> proxy(b, (proxy, m, args) -> {
                String n = m.getName();
                if (args != null && args.length == 1 && args[0] instanceof StateDescriptor) {
                    StateDescriptor<?, ?> d = (StateDescriptor<?, ?>) args[0];
                    if (n.equals("getListState")) return guarded(Scope.OPERATOR, d.getName(), "LIST", d, null, m, b, args, false);
                    if (n.equals("getUnionListState")) return guarded(Scope.OPERATOR, d.getName(), "UNION", d, null, m, b, args, false);
                    if (n.equals("getBroadcastState")) return guarded(Scope.BROADCAST, d.getName(), "BROADCAST", d, null, m, b, args, false);
                }
                return invoke(m, b, args);
            }));
        }

        /** Registers through the real backend; a refusal is recorded and answered from an empty backend. */
        Object guarded(Scope scope, String name, String kind, Object descriptor, TypeSerializer<?> serializer,
                Method m, Object realBackend, Object[] args, boolean keyed) throws Throwable {
            String key = scope + "/" + name;
            Registration r = registrations.get(key);
            if (r == null) {
                r = new Registration();
                r.scope = scope;
                r.name = name;
                r.kind = kind;
                r.descriptor = descriptor;
                r.serializer = serializer;
                registrations.put(key, r);
            }
            if (r.failure == null) {
                try {
                    return m.invoke(realBackend, args);
                } catch (InvocationTargetException e) {
                    r.failure = e.getCause();
                }
            }
            Object fallback = !keyed ? fallbackOperator
                    : realAsync != null && realBackend == realAsync ? fallbackAsync : fallbackKeyed;
            if (fallback == null) throw r.failure;
            return invoke(m, fallback, args);
        }

        /** The serializer the backend registered (heap: its state table's meta info; TTL-wrapped if enabled). */
        TypeSerializer<?> registeredSerializer(String name, Object descriptor) {
            try {
                Object backend = realKeyed != null ? realKeyed : realAsync;
                Field inner = backend == realAsync ? findField(backend.getClass(), "keyedStateBackend") : null;
                if (inner != null) backend = inner.get(backend); // AsyncKeyedStateBackendAdaptor
                Field f = findField(backend.getClass(), "registeredKVStates");
                if (f == null) f = findField(backend.getClass(), "kvStateInformation"); // RocksDB
                Object entry = ((Map<?, ?>) f.get(backend)).get(name);
                Field mf = findField(entry.getClass(), "metaInfo"); // RocksDbKvStateInfo.metaInfo
                Object metaInfo = mf != null ? mf.get(entry) : entry.getClass().getMethod("getMetaInfo").invoke(entry);
                return (TypeSerializer<?>) metaInfo.getClass().getMethod("getStateSerializer").invoke(metaInfo);
            } catch (Throwable t) {
                try {
                    return (TypeSerializer<?>) descriptor.getClass().getMethod("getSerializer").invoke(descriptor);
                } catch (ReflectiveOperationException e) {
                    throw new RuntimeException(e);
                }
            }
        }
    }

    /** 2.x StreamOperatorStateContext#asyncKeyedStateBackend(), absent in 1.20. */
    static Object asyncBackend(StreamOperatorStateContext ctx) {
        try {
            return StreamOperatorStateContext.class.getMethod("asyncKeyedStateBackend").invoke(ctx);
        } catch (ReflectiveOperationException e) {
            return null;
        }
    }

    static Field findField(Class<?> c, String name) {
        for (; c != null; c = c.getSuperclass()) {
            try {
                Field f = c.getDeclaredField(name);
                f.setAccessible(true);
                return f;
            } catch (NoSuchFieldException e) {
                // up
            }
        }
        return null;
    }

    /** A proxy implementing every interface of {@code target}, calls going to {@code handler}. */
    static Object proxy(Object target, InvocationHandler handler) {
        Set<Class<?>> interfaces = new LinkedHashSet<>();
        for (Class<?> c = target.getClass(); c != null; c = c.getSuperclass()) {
            collectInterfaces(c, interfaces);
        }
        return Proxy.newProxyInstance(target.getClass().getClassLoader(), interfaces.toArray(new Class<?>[0]), handler);
    }

    static void collectInterfaces(Class<?> c, Set<Class<?>> out) {
        for (Class<?> i : c.getInterfaces()) {
            if (java.lang.reflect.Modifier.isPublic(i.getModifiers()) && out.add(i)) collectInterfaces(i, out);
        }
    }

    static Object invoke(Method m, Object target, Object[] args) throws Throwable {
        try {
            m.setAccessible(true);
            return m.invoke(target, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    static Object invokeStatic(Class<?> c, String name, Object[] args) throws Throwable {
        for (Method m : c.getMethods()) {
            if (m.getName().equals(name) && m.getParameterCount() == args.length
                    && java.lang.reflect.Modifier.isStatic(m.getModifiers())) {
                return invoke(m, null, args);
            }
        }
        throw new NoSuchMethodException(c.getName() + "." + name);
    }

    static Object objectMethod(Object proxy, Method m, Object[] args) {
        switch (m.getName()) {
            case "hashCode": return System.identityHashCode(proxy);
            case "equals": return proxy == args[0];
            case "toString": return "probe-proxy";
            default: throw new UnsupportedOperationException(m.getName());
        }
    }

    /** An interface whose methods do nothing (Output, OperatorEventDispatcher, gateways). */
    static Object noOp(Class<?> iface) {
        return Proxy.newProxyInstance(StateProbe.class.getClassLoader(), new Class<?>[] {iface}, (proxy, m, args) -> {
            if (m.getDeclaringClass() == Object.class) return objectMethod(proxy, m, args);
            Class<?> r = m.getReturnType();
            if (r == void.class) return null;
            if (r == boolean.class) return false;
            if (r.isPrimitive()) return 0;
            if (r.isInterface()) return noOp(r);
            return null;
        });
    }

    /** The RuntimeContext SavepointEnvironment reads the job and task facts and class loader from. */
    static RuntimeContext runtimeContext(String name, int maxParallelism, ClassLoader cl, ExecutionConfig ec) {
        JobInfoImpl jobInfo = new JobInfoImpl(new JobID(), "state-probe");
        TaskInfoImpl taskInfo = new TaskInfoImpl(name, maxParallelism, 0, 1, 0);
        return (RuntimeContext) Proxy.newProxyInstance(StateProbe.class.getClassLoader(), new Class<?>[] {RuntimeContext.class},
                (proxy, m, args) -> {
                    switch (m.getName()) {
                        case "getJobInfo": return jobInfo;
                        case "getTaskInfo": return taskInfo;
                        case "getUserCodeClassLoader": return cl;
                        case "registerUserCodeClassLoaderReleaseHookIfAbsent": return null;
                        case "getExecutionConfig": return ec;
                        case "getMetricGroup":
                            return org.apache.flink.runtime.metrics.groups.UnregisteredMetricGroups.createUnregisteredOperatorMetricGroup();
                        default:
                            if (m.getDeclaringClass() == Object.class) return objectMethod(proxy, m, args);
                            throw new UnsupportedOperationException("probe RuntimeContext." + m.getName());
                    }
                });
    }

    /** A task to hold the operator: what Flink's state processor API's BootstrapStreamTask does. */
    static final class ProbeTask extends StreamTask<Object, StreamOperator<Object>> {
        ProbeTask(Environment env) throws Exception {
            super(env, new NeverFireProcessingTimeService());
        }

        @Override
        protected void init() {}
    }

    // ------------------------------------------------------------------------------------------
    // The savepoint's part for one operator
    // ------------------------------------------------------------------------------------------

    /**
     * The operator's state for one subtask of parallelism 1: every saved keyed handle cut to one
     * key group (its meta data — every state's name, kind and serializer snapshots — is at the start
     * of each handle, so all are read), or all key groups; operator state redistributed as Flink's
     * RoundRobinOperatorStateRepartitioner does for a new parallelism of 1.
     */
    static PrioritizedOperatorSubtaskState restoredState(OperatorState state, int maxParallelism, boolean allKeyGroups) {
        List<KeyedStateHandle> managedKeyed = new ArrayList<>();
        List<KeyedStateHandle> rawKeyed = new ArrayList<>();
        List<List<OperatorStateHandle>> managedOp = new ArrayList<>();
        List<List<OperatorStateHandle>> rawOp = new ArrayList<>();
        for (int i = 0; i < state.getParallelism(); i++) {
            OperatorSubtaskState s = state.getState(i);
            List<OperatorStateHandle> m = new ArrayList<>();
            List<OperatorStateHandle> r = new ArrayList<>();
            if (s != null) {
                for (KeyedStateHandle h : s.getManagedKeyedState()) addSample(h, managedKeyed, allKeyGroups);
                for (KeyedStateHandle h : s.getRawKeyedState()) addSample(h, rawKeyed, allKeyGroups);
                m.addAll(s.getManagedOperatorState());
                r.addAll(s.getRawOperatorState());
            }
            managedOp.add(m);
            rawOp.add(r);
        }
        List<OperatorStateHandle> op = RoundRobinOperatorStateRepartitioner.INSTANCE
                .repartitionState(managedOp, state.getParallelism(), 1).get(0);
        List<OperatorStateHandle> rop = RoundRobinOperatorStateRepartitioner.INSTANCE
                .repartitionState(rawOp, state.getParallelism(), 1).get(0);
        OperatorSubtaskState subtask = OperatorSubtaskState.builder()
                .setManagedKeyedState(new StateObjectCollection<>(managedKeyed))
                .setRawKeyedState(new StateObjectCollection<>(rawKeyed))
                .setManagedOperatorState(new StateObjectCollection<>(op))
                .setRawOperatorState(new StateObjectCollection<>(rop))
                .build();
        return new PrioritizedOperatorSubtaskState.Builder(subtask, Collections.emptyList(), CHECKPOINT_ID).build();
    }

    static void addSample(KeyedStateHandle h, List<KeyedStateHandle> out, boolean all) {
        if (all) {
            out.add(h);
            return;
        }
        int pick = h.getKeyGroupRange().getStartKeyGroup();
        if (h instanceof KeyGroupsStateHandle) {
            // the key group with the most bytes: the likeliest to hold data of every state
            KeyGroupsStateHandle k = (KeyGroupsStateHandle) h;
            // offset 0: the key group holds no data; the others' sizes follow from the next offset
            List<long[]> written = new ArrayList<>();
            for (org.apache.flink.api.java.tuple.Tuple2<Integer, Long> e : k.getGroupRangeOffsets()) {
                if (e.f1 != 0L) written.add(new long[] {e.f0, e.f1});
            }
            written.sort((a, b) -> Long.compare(a[1], b[1]));
            long best = -1;
            for (int i = 0; i < written.size(); i++) {
                long end = i + 1 < written.size() ? written.get(i + 1)[1] : k.getStateSize();
                if (end - written.get(i)[1] > best) {
                    best = end - written.get(i)[1];
                    pick = (int) written.get(i)[0];
                }
            }
        }
        KeyedStateHandle cut = h.getIntersection(new KeyGroupRange(pick, pick));
        if (System.getenv("PROBE_DEBUG") != null) {
            System.err.println("PROBE_DEBUG sample " + h.getKeyGroupRange() + " -> key group " + pick + " " + cut);
        }
        out.add(cut != null ? cut : h);
    }

    /** The meta data of an operator's saved state, read with the new job's classes. */
    static final class SavedMeta {
        TypeSerializerSnapshot<?> keySnapshot;
        final Map<String, StateMetaInfoSnapshot> keyed = new LinkedHashMap<>();
        final Map<String, StateMetaInfoSnapshot> operator = new LinkedHashMap<>();
        final Map<String, StateMetaInfoSnapshot> broadcast = new LinkedHashMap<>();
        String readError;

        static SavedMeta read(OperatorState state, ClassLoader cl) {
            SavedMeta meta = new SavedMeta();
            try {
                for (OperatorSubtaskState s : state.getStates()) {
                    for (KeyedStateHandle h : s.getManagedKeyedState()) {
                        StreamStateHandle stream = h instanceof KeyGroupsStateHandle ? (KeyGroupsStateHandle) h
                                : h instanceof IncrementalRemoteKeyedStateHandle
                                        ? ((IncrementalRemoteKeyedStateHandle) h).getMetaDataStateHandle() : null;
                        if (stream == null) continue;
                        try (FSDataInputStream in = stream.openInputStream()) {
                            KeyedBackendSerializationProxy<?> p = new KeyedBackendSerializationProxy<>(cl);
                            p.read(new DataInputViewStreamWrapper(in));
                            meta.keySnapshot = p.getKeySerializerSnapshot();
                            for (StateMetaInfoSnapshot m : p.getStateMetaInfoSnapshots()) meta.keyed.putIfAbsent(m.getName(), m);
                        }
                    }
                    for (OperatorStateHandle h : s.getManagedOperatorState()) {
                        try (FSDataInputStream in = h.openInputStream()) {
                            OperatorBackendSerializationProxy p = new OperatorBackendSerializationProxy(cl);
                            p.read(new DataInputViewStreamWrapper(in));
                            for (StateMetaInfoSnapshot m : p.getOperatorStateMetaInfoSnapshots()) meta.operator.putIfAbsent(m.getName(), m);
                            for (StateMetaInfoSnapshot m : p.getBroadcastStateMetaInfoSnapshots()) meta.broadcast.putIfAbsent(m.getName(), m);
                        }
                    }
                }
            } catch (Exception e) {
                meta.readError = "the saved state's meta data cannot be read with the new job's classes: " + describe(e);
            }
            return meta;
        }

        List<String> names() {
            List<String> names = new ArrayList<>();
            for (String n : keyed.keySet()) names.add(n);
            for (String n : operator.keySet()) names.add(n);
            for (String n : broadcast.keySet()) names.add(n);
            return names;
        }

        Scope scope(String name) {
            return keyed.containsKey(name) ? Scope.KEYED : operator.containsKey(name) ? Scope.OPERATOR : Scope.BROADCAST;
        }

        StateMetaInfoSnapshot lookup(Scope scope, String name) {
            return (scope == Scope.KEYED ? keyed : scope == Scope.OPERATOR ? operator : broadcast).get(name);
        }

        String kind(String name) {
            StateMetaInfoSnapshot m = lookup(scope(name), name);
            if (m == null) return "?";
            switch (m.getBackendStateType()) {
                case KEY_VALUE:
                    return String.valueOf(m.getOption(StateMetaInfoSnapshot.CommonOptionsKeys.KEYED_STATE_TYPE));
                case PRIORITY_QUEUE:
                    return "TIMERS";
                case BROADCAST:
                    return "BROADCAST";
                default: {
                    String mode = m.getOption(StateMetaInfoSnapshot.CommonOptionsKeys.OPERATOR_STATE_DISTRIBUTION_MODE);
                    return "SPLIT_DISTRIBUTE".equals(mode) ? "LIST" : String.valueOf(mode);
                }
            }
        }
    }

    // ------------------------------------------------------------------------------------------
    // Sources and sinks are never created
    // ------------------------------------------------------------------------------------------

    static String sourceOrSink(StreamOperatorFactory<?> factory) {
        if (isA(factory.getClass(), "org.apache.flink.streaming.api.operators.SourceOperatorFactory")) return "source";
        if (factory.getClass().getName().startsWith("org.apache.flink.streaming.runtime.operators.sink.")) return "sink";
        if (factory instanceof SimpleOperatorFactory) {
            StreamOperator<?> op = ((SimpleOperatorFactory<?>) factory).getOperator();
            String name = op.getClass().getName();
            if (isA(op.getClass(), "org.apache.flink.streaming.api.operators.StreamSource")
                    || isA(op.getClass(), "org.apache.flink.streaming.api.operators.StreamSink")
                    || name.startsWith("org.apache.flink.streaming.runtime.operators.sink.")) {
                return "source or sink operator";
            }
            if (op instanceof AbstractUdfStreamOperator) {
                Class<?> fn = ((AbstractUdfStreamOperator<?, ?>) op).getUserFunction().getClass();
                for (String iface : new String[] {"SinkFunction", "SourceFunction", "TwoPhaseCommitSinkFunction"}) {
                    if (hasSimpleName(fn, iface)) return "legacy " + iface;
                }
            }
        }
        return null;
    }

    static boolean isA(Class<?> c, String name) {
        for (; c != null; c = c.getSuperclass()) {
            if (c.getName().equals(name)) return true;
            Set<Class<?>> all = new LinkedHashSet<>();
            collectInterfaces(c, all);
            for (Class<?> i : all) if (i.getName().equals(name)) return true;
        }
        return false;
    }

    static boolean hasSimpleName(Class<?> c, String simple) {
        for (; c != null; c = c.getSuperclass()) {
            if (c.getSimpleName().equals(simple)) return true;
            Set<Class<?>> all = new LinkedHashSet<>();
            collectInterfaces(c, all);
            for (Class<?> i : all) if (i.getSimpleName().equals(simple)) return true;
        }
        return false;
    }

    // ------------------------------------------------------------------------------------------
    // Output
    // ------------------------------------------------------------------------------------------

    static String simple(Object o) {
        return o == null ? "null" : o.getClass().getSimpleName();
    }

    /** The cause Flink's restore reports: the StateMigrationException if any, else the root cause. */
    static String describe(Throwable e) {
        Throwable pick = null;
        Throwable t = e;
        for (int i = 0; t != null && i < 20; t = t.getCause(), i++) {
            if (t instanceof StateMigrationException) {
                pick = t;
                break;
            }
            pick = t;
        }
        String msg = pick.getMessage() == null ? "" : pick.getMessage().split("\n")[0];
        return (pick.getClass().getSimpleName() + ": " + msg).replaceAll("@[0-9a-f]{4,}", "");
    }

    static void print() {
        OUT.printf("%-10s %-38s %-10s %-17s %s%n", "UID", "STATE", "KIND", "VERDICT", "REASON");
        for (Row r : ROWS) {
            OUT.printf("%-10s %-38s %-10s %-17s %s%n", r.uid, r.state, r.kind, r.verdict, r.reason);
        }
        if (FIRST_FAILURE.isEmpty() && !UNDECIDED.isEmpty()) {
            Map.Entry<String, String> first = UNDECIDED.entrySet().iterator().next();
            OUT.println("PREDICTION UNDECIDED uid " + first.getKey() + ": " + first.getValue());
        } else if (FIRST_FAILURE.isEmpty()) {
            OUT.println("PREDICTION RESTORES (no operator's state registration was refused)");
        } else {
            Map.Entry<String, String> first = FIRST_FAILURE.entrySet().iterator().next();
            OUT.println("PREDICTION FAILS uid " + first.getKey() + ": " + first.getValue());
        }
    }
}
