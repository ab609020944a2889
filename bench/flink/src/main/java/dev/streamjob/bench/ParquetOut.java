package dev.streamjob.bench;

import dev.streamjob.bench.Records.Bid;
import dev.streamjob.bench.Records.GenCountOut;
import dev.streamjob.bench.Records.Q1Out;
import dev.streamjob.bench.Records.Q2Out;
import dev.streamjob.bench.Records.Q5Out;
import dev.streamjob.bench.Records.Q7Out;
import java.io.IOException;
import java.io.Serializable;
import java.util.Map;
import org.apache.flink.connector.file.sink.FileSink;
import org.apache.flink.core.fs.Path;
import org.apache.flink.formats.parquet.ParquetBuilder;
import org.apache.flink.formats.parquet.ParquetWriterFactory;
import org.apache.flink.streaming.api.functions.sink.filesystem.OutputFileConfig;
import org.apache.flink.streaming.api.functions.sink.filesystem.bucketassigners.BasePathBucketAssigner;
import org.apache.flink.streaming.api.functions.sink.filesystem.rollingpolicies.OnCheckpointRollingPolicy;
import org.apache.hadoop.conf.Configuration;
import org.apache.parquet.hadoop.ParquetWriter;
import org.apache.parquet.hadoop.api.WriteSupport;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.parquet.io.OutputFile;
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.io.api.RecordConsumer;
import org.apache.parquet.schema.MessageType;
import org.apache.parquet.schema.MessageTypeParser;

/**
 * Flink {@link FileSink} in bulk (Parquet) mode for the benchmark outputs. Records are written by a
 * hand-written {@link WriteSupport} per output type (no Avro reflection, no RowData conversion): the
 * cheapest way for Flink's DataStream API to write Parquet. Bulk formats roll on every checkpoint.
 */
public final class ParquetOut {
    private ParquetOut() {}

    /** Writes the fields of one record (between startMessage and endMessage). */
    public interface FieldWriter<T> extends Serializable {
        void write(T rec, RecordConsumer c);
    }

    // Parquet schemas: the contract with the Rust side (plain INT64 / DOUBLE / UTF-8 BYTE_ARRAY).
    public static final String BID_SCHEMA =
            "message bid { required int64 auction; required int64 bidder; required int64 price;"
                    + " required binary channel (STRING); required binary url (STRING);"
                    + " required int64 date_time; required binary extra (STRING); }";
    public static final String Q1_SCHEMA =
            "message q1 { required int64 auction; required int64 bidder; required double price_eur;"
                    + " required int64 date_time; }";
    public static final String Q2_SCHEMA = "message q2 { required int64 auction; required int64 price; }";
    public static final String Q5_SCHEMA =
            "message q5 { required int64 auction; required int64 window_start;"
                    + " required int64 window_end; required int64 count; }";
    public static final String Q7_SCHEMA =
            "message q7 { required int64 window_start; required int64 window_end;"
                    + " required int64 max_price; }";
    public static final String GEN_COUNT_SCHEMA =
            "message gen_count { required binary key (STRING); required int64 window_start;"
                    + " required int64 window_end; required int64 count; required int64 sum_value; }";

    static void i64(RecordConsumer c, String name, int idx, long v) {
        c.startField(name, idx);
        c.addLong(v);
        c.endField(name, idx);
    }

    static void f64(RecordConsumer c, String name, int idx, double v) {
        c.startField(name, idx);
        c.addDouble(v);
        c.endField(name, idx);
    }

    static void str(RecordConsumer c, String name, int idx, String v) {
        c.startField(name, idx);
        c.addBinary(Binary.fromString(v));
        c.endField(name, idx);
    }

