package dev.streamjob.precheck34.job;

/** POJO state, a field retyped (sum: long -> String). */
public class Stats {
    public long count;
    public String sum;

    public Stats() {}

    public void add(long v) {
        count++;
        sum = String.valueOf((sum == null ? 0 : Long.parseLong(sum)) + v);
    }

    @Override
    public String toString() {
        return count + "/" + sum;
    }
}
