package dev.streamjob.precheck34.job;

/** POJO state, a field removed (sum). */
public class Stats {
    public long count;

    public Stats() {}

    public void add(long v) {
        count++;
    }

    @Override
    public String toString() {
        return String.valueOf(count);
    }
}
