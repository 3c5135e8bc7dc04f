#!/usr/bin/env python3
"""Runs upstream Starkite's own test suite under kite and checks the README against it.

`make upstream-compat UPSTREAM=/path/to/starkite` runs every `tests/*_test.star` of an
upstream checkout (fetching nothing; the files stay outside this repository) with
`kite test --allow-all`, from the checkout's root as upstream runs them, and prints a
pass/fail table per file. Then it checks the README, so that it cannot claim more than
the suite shows:

- the table between `<!-- upstream-suite:begin -->` and `<!-- upstream-suite:end -->`
  must be the one just printed (`--write` rewrites it);
- every failing test must be listed, with a reason, between
  `<!-- upstream-differences:begin -->` and `<!-- upstream-differences:end -->` as
  `` - `file_test.star::test_name`: reason ``, and every test listed there must fail.

Exit status: 0 when the README agrees with the suite, 1 when it does not, 2 on bad use.
"""

import argparse
import pathlib
import re
import subprocess
import sys

RESULT = re.compile(r"^(PASS|FAIL|SKIP) (\S+?)::(\S+)")
SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed(?:, (\d+) skipped)?")
SUITE = ("<!-- upstream-suite:begin -->", "<!-- upstream-suite:end -->")
DIFFERENCES = ("<!-- upstream-differences:begin -->", "<!-- upstream-differences:end -->")
DECLARED = re.compile(r"^def test_\w*\(", re.M)
LISTED = re.compile(r"^- `([\w.-]+_test\.star)::(\S+?)`: \S")


def run(kite, root, rel, timeout):
    """The results of one file: {test: PASS|FAIL|SKIP}, and its summary counts."""
    try:
        out = subprocess.run(
            [kite, "test", "--allow-all", rel],
            cwd=root, capture_output=True, text=True, timeout=timeout,
        )
        text = out.stdout + out.stderr
    except subprocess.TimeoutExpired:
        return {"<timeout>": "FAIL"}, (0, 1, 0)
    results = {}
    counts = None
    for line in text.splitlines():
        m = RESULT.match(line)
        if m:
            results[m.group(3)] = m.group(1)
        m = SUMMARY.match(line)
        if m:
            counts = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    if counts is None:
        results.setdefault("<run>", "FAIL")
        counts = (0, 1, 0)
    return results, counts


def section(text, marks):
    begin, end = marks
    if begin not in text or end not in text:
        return None
    return text.split(begin, 1)[1].split(end, 1)[0]


def table(rows):
    lines = ["", "| Upstream test file | Tests | Pass | Fail | Skipped |", "|---|---|---|---|---|"]
    total = [0, 0, 0, 0]
    for name, (passed, failed, skipped) in rows:
        n = passed + failed + skipped
        lines.append(f"| `{name}` | {n} | {passed} | {failed} | {skipped} |")
        for i, v in enumerate((n, passed, failed, skipped)):
            total[i] += v
    lines.append(f"| all | {total[0]} | {total[1]} | {total[2]} | {total[3]} |")
    lines.append("")
    return "\n".join(lines) + "\n", total


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--upstream", required=True, help="an upstream checkout, or its tests/ folder")
    p.add_argument("--kite", default="target/debug/kite")
    p.add_argument("--readme", default="README.md")
    p.add_argument("--timeout", type=int, default=300, help="seconds per file")
    p.add_argument("--write", action="store_true", help="rewrite the README's table")
    a = p.parse_args()

    up = pathlib.Path(a.upstream).resolve()
    tests = up / "tests" if (up / "tests").is_dir() else up
    if not any(tests.glob("*_test.star")):
        print(f"upstream-compat: no *_test.star in {tests} (UPSTREAM= an upstream checkout)", file=sys.stderr)
        return 2
    kite = str(pathlib.Path(a.kite).resolve())
    root = tests.parent

    rows, failing = [], set()
    for f in sorted(tests.glob("*_test.star")):
        results, counts = run(kite, root, f"{tests.name}/{f.name}", a.timeout)
        # A file that fails before its tests run reports one failure: count its tests
        # as written, so that the totals do not shrink when a whole file fails.
        declared = len(DECLARED.findall(f.read_text(errors="replace")))
        if declared > sum(counts):
            counts = (counts[0], declared - counts[0] - counts[2], counts[2])
        rows.append((f.name, counts))
        failing |= {(f.name, t) for t, r in results.items() if r == "FAIL"}
        print(f"{f.name:32} {counts[0]:4} passed {counts[1]:4} failed {counts[2]:3} skipped", flush=True)
    generated, total = table(rows)
    share = 100.0 * total[1] / max(1, total[0] - total[3])
    print(f"\n{total[1]} of {total[0] - total[3]} tests pass ({share:.1f} %), {total[3]} skipped")

    readme_path = pathlib.Path(a.readme)
    readme = readme_path.read_text()
    problems = []
    listed = set()
    differences = section(readme, DIFFERENCES)
    if differences is None:
        problems.append(f"{a.readme}: no {DIFFERENCES[0]} ... {DIFFERENCES[1]} section")
    else:
        for line in differences.splitlines():
            m = LISTED.match(line)
            if m:
                listed.add((m.group(1), m.group(2)))
    for f, t in sorted(failing - listed):
        problems.append(f"{f}::{t} fails and the README does not list it with a reason")
    for f, t in sorted(listed - failing):
        problems.append(f"{f}::{t} is listed in the README as failing, but it does not fail")
    current = section(readme, SUITE)
    if current is None:
        problems.append(f"{a.readme}: no {SUITE[0]} ... {SUITE[1]} section")
    elif current != generated:
        if a.write:
            readme = readme.replace(SUITE[0] + current + SUITE[1], SUITE[0] + generated + SUITE[1])
            readme_path.write_text(readme)
            print(f"wrote the table into {a.readme}")
        else:
            problems.append(f"{a.readme}'s suite table differs from this run (make upstream-compat UPSTREAM=... WRITE=1 rewrites it)")
    for problem in problems:
        print(f"upstream-compat: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
