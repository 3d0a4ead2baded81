#!/usr/bin/env python3
"""run_doc_examples.py — runs the code examples of Markdown files through `dlam` and checks the
results they show (the README and docs/*.md; docs/internals.md describes the convention).

A ```scheme block is one program, run top to bottom by `dlam -e` in an empty temporary
directory. A top-level form followed on the same line by a comment

    ; => TEXT       must show exactly TEXT: what it prints, then its value as `write` writes
                    it (nothing for a void value), as `dlam -e` and the REPL show them; numbers
                    within 1e-9 relative (absolute near zero)
    ; error: MSG    must stop with the error MSG (the message of `FILE:LINE:COL: error: MSG`);
                    the block runs on as if the form were not there

A ```scheme-norun block is shown, not run (syntax, fragments). Blocks of other languages
(sh, text, c, python, lua, ...) are not dlam and are left alone. Anything the runner cannot
understand is a failure, never a silent skip: a fence without a language or with an unknown
one, an unterminated fence, a block that does not read, an expectation that follows no
top-level form (on a line of its own or inside a form), an expectation on a definition, and a
comment after a form that looks like a result but lacks the `=>` (`(+ 1 2) ; 3`).

Usage: run_doc_examples.py --dlam PATH FILE.md...   (exit status 0 when every example holds)
"""
import argparse
import math
import os
import re
import subprocess
import sys
import tempfile

RUN = "scheme"
NORUN = "scheme-norun"
# Languages whose blocks are not dlam programs; anything else is an error.
OTHER_LANGUAGES = {"sh", "bash", "console", "text", "c", "cpp", "c++", "python", "lua",
                   "cmake", "json", "diff", "make", "ini", "toml", "yaml"}
TOLERANCE = 1e-9
# Seconds per run of dlam; DLAM_LANG_TIMEOUT_SCALE (as for the lang suite) stretches it for
# sanitizer builds.
TIMEOUT = 120 * float(os.environ.get("DLAM_LANG_TIMEOUT_SCALE", "1"))
DELIMITERS = set(" \t\n\r\f\v()[]\";")
EXPECT_VALUE = re.compile(r";+\s*=>\s?(.*)$")
EXPECT_ERROR = re.compile(r";+\s*error:\s?(.*)$")
# A trailing comment that reads like a result written the old way, without `=>`.
LOOKS_LIKE_RESULT = re.compile(r";+\s*(-?\d|[+-](inf|nan)\.0|#[tf](\W|$)|#\\|#<|#\(|\"|\(|')")
DEFINITION = re.compile(r"\(\s*(define|define-syntax|define-record-type)[\s(]")


class DocError(Exception):
    """Something in a document the runner cannot accept; the message says where."""


class Block:
    def __init__(self, path, line, language, text):
        self.path, self.line, self.language, self.text = path, line, language, text

    def where(self, offset=None):
        if offset is None:
            return f"{self.path}:{self.line}"
        return f"{self.path}:{self.line + 1 + self.text.count(chr(10), 0, offset)}"


