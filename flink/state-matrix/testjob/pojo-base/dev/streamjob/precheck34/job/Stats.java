package dev.streamjob.precheck34.job;

/** POJO state, version A: count and sum. */
public class Stats {
    public long count;
    public long sum;

    public Stats() {}

    public void add(long v) {
        count++;
        sum += v;
    }

    @Override
    public String toString() {
        return count + "/" + sum;
    }
}
