#!/usr/bin/env python3
"""Engine-independent reference: computes, from the input CSV alone, the outputRecords and the
checksums every engine must report for a query (same definitions as bench/flink ReadBack):
INT64 column -> sum of values; DOUBLE column -> sum of round(v * 1000); STRING -> sum of UTF-8
byte lengths. Pure Python, meant for small inputs (~100k rows) in tests.

    bench/tools/expected.py QUERY INPUT_DIR
"""
import csv
import json
import math
import sys
from collections import defaultdict


def jround(x):
    # Java Math.round: floor(x + 0.5)
    return math.floor(x + 0.5)


def blen(s):
    return len(s.encode("utf-8"))


def rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        r = csv.reader(f)
        next(r)
        for row in r:
            if row:
                yield row


def main():
    query, input_dir = sys.argv[1], sys.argv[2]
    sums = defaultdict(int)
    n = 0
    if query == "gen-count":
        win = {}
        for id_, key, value, ts in rows(f"{input_dir}/generator.csv"):
            ts = int(ts)
            start = ts - ts % 1000
            acc = win.setdefault((key, start), [0, 0])
            acc[0] += 1
            acc[1] += int(value)
        for (key, start), (c, s) in win.items():
            n += 1
            sums["key"] += blen(key)
            sums["window_start"] += start
            sums["window_end"] += start + 1000
            sums["count"] += c
            sums["sum_value"] += s
        primary = "sum_value"
    else:
        bids = rows(f"{input_dir}/bids.csv")
        if query == "q0":
            for a, b, p, ch, url, dt, extra in bids:
                n += 1
                sums["auction"] += int(a); sums["bidder"] += int(b); sums["price"] += int(p)
                sums["channel"] += blen(ch); sums["url"] += blen(url)
                sums["date_time"] += int(dt); sums["extra"] += blen(extra)
            primary = "price"
        elif query == "q1":
            for a, b, p, ch, url, dt, extra in bids:
                n += 1
                sums["auction"] += int(a); sums["bidder"] += int(b)
                sums["price_eur"] += jround(int(p) * 0.908 * 1000.0)
                sums["date_time"] += int(dt)
            primary = "price_eur"
        elif query == "q2":
            for a, b, p, *_ in bids:
                if int(a) % 123 == 0:
                    n += 1
                    sums["auction"] += int(a); sums["price"] += int(p)
            primary = "price"
        elif query == "q5":
            win = defaultdict(int)
            for a, b, p, ch, url, dt, extra in bids:
                ts = int(dt)
                last = ts - ts % 2000  # latest window start containing ts (slide 2 s)
                for start in range(last, ts - 10000, -2000):  # size 10 s: 5 windows
                    win[(int(a), start)] += 1
            for (a, start), c in win.items():
                n += 1
                sums["auction"] += a; sums["window_start"] += start
                sums["window_end"] += start + 10000; sums["count"] += c
            primary = "count"
        elif query == "q7":
            win = {}
            for a, b, p, ch, url, dt, extra in bids:
                ts = int(dt)
                start = ts - ts % 10000
                win[start] = max(win.get(start, -(2**63)), int(p))
            for start, m in win.items():
                n += 1
                sums["window_start"] += start; sums["window_end"] += start + 10000
                sums["max_price"] += m
            primary = "max_price"
        else:
            sys.exit(f"unknown query {query}")
    # wrap like Java longs
    wrap = lambda v: (v + 2**63) % 2**64 - 2**63
    print(json.dumps({"query": query, "outputRecords": n, "outputSumColumn": primary,
                      "outputSum": wrap(sums[primary]),
                      "columnSums": {k: wrap(v) for k, v in sums.items()}}))


if __name__ == "__main__":
    main()
