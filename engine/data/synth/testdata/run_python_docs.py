"""Runs the Python-style code documents of the synthetic corpus, for the Go tests.

Reads a JSON list of document texts on stdin. Each is executed in a fresh namespace with its
print output captured; every `print(...)  # expected` line must print `expected`, and every
`assert` must hold. Prints a JSON object: {"ran": N, "failures": [{"doc": i, "error": "..."}]}.
"""
import contextlib
import io
import json
import sys


def check(text):
    expected = []
    for line in text.splitlines():
        if line.startswith("print(") and "  # " in line:
            expected.append(line.split("  # ", 1)[1])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(text, "<doc>", "exec"), {})
    got = out.getvalue().splitlines()
    if got != expected:
        raise AssertionError("printed %r, comments say %r" % (got, expected))


def main():
    docs = json.load(sys.stdin)
    failures = []
    for i, text in enumerate(docs):
        try:
            check(text)
        except Exception as e:  # report every kind of failure, with the document
            failures.append({"doc": i, "error": "%s: %s" % (type(e).__name__, e)})
    json.dump({"ran": len(docs), "failures": failures}, sys.stdout)


main()