def code_blocks(path):
    """The fenced code blocks of a Markdown file, in order."""
    blocks = []
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+|~~~+)(.*)$", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3).strip()
        start = i + 1
        body = []
        i += 1
        while i < len(lines) and not re.match(r"^\s*" + re.escape(fence) + r"\s*$", lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        if i == len(lines):
            raise DocError(f"{path}:{start}: the code block opened here is never closed")
        i += 1
        language = info.split()[0] if info else ""
        if not language:
            raise DocError(f"{path}:{start}: a code block without a language: write ```scheme "
                           f"(run), ```scheme-norun (shown only) or ```text")
        if language not in (RUN, NORUN) and language not in OTHER_LANGUAGES:
            raise DocError(f"{path}:{start}: unknown code block language '{language}' "
                           f"(dlam code is ```scheme or ```scheme-norun)")
        blocks.append(Block(path, start, language, "\n".join(body) + "\n"))
    return blocks


class Reader:
    """Finds the top-level forms and the comments of dlam source, as dlam's reader would
    delimit them (lists, [ ], strings, |symbols|, #\\ characters, #( vectors, quote prefixes,
    ; and nested #| |# comments, #; datum comments)."""

    def __init__(self, block):
        self.block, self.s, self.i = block, block.text, 0
        self.forms = []     # (start, end) offsets of each top-level datum
        self.comments = []  # (start, end, text, inside a form?)

    def fail(self, message, at):
        raise DocError(f"{self.block.where(at)}: the block does not read: {message}")

    def read(self):
        while True:
            self.atmosphere(False)
            if self.i >= len(self.s):
                return self
            if self.s.startswith("#;", self.i):
                self.i += 2
                self.atmosphere(False)
                self.datum()
                continue
            start = self.i
            self.datum()
            self.forms.append((start, self.i))

    def atmosphere(self, inside):
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c.isspace():
                self.i += 1
            elif c == ";":
                end = s.find("\n", self.i)
                end = len(s) if end < 0 else end
                self.comments.append((self.i, end, s[self.i:end].rstrip(), inside))
                self.i = end
            elif s.startswith("#|", self.i):
                start, depth = self.i, 0
                while True:
                    if self.i >= len(s):
                        self.fail("unterminated block comment", start)
                    if s.startswith("#|", self.i):
                        depth += 1
                        self.i += 2
                    elif s.startswith("|#", self.i):
                        depth -= 1
                        self.i += 2
                        if depth == 0:
                            break
                    else:
                        self.i += 1
            else:
                return

    def datum(self):
        # Iterative over nesting: a stack of the closers still awaited.
        s, closers = self.s, []
        while True:
            self.atmosphere(bool(closers))
            if self.i >= len(s):
                self.fail("unterminated list", self.i - 1)
            c = s[self.i]
            done = True
            if c in "([":
                closers.append(")" if c == "(" else "]")
                self.i += 1
                done = False
            elif c in ")]":
                if not closers or closers[-1] != c:
                    self.fail(f"unexpected '{c}'", self.i)
                closers.pop()
                self.i += 1
            elif c in "'`,":
                self.i += 2 if s.startswith(",@", self.i) else 1
                continue  # the prefix belongs to the datum that follows
            elif s.startswith("#;", self.i):
                self.i += 2
                self.datum()  # discarded
                continue
            elif c in "\"|":
                start = self.i
                self.i += 1
                while self.i < len(s) and s[self.i] != c:
                    self.i += 2 if s[self.i] == "\\" else 1
                if self.i >= len(s):
                    self.fail("unterminated string or |symbol|", start)
                self.i += 1
            elif s.startswith("#(", self.i):
                closers.append(")")
                self.i += 2
                done = False
            elif s.startswith("#\\", self.i):
                self.i += 3  # the character itself may be a delimiter: #\( #\;
                while self.i < len(s) and s[self.i] not in DELIMITERS:
                    self.i += 1
            else:
                while self.i < len(s) and s[self.i] not in DELIMITERS:
                    self.i += 1
            if done and not closers:
                return
            if done:
                continue


class Expectation:
    def __init__(self, kind, text, form, index):
        self.kind, self.text, self.form, self.index = kind, text, form, index


def expectations(block, reader):
    """The expectations of a block, each tied to its top-level form; DocError for a comment
    the convention does not allow."""
    s = block.text
    line_of = lambda offset: s.count("\n", 0, offset)
    ends_by_line = {}
    for form in reader.forms:
        ends_by_line[line_of(form[1] - 1)] = form  # the last form ending on that line
    result = []
    for start, _, text, inside in reader.comments:
        value, error = EXPECT_VALUE.match(text), EXPECT_ERROR.match(text)
        form = ends_by_line.get(line_of(start))
        trailing = form is not None and not inside and form[1] <= start and \
            s[form[1]:start].strip() == ""
        if value or error:
            if inside:
                raise DocError(f"{block.where(start)}: an expectation inside a form: put it "
                               f"after the form's last line")
            if not trailing:
                raise DocError(f"{block.where(start)}: an expectation must follow a top-level "
                               f"form on the same line")
            if DEFINITION.match(s, form[0]):
                raise DocError(f"{block.where(start)}: an expectation on a definition "
                               f"(it shows nothing)")
            kind, m = ("value", value) if value else ("error", error)
            result.append(Expectation(kind, m.group(1).rstrip(), form, len(result)))
        elif trailing and LOOKS_LIKE_RESULT.match(text):
            raise DocError(f"{block.where(start)}: a comment after a form that looks like a "
                           f"result: write '; => TEXT' or put the prose on its own line "
                           f"({text.strip()})")
    return result


NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]inf\.0|[-+]nan\.0")
TOKEN = re.compile(r"\s+|[()]|#\(|\"(?:\\.|[^\"\\])*\"|[^\s()\"]+")


def to_number(token):
    if not NUMBER.fullmatch(token):
        return None
    if token.endswith("inf.0"):
        return -math.inf if token[0] == "-" else math.inf
    if token.endswith("nan.0"):
        return math.nan
    return float(token)


def close_enough(want, got):
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    if math.isinf(want) or math.isinf(got):
        return want == got
    diff = abs(want - got)
    return diff <= TOLERANCE * max(abs(want), abs(got)) or (abs(want) < TOLERANCE and
                                                            diff <= TOLERANCE)


