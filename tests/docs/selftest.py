#!/usr/bin/env python3
"""selftest.py — tests run_doc_examples.py itself, so that a broken documentation example
cannot pass unnoticed: fixtures/pass.md (every form of the convention) must pass with every
one of its expectations checked (the counts its first line states), and each fixtures/fail_*.md, a deliberately wrong example
whose first line says `<!-- must fail with: TEXT -->`, must fail with exactly one failure
whose report contains TEXT. It also tests check_no_outside_references.py on a tree that
cites a document outside it and on one that does not.

Usage: selftest.py --dlam PATH
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "run_doc_examples.py")
FIXTURES = os.path.join(HERE, "fixtures")


def run(dlam, path):
    p = subprocess.run([sys.executable, RUNNER, "--dlam", dlam, path], capture_output=True,
                       text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlam", required=True)
    dlam = ap.parse_args().dlam
    problems = []

    path = os.path.join(FIXTURES, "pass.md")
    m = re.match(r"<!-- blocks: (\d+), checks: (\d+) -->\n", open(path, encoding="utf-8").read())
    blocks, checks = m.group(1), m.group(2)
    code, out = run(dlam, path)
    summary = f"{path}: {blocks} blocks run, {checks} results checked, 0 failures"
    if code != 0 or summary not in out:
        problems.append(f"pass.md: expected exit 0 and '{summary}', got {code}:\n{out}")

    fails = sorted(f for f in os.listdir(FIXTURES) if f.startswith("fail_"))
    if len(fails) < 10:
        problems.append(f"expected the fail_*.md fixtures, found {fails}")
    for name in fails:
        path = os.path.join(FIXTURES, name)
        m = re.match(r"<!-- must fail with: (.*) -->\n", open(path, encoding="utf-8").read())
        if not m:
            problems.append(f"{name}: no '<!-- must fail with: TEXT -->' first line")
            continue
        code, out = run(dlam, path)
        if code != 1 or m.group(1) not in out or out.count("FAIL ") != 1:
            problems.append(f"{name}: expected one failure mentioning '{m.group(1)}', "
                            f"got exit {code}:\n{out}")
        else:
            print(f"ok {name}")

    # The check for references outside the repository, on a tree that has one and on one that
    # does not.
    check = os.path.join(HERE, "check_no_outside_references.py")
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "a.dlam"), "w") as f:
            f.write("; fine\n")
        clean = subprocess.run([sys.executable, check, d], capture_output=True, text=True)
        with open(os.path.join(d, "b.cpp"), "w") as f:
            f.write("// as " + "SP" + "EC section 3 says\n")  # spelled so as not to cite it here
        cited = subprocess.run([sys.executable, check, d], capture_output=True, text=True)
    if clean.returncode != 0 or cited.returncode != 1 or "b.cpp:1:" not in cited.stdout:
        problems.append(f"check_no_outside_references.py: clean tree {clean.returncode}, tree "
                        f"citing a specification {cited.returncode}:\n{cited.stdout}")
    else:
        print("ok check_no_outside_references.py")

    for p in problems:
        print("PROBLEM " + p)
    print(f"runner self-test: {len(fails)} failing fixtures, {len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
