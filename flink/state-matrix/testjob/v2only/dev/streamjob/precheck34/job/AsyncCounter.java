package dev.streamjob.precheck34.job;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.v2.ValueState;
import org.apache.flink.api.common.state.v2.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/** Flink 2.x only: a keyed operator on async state (state API V2), "acount" Long or String. */
public final class AsyncCounter {
    public static DataStream<String> attach(DataStream<Long> numbers, String variant) {
        return numbers.keyBy((KeySelector<Long, Long>) n -> n % 8, Types.LONG).enableAsyncState()
                .process(new Fn(variant)).uid("async-counter").name("async-counter");
    }

    static final class Fn extends KeyedProcessFunction<Long, Long, String> {
        private final String variant;
        private transient ValueState<Long> count;
        private transient ValueState<String> countString;

        Fn(String variant) {
            this.variant = variant;
        }

        @Override
        public void open(OpenContext context) {
            if (variant.equals("async-string")) {
                countString = getRuntimeContext().getState(new ValueStateDescriptor<>("acount", Types.STRING));
            } else {
                count = getRuntimeContext().getState(new ValueStateDescriptor<>("acount", Types.LONG));
            }
        }

        @Override
        public void processElement(Long value, Context ctx, Collector<String> out) {
            if (countString != null) {
                countString.asyncValue().thenAccept(c -> countString.asyncUpdate(c == null ? "1" : c + "1"));
            } else {
                count.asyncValue().thenAccept(c -> count.asyncUpdate(c == null ? 1L : c + 1));
            }
            out.collect("a");
        }
    }
}
