#!/usr/bin/env python3
"""Tallies a ginkgo JUnit report of e2e.test: the [sig-api-machinery]
[Conformance] tests that ran, passed and failed, and each failure's first
line, so causes can be grouped by hand in docs/kube-sim.md."""
import sys
import xml.etree.ElementTree as ET


def main(path):
    tree = ET.parse(path)
    passed, failed, skipped = [], [], []
    for case in tree.iter("testcase"):
        name = case.get("name", "")
        if "[sig-api-machinery]" not in name or "[Conformance]" not in name:
            continue
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        if case.find("skipped") is not None:
            skipped.append(name)
        elif failure is not None:
            text = (failure.get("message") or failure.text or "").strip()
            failed.append((name, text.splitlines()[0] if text else "(no message)"))
        else:
            passed.append(name)
    ran = len(passed) + len(failed)
    print(f"[sig-api-machinery] [Conformance]: {len(passed)} passed of {ran} run ({len(skipped)} skipped)")
    for name, why in sorted(failed):
        print(f"FAIL {name}\n     {why[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
