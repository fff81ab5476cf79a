#!/usr/bin/env python3
"""Prints the ninja targets (paths relative to BUILD) that the selected tests
need, so a sanitizer or release build compiles only those and not every app,
example and benchmark:

    ninja -C BUILD $(python3 scripts/test-targets.py BUILD --suite unit)
    ninja -C BUILD $(python3 scripts/test-targets.py BUILD runtime rpc_unit)

A test is selected when it is in one of the --suite suites (any when none is
given) and, when NAMES are given, its name is one of them. Exit status 1 when
nothing is selected (a typo must not turn into an empty, passing stage).
"""
import argparse
import json
import os
import subprocess
import sys


def introspect(build, what):
    out = subprocess.run(["meson", "introspect", build, what], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build")
    ap.add_argument("--suite", action="append", default=[])
    ap.add_argument("names", nargs="*")
    a = ap.parse_intermixed_args()
    build = os.path.realpath(a.build)
    tests = introspect(build, "--tests")
    files = {t["id"]: t["filename"] for t in introspect(build, "--targets")}
    outputs = {os.path.normpath(f) for fs in files.values() for f in fs}
    wanted, seen = [], set()
    for t in tests:
        suites = {s.split(":", 1)[-1] for s in t["suite"]}
        if a.suite and not suites & set(a.suite):
            continue
        if a.names and t["name"] not in a.names:
            continue
        seen.add(t["name"])
        paths = [p for dep in t["depends"] for p in files.get(dep, [])]
        paths += [os.path.normpath(c) for c in t["cmd"]
                  if isinstance(c, str) and os.path.normpath(c) in outputs]
        for p in paths:
            rel = os.path.relpath(p, build)
            if rel not in wanted:
                wanted.append(rel)
    missing = [n for n in a.names if n not in seen]
    if missing or not seen:
        print(f"test-targets: no such test in {a.build}: {' '.join(missing) or '(none selected)'}",
              file=sys.stderr)
        return 1
    print(" ".join(wanted))
    return 0


if __name__ == "__main__":
    sys.exit(main())
