package dev.streamjob.precheck34.job;

/** POJO state, a field added (max). */
public class Stats {
    public long count;
    public long sum;
    public long max;

    public Stats() {}

    public void add(long v) {
        count++;
        sum += v;
        max = Math.max(max, v);
    }

    @Override
    public String toString() {
        return count + "/" + sum + "/" + max;
    }
}
