package dev.streamjob.bench;

/**
 * Flink POJOs (public class, public no-arg constructor, public fields) for the inputs and outputs.
 * Column names and types are the contract with the Rust side: see bench/README.md.
 */
public final class Records {
    private Records() {}

    /** One row of bids.csv: auction,bidder,price,channel,url,date_time,extra. */
    public static class Bid {
        public long auction;
        public long bidder;
        /** cents */
        public long price;
        public String channel;
        public String url;
        /** epoch millis; the event time */
        public long date_time;
        public String extra;

        public Bid() {}
    }

    /** One row of generator.csv: id,key,value,ts. */
    public static class GenRecord {
        /** uint64 in the file; values used here fit in a signed long */
        public long id;
        public String key;
        public long value;
        /** epoch millis; the event time */
        public long ts;

        public GenRecord() {}
    }

    /** q1 output. */
    public static class Q1Out {
        public long auction;
        public long bidder;
        public double price_eur;
        public long date_time;

        public Q1Out() {}
    }

    /** q2 output. */
    public static class Q2Out {
        public long auction;
        public long price;

        public Q2Out() {}
    }

    /** q5 output: bids per auction per sliding window. */
    public static class Q5Out {
        public long auction;
        public long window_start;
        public long window_end;
        public long count;

        public Q5Out() {}
    }

    /** q7 output: highest price per tumbling window. */
    public static class Q7Out {
        public long window_start;
        public long window_end;
        public long max_price;

        public Q7Out() {}
    }

    /** gen-count output. */
    public static class GenCountOut {
        public String key;
        public long window_start;
        public long window_end;
        public long count;
        public long sum_value;

        public GenCountOut() {}
    }

    /** Accumulator of gen-count (heap state backend keeps it as an object). */
    public static class CountSum {
        public long count;
        public long sum;

        public CountSum() {}
    }
}
