#!/usr/bin/env python3
"""Agreement of the pre-check with Flink's real restore: python3 agreement.py runs/<dir>... -> markdown.
(`--prediction verdict.json`: the pre-check's verdict as one line, for run-matrix.sh.)"""
import json, re, sys, pathlib


def verdict(path):
    lines = [l for l in pathlib.Path(path).read_text().splitlines() if l.startswith('{')]
    return json.loads(lines[-1]) if lines else {'verdict': 'error', 'message': 'no verdict line'}


if len(sys.argv) == 3 and sys.argv[1] == '--prediction':
    v = verdict(sys.argv[2])
    if v['verdict'] == 'compatible':
        print('PREDICTION RESTORES')
    elif v['verdict'] == 'incompatible' and all(p['kind'] == 'state-left-behind' for p in v['problems']):
        # Flink restores and drops the state silently; the pre-check refuses that on purpose
        p = v['problems'][0]
        print(f"PREDICTION RESTORES, refused: state left behind in uid {p.get('uid')}: {p['message']}")
    elif v['verdict'] == 'incompatible':
        p = v['problems'][0]
        print(f"PREDICTION FAILS uid {p.get('uid')}: {p['message']}")
    else:
        print(f"ERROR {v.get('message')}")
    sys.exit(0)

def short(msg):
    msg = re.sub(r'org\.apache\.flink\.[a-z.]*\.([A-Z])', r'\1', msg)
    msg = re.sub(r'java\.lang\.', '', msg)
    return msg

for d in sys.argv[1:]:
    rows = [l.rstrip('\n').split('\t') for l in open(f'{d}/matrix.tsv')][1:]
    agree = same = 0
    print(f'\n### {d}\n')
    print('| change | Flink restore (first line of root cause) | pre-check verdict | states not compatible as is | outcome agrees | same exception |')
    print('|---|---|---|---|---|---|')
    for case, flink, probe in rows:
        ok_flink = flink.startswith('RESULT OK')
        ok_probe = probe.startswith('PREDICTION RESTORES')
        fmsg = re.sub(r'^RESULT (FAILED |OK )', '', flink)
        fmsg = re.sub(r'^[a-z.]*\.([A-Z]\w*: )', r'\1', fmsg)
        pmsg = re.sub(r'^PREDICTION (FAILS uid \S+: |RESTORES.*)', '', probe)
        a = ok_flink == ok_probe
        # the same exception: Flink's own text (its first 60 characters) in the pre-check's reason
        s = ok_flink and ok_probe or (not ok_flink and fmsg.strip()[:60] in pmsg)
        agree += a; same += s
        notable = [f"{r['uid']}/{r['state']} {r['verdict']}"
                   for r in verdict(f'{d}/cases/{case}/verdict.json').get('stateVerdicts', [])
                   if r['verdict'] in ('AFTER_MIGRATION', 'INCOMPATIBLE', 'NEW', 'LEFT_BEHIND', 'UNDECIDED')
                   and r['kind'] != 'TIMERS']
        said = ("RESTORES, refused (state left behind)" if "refused" in probe else "RESTORES") if ok_probe \
            else "FAILS " + short(pmsg)[:60] + "…"
        print(f'| {case} | {"OK (first checkpoint)" if ok_flink else "FAILED " + short(fmsg)[:150]} | '
              f'{said} | {"; ".join(notable)} | {"yes" if a else "NO"} | {"yes" if s else "no"} |')
    print(f'\noutcome agreement {agree}/{len(rows)}, identical exception (or both OK) {same}/{len(rows)}')
