"""test_docs.py — the examples of docs/embedding.md run and print what the guide shows: each
C and C++ program followed by "It prints:" and a text block is compiled against the build
tree's libdlam.a and its output compared; the Python example runs with this package and its
output is compared with the values its comments show."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DOC = os.path.join(ROOT, "docs", "embedding.md")
# (as docs/embedding.md shows: no OpenBLAS, which dot loads when it needs it)
LIBS = ["-lstdc++", "-lmimalloc", "-llua5.4", "-lffi", "-ldl", "-lm"]


def blocks():
    text = open(DOC).read()
    return re.findall(r"```(\w+)\n(.*?)```(?:\n\nIt prints:\n\n```text\n(.*?)```)?", text, re.S)


def compiled_examples():
    return [(lang, code, shown) for lang, code, shown in blocks() if lang in ("c", "cpp")]


@pytest.mark.parametrize("lang, code, shown", compiled_examples())
def test_compiled_example_prints_what_the_guide_shows(tmp_path, lang, code, shown):
    assert shown, "every C and C++ example shows its output"
    src = tmp_path / ("ex." + lang)
    src.write_text(code)
    lib = os.path.join(ROOT, "build", "embed", "libdlam.a")
    compiler = ["cc", "-std=c11"] if lang == "c" else ["c++", "-std=c++20"]
    exe = tmp_path / "ex"
    subprocess.run(compiler + ["-I", os.path.join(ROOT, "embed", "include"), str(src), lib,
                               "-o", str(exe)] + LIBS, check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == shown


def test_python_example_prints_what_its_comments_show():
    code = [c for lang, c, _ in blocks() if lang == "python"]
    assert len(code) == 1
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    out = subprocess.run([sys.executable, "-c", code[0]], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "5.0", "5.0 [0. 2. 4.]", "54.0",
        "oops.dlam:1:1: error: car: expected pair as argument 1, got 5",
        "  at <toplevel> (oops.dlam:1:1)"]
