package dev.streamjob.flink.checker;

import org.apache.flink.api.common.typeutils.TypeSerializerSnapshot;
import org.apache.flink.core.fs.FSDataInputStream;
import org.apache.flink.core.memory.DataInputViewStreamWrapper;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.state.IncrementalRemoteKeyedStateHandle;
import org.apache.flink.runtime.state.KeyGroupsStateHandle;
import org.apache.flink.runtime.state.KeyedBackendSerializationProxy;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.OperatorBackendSerializationProxy;
import org.apache.flink.runtime.state.OperatorStateHandle;
import org.apache.flink.runtime.state.StreamStateHandle;
import org.apache.flink.runtime.state.metainfo.StateMetaInfoSnapshot;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The state of one restored operator as the new job's classes read it: the meta data every
 * keyed and operator state stream starts with (Flink's serialization proxies: each state's name,
 * kind and serializer snapshots), read with the new job's class loader, and every serializer
 * snapshot restored into a serializer as Flink's restore does first. A snapshot whose classes the
 * new job no longer has (a removed or renamed state type, a custom serializer gone) cannot be
 * restored: Flink would fail the new job after the old one is gone. Whether a *restorable*
 * serializer is compatible with the type the new job declares is decided by Flink when the job
 * registers the state (at run time), not here.
 */
final class StateCheck {
    /** The state names read, and why any of them cannot be restored. */
    static final class Result {
        final List<String> names = new ArrayList<>();
        final List<String> unresolvable = new ArrayList<>();
    }

    private StateCheck() {}

    static Result read(OperatorState state, ClassLoader userClassLoader) throws IOException {
        Result result = new Result();
        Thread thread = Thread.currentThread();
        ClassLoader previous = thread.getContextClassLoader();
        thread.setContextClassLoader(userClassLoader);
        try {
            // Every subtask's streams start with the same meta data: the first of each kind.
            boolean keyed = false;
            boolean operator = false;
            for (OperatorSubtaskState subtask : state.getStates()) {
                if (!keyed) {
                    for (KeyedStateHandle handle : subtask.getManagedKeyedState()) {
                        StreamStateHandle meta = metaData(handle);
                        if (meta != null) {
                            readKeyed(meta, userClassLoader, result);
                            keyed = true;
                            break;
                        }
                    }
                }
                if (!operator) {
                    for (OperatorStateHandle handle : subtask.getManagedOperatorState()) {
                        readOperator(handle, userClassLoader, result);
                        operator = true;
                        break;
                    }
                }
                if (keyed && operator) {
                    break;
                }
            }
        } finally {
            thread.setContextClassLoader(previous);
        }
        return result;
    }

    /** The stream holding a keyed state's meta data: full snapshots (savepoints) start with it;
     * incremental checkpoints keep it apart. Others (changelog) are not read. */
    private static StreamStateHandle metaData(KeyedStateHandle handle) {
        if (handle instanceof KeyGroupsStateHandle) {
            return (KeyGroupsStateHandle) handle;
        }
        if (handle instanceof IncrementalRemoteKeyedStateHandle) {
            return ((IncrementalRemoteKeyedStateHandle) handle).getMetaDataStateHandle();
        }
        return null;
    }

    private static void readKeyed(StreamStateHandle meta, ClassLoader cl, Result result) throws IOException {
        try (FSDataInputStream in = meta.openInputStream()) {
            KeyedBackendSerializationProxy<?> proxy = new KeyedBackendSerializationProxy<>(cl);
            proxy.read(new DataInputViewStreamWrapper(in));
            restore("the key", "KEY_SERIALIZER", proxy.getKeySerializerSnapshot(), result);
            snapshots(proxy.getStateMetaInfoSnapshots(), result);
        } catch (IOException e) {
            unreadable(e, result);
        }
    }

    private static void readOperator(OperatorStateHandle handle, ClassLoader cl, Result result) throws IOException {
        try (FSDataInputStream in = handle.openInputStream()) {
            OperatorBackendSerializationProxy proxy = new OperatorBackendSerializationProxy(cl);
            proxy.read(new DataInputViewStreamWrapper(in));
            snapshots(proxy.getOperatorStateMetaInfoSnapshots(), result);
            snapshots(proxy.getBroadcastStateMetaInfoSnapshots(), result);
        } catch (IOException e) {
            unreadable(e, result);
        }
    }

    /** A meta data stream a missing class makes unreadable is a refusal; other I/O errors are the
     * check's own (the caller reports them). */
    private static void unreadable(IOException e, Result result) throws IOException {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof ClassNotFoundException || t instanceof NoClassDefFoundError) {
                result.unresolvable.add("its state's serializers cannot be read with the new job's classes ("
                        + Check.describe(e) + ")");
                return;
            }
        }
        throw e;
    }

    private static void snapshots(List<StateMetaInfoSnapshot> snapshots, Result result) {
        for (StateMetaInfoSnapshot snapshot : snapshots) {
            result.names.add(snapshot.getName());
            for (Map.Entry<String, TypeSerializerSnapshot<?>> e : snapshot.getSerializerSnapshotsImmutable().entrySet()) {
                restore("state \"" + snapshot.getName() + "\"", e.getKey(), e.getValue(), result);
            }
        }
    }

    private static void restore(String what, String key, TypeSerializerSnapshot<?> snapshot, Result result) {
        try {
            if (snapshot == null) {
                result.unresolvable.add(what + ": no " + key + " snapshot in the savepoint");
            } else {
                snapshot.restoreSerializer();
            }
        } catch (Throwable t) {
            result.unresolvable.add(what + ": its " + key + " snapshot (" + snapshot.getClass().getName()
                    + ") cannot be restored with the new job's classes (" + Check.describe(t) + ")");
        }
    }
}
