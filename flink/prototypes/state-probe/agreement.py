#!/usr/bin/env python3
"""Agreement of the probe with Flink's real restore: python3 agreement.py runs/<dir>... -> markdown."""
import re, sys, pathlib

def short(msg):
    msg = re.sub(r'org\.apache\.flink\.[a-z.]*\.([A-Z])', r'\1', msg)
    msg = re.sub(r'java\.lang\.', '', msg)
    return msg

for d in sys.argv[1:]:
    rows = [l.rstrip('\n').split('\t') for l in open(f'{d}/matrix.tsv')][1:]
    agree = same = 0
    print(f'\n### {d}\n')
    print('| change | Flink restore (first line of root cause) | probe prediction | probe rows that are not COMPATIBLE_AS_IS | outcome agrees | same exception |')
    print('|---|---|---|---|---|---|')
    for case, flink, probe in rows:
        ok_flink = flink.startswith('RESULT OK')
        ok_probe = probe.startswith('PREDICTION RESTORES')
        fmsg = re.sub(r'^RESULT (FAILED |OK )', '', flink)
        fmsg = re.sub(r'^[a-z.]*\.([A-Z]\w*: )', r'\1', fmsg)
        pmsg = re.sub(r'^PREDICTION (FAILS uid \S+: |RESTORES.*)', '', probe)
        a = ok_flink == ok_probe
        s = ok_flink and ok_probe or (not ok_flink and fmsg.strip() == pmsg.strip())
        agree += a; same += s
        notable = []
        for line in pathlib.Path(f'{d}/cases/{case}/probe.txt').read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[3] in ('AFTER_MIGRATION', 'INCOMPATIBLE', 'NEW', 'LEFT_BEHIND', 'UNDECIDED') and 'TIMERS' != parts[2]:
                notable.append(f'{parts[0]}/{parts[1]} {parts[3]}')
        print(f'| {case} | {"OK (first checkpoint)" if ok_flink else "FAILED " + short(fmsg)[:150]} | '
              f'{"RESTORES" if ok_probe else "FAILS " + short(pmsg)[:60] + "…"} | {"; ".join(notable)} | {"yes" if a else "NO"} | {"yes" if s else "no"} |')
    print(f'\noutcome agreement {agree}/{len(rows)}, identical exception (or both OK) {same}/{len(rows)}')
