package dev.streamjob.flink.checker.state;

import org.apache.flink.api.common.state.StateDescriptor;
import org.apache.flink.api.common.typeutils.TypeSerializer;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.LinkedHashMap;
import java.util.Map;

/** Where a state lives: keyed, operator (list, union) or broadcast state. */
enum Scope { KEYED, OPERATOR, BROADCAST }

/** One state an operator registered, and Flink's refusal if it refused it. */
final class Registration {
    Scope scope;
    String name;
    String kind;
    Object descriptor;
    TypeSerializer<?> serializer; // timers: the element serializer passed in
    Throwable failure;
}

/**
 * Records every state registration an operator makes while it starts (keyed value, list, map,
 * reducing and aggregating state, timers, operator list and union state, broadcast state). A
 * registration Flink's backend refuses is recorded with Flink's exception and answered from an
 * empty backend, so the operator goes on starting and its later registrations are seen too.
 */
final class Recorder {
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
        return proxies.computeIfAbsent(realBackend, b -> Reflect.proxy(b, (proxy, m, args) -> {
            String n = m.getName();
            if ((n.equals("getPartitionedState") || n.equals("getOrCreateKeyedState"))
                    && args != null && args[args.length - 1] instanceof StateDescriptor) {
                StateDescriptor<?, ?> d = (StateDescriptor<?, ?>) args[args.length - 1];
                return guarded(Scope.KEYED, d.getName(), d.getType().name(), d, null, m, b, args, true);
            }
            if ((n.equals("getOrCreateKeyedState") || n.equals("createStateInternal")) && args != null
                    && args.length > 0 && args[args.length - 1] != null
                    && Reflect.isA(args[args.length - 1].getClass(), "org.apache.flink.api.common.state.v2.StateDescriptor")) {
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
            return Reflect.invoke(m, b, args);
        }));
    }

    Object operatorProxy(Object realBackend) {
        return proxies.computeIfAbsent(realBackend, b -> Reflect.proxy(b, (proxy, m, args) -> {
            String n = m.getName();
            if (args != null && args.length == 1 && args[0] instanceof StateDescriptor) {
                StateDescriptor<?, ?> d = (StateDescriptor<?, ?>) args[0];
                if (n.equals("getListState")) return guarded(Scope.OPERATOR, d.getName(), "LIST", d, null, m, b, args, false);
                if (n.equals("getUnionListState")) return guarded(Scope.OPERATOR, d.getName(), "UNION", d, null, m, b, args, false);
                if (n.equals("getBroadcastState")) return guarded(Scope.BROADCAST, d.getName(), "BROADCAST", d, null, m, b, args, false);
            }
            return Reflect.invoke(m, b, args);
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
        return Reflect.invoke(m, fallback, args);
    }

    /** The serializer the backend registered (heap: its state table's meta info; TTL-wrapped if enabled). */
    TypeSerializer<?> registeredSerializer(String name, Object descriptor) {
        try {
            Object backend = realKeyed != null ? realKeyed : realAsync;
            Field inner = backend == realAsync ? Reflect.findField(backend.getClass(), "keyedStateBackend") : null;
            if (inner != null) backend = inner.get(backend); // AsyncKeyedStateBackendAdaptor
            Field f = Reflect.findField(backend.getClass(), "registeredKVStates");
            if (f == null) f = Reflect.findField(backend.getClass(), "kvStateInformation"); // RocksDB
            Object entry = ((Map<?, ?>) f.get(backend)).get(name);
            Field mf = Reflect.findField(entry.getClass(), "metaInfo"); // RocksDbKvStateInfo.metaInfo
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

