#!/usr/bin/env python3
"""Prints the end of the output of every failed test that meson recorded
since a moment: `make test` calls it after its summary, so that a CI log cut
to its last lines still says why a test failed.

    python3 scripts/failed-test-logs.py SINCE_EPOCH [LINES]

Reads BUILD/meson-logs/testlog.json of every build directory at the top of
the repository that was written after SINCE_EPOCH; prints, per test whose
result is not OK, SKIP or EXPECTEDFAIL, its name, result, duration and the
last LINES (default 60) lines of its output."""
import glob
import json
import os
import sys

OK = {"OK", "SKIP", "EXPECTEDFAIL"}


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    since = float(sys.argv[1])
    lines = int(sys.argv[2]) if len(sys.argv) == 3 else 60
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for log in sorted(glob.glob(os.path.join(root, "*", "meson-logs", "testlog.json"))):
        if os.path.getmtime(log) < since:
            continue
        build = os.path.relpath(os.path.dirname(os.path.dirname(log)), root)
        with open(log, encoding="utf-8", errors="replace") as f:
            for raw in f:
                try:
                    t = json.loads(raw)
                except ValueError:
                    continue
                if t.get("result") in OK or float(t.get("starttime", 0)) < since:
                    continue
                out = (t.get("stdout") or "") + (t.get("stderr") or "")
                tail = out.rstrip("\n").split("\n")[-lines:]
                print(f"\n== {build}: {t.get('name')} {t.get('result')} after {float(t.get('duration', 0)):.1f} s"
                      f" (last {len(tail)} lines of its output)")
                for line in tail:
                    print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
