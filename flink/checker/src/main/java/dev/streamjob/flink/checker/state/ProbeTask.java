package dev.streamjob.flink.checker.state;

import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobInfoImpl;
import org.apache.flink.api.common.TaskInfoImpl;
import org.apache.flink.api.common.functions.RuntimeContext;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.PrioritizedOperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.RoundRobinOperatorStateRepartitioner;
import org.apache.flink.runtime.checkpoint.StateObjectCollection;
import org.apache.flink.runtime.execution.Environment;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupsStateHandle;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.OperatorStateHandle;
import org.apache.flink.state.api.runtime.NeverFireProcessingTimeService;
import org.apache.flink.streaming.api.operators.StreamOperator;
import org.apache.flink.streaming.runtime.tasks.StreamTask;

import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * A task to hold one operator while it starts, the way Flink's state processor API bootstraps
 * operators (its BootstrapStreamTask): no inputs, no outputs, processing time that never fires;
 * and the operator's part of the savepoint as the one subtask of parallelism 1 it restores.
 */
final class ProbeTask extends StreamTask<Object, StreamOperator<Object>> {
    ProbeTask(Environment env) throws Exception {
        super(env, new NeverFireProcessingTimeService());
    }

    @Override
    protected void init() {}

    /** The RuntimeContext SavepointEnvironment reads the job and task facts and class loader from. */
    static RuntimeContext runtimeContext(String name, int maxParallelism, ClassLoader cl, ExecutionConfig ec) {
        JobInfoImpl jobInfo = new JobInfoImpl(new JobID(), "state-probe");
        TaskInfoImpl taskInfo = new TaskInfoImpl(name, maxParallelism, 0, 1, 0);
        return (RuntimeContext) Proxy.newProxyInstance(ProbeTask.class.getClassLoader(), new Class<?>[] {RuntimeContext.class},
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
                            if (m.getDeclaringClass() == Object.class) return Reflect.objectMethod(proxy, m, args);
                            throw new UnsupportedOperationException("probe RuntimeContext." + m.getName());
                    }
                });
    }

    /**
     * The operator's state for one subtask of parallelism 1: every saved keyed handle cut to one
     * key group (its meta data — every state's name, kind and serializer snapshots — is at the start
     * of each handle, so all are read), or all key groups; operator state redistributed as Flink's
     * RoundRobinOperatorStateRepartitioner does for a new parallelism of 1.
     */
    static PrioritizedOperatorSubtaskState restoredState(OperatorState state, long checkpointId, boolean allKeyGroups) {
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
        return new PrioritizedOperatorSubtaskState.Builder(subtask, Collections.emptyList(), checkpointId).build();
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
        out.add(cut != null ? cut : h);
    }
}
