#!/usr/bin/env python3
"""Runs each [sig-api-machinery] [Conformance] spec of e2e.test in its own
process, JOBS at a time, and tallies them.

One process per spec because a spec whose setup fails in a goroutine of
its own (chunking's PodTemplate writers, for one) panics outside Ginkgo and
ends the whole e2e.test run: counted here as that spec's failure, not as
the end of the tally.

usage: run_each.py E2E_TEST KUBECONFIG OUT_DIR [PER_SPEC_SECONDS [JOBS [MUST_PASS_FILE]]]
Writes OUT_DIR/<n>.log and OUT_DIR/<n>.xml per spec and OUT_DIR/results.tsv
(status, seconds, first failure line, spec). With MUST_PASS_FILE (one spec
text per line), exits 1 when one of those specs did not pass: the figure
may rise, never silently fall."""
import concurrent.futures
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

FOCUS = r"\[sig-api-machinery\].*\[Conformance\]"


def specs(e2e, out):
    report = os.path.join(out, "dry-run.xml")
    subprocess.run(
        [e2e, "--ginkgo.dry-run", "--ginkgo.focus", FOCUS, "--ginkgo.junit-report", report,
         "--kubeconfig", "/dev/null"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    names = []
    for case in ET.parse(report).iter("testcase"):
        name = case.get("name", "")
        if case.find("skipped") is not None or not name.startswith("[It] "):
            continue
        if "[sig-api-machinery]" not in name or "[Conformance]" not in name:
            continue
        # "[It] <text> [label, label]": the spec text is between.
        text = re.sub(r" \[[^\]]*\]$", "", name[len("[It] "):])
        names.append(text)
    return sorted(set(names))


def first_failure(report):
    try:
        for case in ET.parse(report).iter("testcase"):
            if not case.get("name", "").startswith("[It]") or case.find("skipped") is not None:
                continue
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            if failure is None:
                return None
            text = (failure.get("message") or failure.text or "").strip()
            return text.splitlines()[0] if text else "(no message)"
    except (ET.ParseError, OSError):
        pass
    return "e2e.test wrote no report (it crashed)"


def run_one(args):
    index, text, e2e, kubeconfig, out, limit = args
    log = os.path.join(out, f"{index:03d}.log")
    report = os.path.join(out, f"{index:03d}.xml")
    start = time.monotonic()
    with open(log, "w") as sink:
        try:
            proc = subprocess.run(
                [e2e, "--kubeconfig", kubeconfig, "--provider", "skeleton",
                 "--ginkgo.focus", re.escape(text) + "$", "--ginkgo.no-color", "--ginkgo.v",
                 "--ginkgo.junit-report", report, "--disable-log-dump",
                 "--allowed-not-ready-nodes", "-1", "--node-schedulable-timeout", "10s"],
                stdout=sink, stderr=subprocess.STDOUT, timeout=limit, check=False)
            failure = None
            if proc.returncode != 0:
                failure = first_failure(report) or f"e2e.test exited {proc.returncode}"
            status = "pass" if failure is None else "fail"
            with open(log) as written:
                ran = re.search(r"Will run (\d+) of", written.read())
            if ran is None or ran.group(1) != "1":
                # The focus must pick exactly this spec, or the tally lies.
                status = "error"
                failure = f"the focus picked {ran.group(1) if ran else 'no'} specs"
        except subprocess.TimeoutExpired:
            status, failure = "fail", f"did not finish within {limit} s"
    seconds = time.monotonic() - start
    return status, seconds, failure or "", text


def main():
    e2e, kubeconfig, out = sys.argv[1:4]
    limit = int(sys.argv[4]) if len(sys.argv) > 4 else 180
    jobs_at_once = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    must_pass = []
    if len(sys.argv) > 6:
        with open(sys.argv[6]) as listed:
            must_pass = [line.strip() for line in listed if line.strip() and not line.startswith("#")]
    names = specs(e2e, out)
    jobs = [(i, t, e2e, kubeconfig, out, limit) for i, t in enumerate(names)]
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs_at_once) as pool:
        for status, seconds, failure, text in pool.map(run_one, jobs):
            results.append((status, seconds, failure, text))
            print(f"{status} {seconds:6.1f}s {text}", flush=True)
    # A listed spec that failed gets one more run on its own, so a spec
    # that only lost a race with eleven others does not fail CI; the
    # retry is reported as such.
    for i, (status, seconds, failure, text) in enumerate(results):
        if status == "fail" and text in must_pass:
            index = names.index(text)
            again = run_one((index, text, e2e, kubeconfig, out, limit))
            print(f"retry {again[0]} {again[1]:6.1f}s {text}", flush=True)
            if again[0] == "pass":
                results[i] = again
    with open(os.path.join(out, "results.tsv"), "w") as tsv:
        for status, seconds, failure, text in results:
            tsv.write(f"{status}\t{seconds:.1f}\t{failure}\t{text}\n")
    passed = sum(1 for r in results if r[0] == "pass")
    print(f"[sig-api-machinery] [Conformance]: {passed} passed of {len(results)}")
    # A spec the focus did not pick alone was not measured: fail the run.
    failed = any(r[0] == "error" for r in results)
    outcome = {text: status for status, _, _, text in results}
    for text in must_pass:
        if outcome.get(text) != "pass":
            print(f"REGRESSION: listed as passing but {outcome.get(text, 'not run')}: {text}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
