package dev.streamjob.bench;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.SplittableRandom;

/**
 * Deterministic generator of the two benchmark inputs (same schema as the Rust side writes):
 *
 * <pre>
 * bids.csv       auction,bidder,price,channel,url,date_time,extra
 * generator.csv  id,key,value,ts
 * </pre>
 *
 * Bids follow the Nexmark generator's shape (default NexmarkConfiguration): 46 of every 50 events
 * are bids, auctions/persons are created at 3/50 and 1/50 of the event rate, half of the bids go
 * to the current hot auction (hotAuctionRatio=2), three quarters come from the current hot bidder
 * (hotBiddersRatio=4), prices are log-uniform 1 ... 1,000,000 units (in cents), 9 of 10 bids come
 * from 4 hot channels, events are 10,000/s of event time from 2026-01-01T00:00:00Z. Same seed, same
 * bytes.
 *
 * <p>Usage: GenerateInput OUT_DIR BIDS_COUNT GEN_COUNT [SEED]
 */
public final class GenerateInput {
    private GenerateInput() {}

    static final long BASE_TIME_MS = 1_767_225_600_000L; // 2026-01-01T00:00:00Z
    static final String[] HOT_CHANNELS = {"Google", "Facebook", "Baidu", "Apple"};
    static final String[] HOT_URLS = {
        "https://www.nexmark.com/googl/item.htm?query=1",
        "https://www.nexmark.com/faceb/item.htm?query=1",
        "https://www.nexmark.com/baidu/item.htm?query=1",
        "https://www.nexmark.com/apple/item.htm?query=1",
    };
    static final int GEN_KEYS = 1000;

    public static void main(String[] args) throws IOException {
        if (args.length < 3) {
            System.err.println("usage: GenerateInput OUT_DIR BIDS_COUNT GEN_COUNT [SEED]");
            System.exit(2);
        }
        Path out = Path.of(args[0]);
        long bids = Long.parseLong(args[1]);
        long gens = Long.parseLong(args[2]);
        long seed = args.length > 3 ? Long.parseLong(args[3]) : 42L;
        Files.createDirectories(out);
        writeBids(out.resolve("bids.csv"), bids, new SplittableRandom(seed));
        writeGenerator(out.resolve("generator.csv"), gens, new SplittableRandom(seed + 1));
    }

    static Writer open(Path p) throws IOException {
        return new BufferedWriter(
                new OutputStreamWriter(Files.newOutputStream(p), StandardCharsets.UTF_8), 1 << 20);
    }

    static void writeBids(Path p, long n, SplittableRandom rnd) throws IOException {
        StringBuilder sb = new StringBuilder(256);
        try (Writer w = open(p)) {
            w.write("auction,bidder,price,channel,url,date_time,extra\n");
            for (long i = 0; i < n; i++) {
                long eventId = i * 50 / 46;
                long lastAuction = eventId * 3 / 50;
                long auction;
                if (rnd.nextInt(2) > 0) {
                    auction = (lastAuction / 100) * 100;
                } else {
                    auction = lastAuction - rnd.nextLong(Math.min(lastAuction, 1000) + 1);
                }
                auction += 1000;
                long lastPerson = eventId / 50;
                long bidder;
                if (rnd.nextInt(4) > 0) {
                    bidder = (lastPerson / 100) * 100;
                } else {
                    bidder = lastPerson - rnd.nextLong(Math.min(lastPerson, 1000) + 1);
                }
                bidder += 1000;
                long price = Math.round(Math.pow(10.0, rnd.nextDouble() * 6.0) * 100.0);
                String channel;
                String url;
                if (rnd.nextInt(10) > 0) {
                    int c = rnd.nextInt(HOT_CHANNELS.length);
                    channel = HOT_CHANNELS[c];
                    url = HOT_URLS[c];
                } else {
                    int c = rnd.nextInt(10_000);
                    channel = "channel-" + c;
                    url = "https://www.nexmark.com/" + word(rnd, 5) + "/item.htm?query=1&channel_id=" + c;
                }
                long dateTime = BASE_TIME_MS + eventId / 10;
                sb.setLength(0);
                sb.append(auction).append(',').append(bidder).append(',').append(price).append(',')
                        .append(channel).append(',').append(url).append(',').append(dateTime).append(',');
                // pad like Nexmark's "extra" towards an average bid of ~100 bytes
                int pad = Math.max(0, 100 - sb.length()) + rnd.nextInt(9) - 4;
                sb.append(word(rnd, Math.max(0, pad)));
                sb.append('\n');
                w.append(sb);
            }
        }
    }

    static void writeGenerator(Path p, long n, SplittableRandom rnd) throws IOException {
        StringBuilder sb = new StringBuilder(64);
        try (Writer w = open(p)) {
            w.write("id,key,value,ts\n");
            for (long i = 0; i < n; i++) {
                sb.setLength(0);
                sb.append(i).append(",key-").append(rnd.nextInt(GEN_KEYS)).append(',')
                        .append(rnd.nextInt(1000)).append(',').append(BASE_TIME_MS + i / 10).append('\n');
                w.append(sb);
            }
        }
    }

    static String word(SplittableRandom rnd, int len) {
        char[] c = new char[len];
        for (int i = 0; i < len; i++) {
            c[i] = (char) ('a' + rnd.nextInt(26));
        }
        return new String(c);
    }
}
