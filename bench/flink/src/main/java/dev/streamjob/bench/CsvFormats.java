package dev.streamjob.bench;

import dev.streamjob.bench.Records.Bid;
import dev.streamjob.bench.Records.GenRecord;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.file.src.reader.SimpleStreamFormat;
import org.apache.flink.connector.file.src.reader.StreamFormat;
import org.apache.flink.core.fs.FSDataInputStream;

/**
 * Byte-level CSV readers for the two input files, as a tuned Flink user would write them (a
 * {@link SimpleStreamFormat} that parses while reading, so the single source reader emits typed
 * records). The first line (the header) is skipped. Fields may be quoted with '"' ("" escapes a
 * quote); fields contain no line breaks.
 */
public final class CsvFormats {
    private CsvFormats() {}

    /** Wall-clock (System.nanoTime) at which a source reader hit the end of its file; 0 before. */
    public static final AtomicLong END_OF_INPUT_NANOS = new AtomicLong();

    /** Parses one line into a record. */
    interface LineParser<T> {
        T parse(byte[] b, int start, int end);
    }

    abstract static class Base<T> extends SimpleStreamFormat<T> {
        abstract LineParser<T> parser();

        @Override
        public StreamFormat.Reader<T> createReader(Configuration config, FSDataInputStream stream) {
            return new LineReader<>(stream, parser());
        }
    }

    /** bids.csv */
    public static final class BidFormat extends Base<Bid> {
        @Override
        LineParser<Bid> parser() {
            return (b, s, e) -> {
                Cursor c = new Cursor(b, s, e);
                Bid bid = new Bid();
                bid.auction = c.nextLong();
                bid.bidder = c.nextLong();
                bid.price = c.nextLong();
                bid.channel = c.nextString();
                bid.url = c.nextString();
                bid.date_time = c.nextLong();
                bid.extra = c.nextString();
                return bid;
            };
        }

        @Override
        public TypeInformation<Bid> getProducedType() {
            return TypeInformation.of(Bid.class);
        }
    }

    /** generator.csv */
    public static final class GenFormat extends Base<GenRecord> {
        @Override
        LineParser<GenRecord> parser() {
            return (b, s, e) -> {
                Cursor c = new Cursor(b, s, e);
                GenRecord r = new GenRecord();
                r.id = c.nextLong();
                r.key = c.nextString();
                r.value = c.nextLong();
                r.ts = c.nextLong();
                return r;
            };
        }

        @Override
        public TypeInformation<GenRecord> getProducedType() {
            return TypeInformation.of(GenRecord.class);
        }
    }

    static final class LineReader<T> implements StreamFormat.Reader<T> {
        private final InputStream in;
        private final LineParser<T> parser;
        private byte[] buf = new byte[1 << 16];
        private int pos;
        private int lim;
        private boolean eof;
        private boolean headerSkipped;

        LineReader(InputStream in, LineParser<T> parser) {
            this.in = in;
            this.parser = parser;
        }

        @Override
        public T read() throws IOException {
            while (true) {
                int nl = -1;
                for (int i = pos; i < lim; i++) {
                    if (buf[i] == '\n') {
                        nl = i;
                        break;
                    }
                }
                int start = pos;
                int end;
                if (nl >= 0) {
                    end = nl;
                    pos = nl + 1;
                } else if (eof) {
                    if (pos >= lim) {
                        END_OF_INPUT_NANOS.compareAndSet(0, System.nanoTime());
                        return null;
                    }
                    end = lim;
                    pos = lim;
                } else {
                    fill();
                    continue;
                }
                if (end > start && buf[end - 1] == '\r') {
                    end--;
                }
                if (!headerSkipped) {
                    headerSkipped = true;
                    continue;
                }
                if (end == start) {
                    continue; // blank line
                }
                return parser.parse(buf, start, end);
            }
        }

        private void fill() throws IOException {
            if (pos > 0) {
                System.arraycopy(buf, pos, buf, 0, lim - pos);
                lim -= pos;
                pos = 0;
            }
            if (lim == buf.length) {
                byte[] n = new byte[buf.length * 2];
                System.arraycopy(buf, 0, n, 0, lim);
                buf = n;
            }
            int r = in.read(buf, lim, buf.length - lim);
            if (r < 0) {
                eof = true;
            } else {
                lim += r;
            }
        }

        @Override
        public void close() throws IOException {
            in.close();
        }
    }

    /** Field cursor over one line. */
    static final class Cursor {
        private final byte[] b;
        private int p;
        private final int end;

        Cursor(byte[] b, int start, int end) {
            this.b = b;
            this.p = start;
            this.end = end;
        }

        long nextLong() {
            boolean neg = false;
            if (p < end && b[p] == '"') {
                return Long.parseLong(nextString().trim());
            }
            if (p < end && b[p] == '-') {
                neg = true;
                p++;
            }
            long v = 0;
            int digits = 0;
            while (p < end && b[p] != ',') {
                int d = b[p] - '0';
                if (d < 0 || d > 9) {
                    throw new IllegalArgumentException(
                            "bad integer in line: " + new String(b, 0, end, StandardCharsets.UTF_8));
                }
                v = v * 10 + d;
                p++;
                digits++;
            }
            if (digits == 0) {
                throw new IllegalArgumentException("empty integer field");
            }
            p++; // skip ','
            return neg ? -v : v;
        }

        String nextString() {
            if (p < end && b[p] == '"') {
                StringBuilder sb = new StringBuilder();
                p++;
                int s = p;
                while (p < end) {
                    if (b[p] == '"') {
                        if (p + 1 < end && b[p + 1] == '"') {
                            sb.append(new String(b, s, p + 1 - s, StandardCharsets.UTF_8));
                            p += 2;
                            s = p;
                            continue;
                        }
                        sb.append(new String(b, s, p - s, StandardCharsets.UTF_8));
                        p++; // closing quote
                        break;
                    }
                    p++;
                }
                p++; // skip ','
                return sb.toString();
            }
            int s = p;
            while (p < end && b[p] != ',') {
                p++;
            }
            String v = new String(b, s, p - s, StandardCharsets.UTF_8);
            p++;
            return v;
        }
    }
}
