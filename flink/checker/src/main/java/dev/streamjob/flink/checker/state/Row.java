package dev.streamjob.flink.checker.state;

/** One state of one operator, and what Flink's restore would make of it. */
public final class Row {
    /** What the restore would do with a state. */
    public enum Verdict {
        /** Restored as saved. */
        COMPATIBLE_AS_IS,
        /** Restored after Flink migrates it to the new serializer (RocksDB rewrites every entry). */
        AFTER_MIGRATION,
        /** Flink's restore fails on it: the new job would fail after the old one is stopped. */
        INCOMPATIBLE,
        /** Registered by the new job, not in the savepoint: starts empty. */
        NEW,
        /** In the savepoint, not registered by the new operator when it starts: dropped. */
        LEFT_BEHIND,
        /** A source's or sink's state: the probe never creates those operators. */
        NOT_CHECKED,
        /** The operator failed to start outside any state registration: no verdict. */
        UNDECIDED
    }

    public final String uid;
    public final String state;
    public final String kind;
    public final Verdict verdict;
    public final String reason;

    Row(String uid, String state, String kind, Verdict verdict, String reason) {
        this.uid = uid;
        this.state = state;
        this.kind = kind;
        this.verdict = verdict;
        this.reason = reason;
    }
}
