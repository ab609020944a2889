package dev.streamjob.flink.checker.state;

import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.TypeSerializerSchemaCompatibility;
import org.apache.flink.api.common.typeutils.TypeSerializerSnapshot;
import org.apache.flink.runtime.state.metainfo.StateMetaInfoSnapshot;

/**
 * How compatible a state the new job registered is with its saved serializer snapshot, resolved
 * as Flink's own StateSerializerProvider resolves it (for the rows whose registration Flink
 * accepted: as is, or after migration; and for every state when Flink's restore failed first).
 */
final class Compatibility {
    private Compatibility() {}

    static Row keyRow(String uid, SavedMeta meta, TypeSerializer<?> newKey) {
        TypeSerializerSchemaCompatibility<?> c = resolve(newKey, meta.keySnapshot, false);
        Row.Verdict v = c.isCompatibleAsIs() || c.isCompatibleWithReconfiguredSerializer() ? Row.Verdict.COMPATIBLE_AS_IS : Row.Verdict.INCOMPATIBLE;
        return new Row(uid, "(key)", "KEY", v, "key " + Reflect.simple(meta.keySnapshot) + " -> " + newKey.getClass().getSimpleName() + ": " + name(c));
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
                detail = Reflect.simple(oldSnap) + " -> " + newSer.getClass().getSimpleName() + ": " + name(c);
            }
            Row.Verdict v = verdictOf(c);
            if (v == Row.Verdict.INCOMPATIBLE && !rec.captureOnly) {
                detail += " (computed here, yet Flink's backend accepted the registration)";
            }
            return new Row(uid, r.name, r.kind, v, detail);
        } catch (Throwable t) {
            return new Row(uid, r.name, r.kind, Row.Verdict.COMPATIBLE_AS_IS,
                    "Flink's backend accepted it; as-is/after-migration not computed: " + Reflect.describe(t));
        }
    }

    static String name(TypeSerializerSchemaCompatibility<?> c) {
        return c.isIncompatible() ? "INCOMPATIBLE" : c.isCompatibleAfterMigration() ? "COMPATIBLE_AFTER_MIGRATION"
                : c.isCompatibleWithReconfiguredSerializer() ? "COMPATIBLE_WITH_RECONFIGURED_SERIALIZER" : "COMPATIBLE_AS_IS";
    }

    static int rank(TypeSerializerSchemaCompatibility<?> c) {
        return c.isIncompatible() ? 3 : c.isCompatibleAfterMigration() ? 2 : c.isCompatibleWithReconfiguredSerializer() ? 1 : 0;
    }

    static Row.Verdict verdictOf(TypeSerializerSchemaCompatibility<?> c) {
        return c.isIncompatible() ? Row.Verdict.INCOMPATIBLE
                : c.isCompatibleAfterMigration() ? Row.Verdict.AFTER_MIGRATION : Row.Verdict.COMPATIBLE_AS_IS;
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
}