def same_text(want, got):
    """want == got, except that numbers (tokens between delimiters) agree within TOLERANCE."""
    if want == got:
        return True
    a, b = TOKEN.findall(want), TOKEN.findall(got)
    if len(a) != len(b) or "".join(a) != want or "".join(b) != got:
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        nx, ny = to_number(x), to_number(y)
        if nx is None or ny is None or not close_enough(nx, ny):
            return False
    return True


def located(block, stderr):
    """stderr with the `-e:LINE:COL` locations of dlam's messages made the document's lines."""
    return re.sub(r"-e:(\d+):(\d+)",
                  lambda m: f"{block.path}:{block.line + int(m.group(1))}:{m.group(2)}", stderr)


def run_dlam(dlam, program):
    with tempfile.TemporaryDirectory(prefix="dlam-doc-") as cwd:
        try:
            p = subprocess.run([dlam, "-e", program], cwd=cwd, capture_output=True,
                               stdin=subprocess.DEVNULL, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return None, "", f"timed out after {TIMEOUT:g} s"
        return (p.returncode, p.stdout.decode("utf-8", "replace"),
                p.stderr.decode("utf-8", "replace"))


def blank(text, start, end):
    """text with [start, end) replaced by spaces (line breaks kept, so positions hold)."""
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def marker(kind, n):
    return f"@@dlam-doc-{kind}-{n}@@"


def check_block(dlam, block):
    """Runs one ```scheme block; returns (number of expectations checked, list of failures)."""
    reader = Reader(block).read()
    exps = expectations(block, reader)
    failures = []
    errors = [e for e in exps if e.kind == "error"]
    values = [e for e in exps if e.kind == "value"]

    # Each expected error: the block up to that form, the other error forms left out.
    for e in errors:
        program = block.text[:e.form[1]]
        for other in errors:
            if other is not e and other.form[1] <= e.form[1]:
                program = blank(program, *other.form)
        code, out, err = run_dlam(dlam, program)
        first = err.split("\n", 1)[0]
        m = re.match(r"^.*?:\d+:\d+: error: (.*)$", first)
        if code != 1 or not m:
            failures.append(f"{block.where(e.form[0])}: expected the error '{e.text}', but the "
                            f"program exited with status {code} and stderr:\n{located(block, err)}")
        elif m.group(1) != e.text:
            failures.append(f"{block.where(e.form[0])}: expected the error\n    {e.text}\n"
                            f"  got\n    {m.group(1)}")

    # The block itself, without the error forms, each checked form between two markers.
    program = block.text
    for e in errors:
        program = blank(program, *e.form)
    for e in sorted(values, key=lambda e: -e.form[0]):
        start, end = e.form
        program = (program[:start] + f'(display "\\n{marker("begin", e.index)}\\n") ' +
                   program[start:end] + f' (display "\\n{marker("end", e.index)}\\n")' +
                   program[end:])
    code, out, err = run_dlam(dlam, program)
    if code != 0:
        failures.append(f"{block.where()}: the block failed (exit status {code}):\n"
                        f"{located(block, err)}")
        return len(exps), failures
    for e in values:
        m = re.search(re.escape(marker("begin", e.index)) + r"\n(.*?)\n" +
                      re.escape(marker("end", e.index)), out, re.S)
        if not m:
            failures.append(f"{block.where(e.form[0])}: the form's output was not found")
            continue
        shown = m.group(1)
        if shown.endswith("\n"):
            shown = shown[:-1]
        if not same_text(e.text, shown):
            failures.append(f"{block.where(e.form[0])}: {block.text[e.form[0]:e.form[1]]}\n"
                            f"  expected: {e.text}\n  shown:    {shown}")
    return len(exps), failures


def check_file(dlam, path):
    """(blocks run, expectations checked, failures) of one Markdown file."""
    try:
        blocks = code_blocks(path)
    except DocError as e:
        return 0, 0, [str(e)]
    ran = checked = 0
    failures = []
    for block in blocks:
        if block.language != RUN:
            continue
        ran += 1
        try:
            n, f = check_block(dlam, block)
        except DocError as e:
            n, f = 0, [str(e)]
        checked += n
        failures += f
    return ran, checked, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dlam", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    dlam = os.path.abspath(args.dlam)
    total_failures = 0
    for path in args.files:
        ran, checked, failures = check_file(dlam, path)
        for f in failures:
            print("FAIL " + f)
        print(f"{path}: {ran} blocks run, {checked} results checked, {len(failures)} failures")
        total_failures += len(failures)
    sys.exit(1 if total_failures else 0)


if __name__ == "__main__":
    main()