    public static final FieldWriter<Bid> BID_WRITER =
            (r, c) -> {
                i64(c, "auction", 0, r.auction);
                i64(c, "bidder", 1, r.bidder);
                i64(c, "price", 2, r.price);
                str(c, "channel", 3, r.channel);
                str(c, "url", 4, r.url);
                i64(c, "date_time", 5, r.date_time);
                str(c, "extra", 6, r.extra);
            };
    public static final FieldWriter<Q1Out> Q1_WRITER =
            (r, c) -> {
                i64(c, "auction", 0, r.auction);
                i64(c, "bidder", 1, r.bidder);
                f64(c, "price_eur", 2, r.price_eur);
                i64(c, "date_time", 3, r.date_time);
            };
    public static final FieldWriter<Q2Out> Q2_WRITER =
            (r, c) -> {
                i64(c, "auction", 0, r.auction);
                i64(c, "price", 1, r.price);
            };
    public static final FieldWriter<Q5Out> Q5_WRITER =
            (r, c) -> {
                i64(c, "auction", 0, r.auction);
                i64(c, "window_start", 1, r.window_start);
                i64(c, "window_end", 2, r.window_end);
                i64(c, "count", 3, r.count);
            };
    public static final FieldWriter<Q7Out> Q7_WRITER =
            (r, c) -> {
                i64(c, "window_start", 0, r.window_start);
                i64(c, "window_end", 1, r.window_end);
                i64(c, "max_price", 2, r.max_price);
            };
    public static final FieldWriter<GenCountOut> GEN_COUNT_WRITER =
            (r, c) -> {
                str(c, "key", 0, r.key);
                i64(c, "window_start", 1, r.window_start);
                i64(c, "window_end", 2, r.window_end);
                i64(c, "count", 3, r.count);
                i64(c, "sum_value", 4, r.sum_value);
            };

    /** The FileSink for one output type: flat directory, part-*.parquet, rolls on checkpoint. */
    public static <T> FileSink<T> sink(
            String outputDir, String schema, FieldWriter<T> writer, CompressionCodecName codec) {
        return FileSink.forBulkFormat(
                        new Path(outputDir),
                        new ParquetWriterFactory<>(new Builder<>(schema, writer, codec)))
                .withBucketAssigner(new BasePathBucketAssigner<>())
                .withRollingPolicy(OnCheckpointRollingPolicy.build())
                .withOutputFileConfig(
                        OutputFileConfig.builder().withPartPrefix("part").withPartSuffix(".parquet").build())
                .build();
    }

    /** Serializable factory of Parquet writers (Flink calls it once per part file). */
    static final class Builder<T> implements ParquetBuilder<T> {
        private static final long serialVersionUID = 1L;
        private final String schema;
        private final FieldWriter<T> writer;
        private final CompressionCodecName codec;

        Builder(String schema, FieldWriter<T> writer, CompressionCodecName codec) {
            this.schema = schema;
            this.writer = writer;
            this.codec = codec;
        }

        @Override
        public ParquetWriter<T> createWriter(OutputFile out) throws IOException {
            return new WriterBuilder<>(out, MessageTypeParser.parseMessageType(schema), writer)
                    .withCompressionCodec(codec)
                    .build();
        }
    }

    static final class WriterBuilder<T> extends ParquetWriter.Builder<T, WriterBuilder<T>> {
        private final MessageType schema;
        private final FieldWriter<T> writer;

        WriterBuilder(OutputFile out, MessageType schema, FieldWriter<T> writer) {
            super(out);
            this.schema = schema;
            this.writer = writer;
        }

        @Override
        protected WriterBuilder<T> self() {
            return this;
        }

        @Override
        protected WriteSupport<T> getWriteSupport(Configuration conf) {
            return new Support<>(schema, writer);
        }
    }

    static final class Support<T> extends WriteSupport<T> {
        private final MessageType schema;
        private final FieldWriter<T> writer;
        private RecordConsumer consumer;

        Support(MessageType schema, FieldWriter<T> writer) {
            this.schema = schema;
            this.writer = writer;
        }

        @Override
        public WriteContext init(Configuration configuration) {
            return new WriteContext(schema, Map.of());
        }

        @Override
        public void prepareForWrite(RecordConsumer recordConsumer) {
            this.consumer = recordConsumer;
        }

        @Override
        public void write(T record) {
            consumer.startMessage();
            writer.write(record, consumer);
            consumer.endMessage();
        }
    }
}
