package dev.streamjob.flink.checker.state;

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

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** The meta data of an operator's saved state, read with the new job's classes. */
final class SavedMeta {
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
            meta.readError = "the saved state's meta data cannot be read with the new job's classes: " + Reflect.describe(e);
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

