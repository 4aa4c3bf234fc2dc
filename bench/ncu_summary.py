#!/usr/bin/env python3
"""Sums an Nsight Compute CSV (--csv --metrics gpu__time_duration.sum) by kernel name.

  python3 bench/ncu_summary.py FILE.csv [--top 30] [--per NAME]

prints, for each kernel (or CUDA graph, under --graph-profiling graph), its calls, total and
mean GPU time, largest first, and the sum. With --per NAME the profile is cut into spans that
begin at each call of NAME (a decode step begins with embedding_forward) and the mean span is
shown kernel by kernel: the time of one decode token, say.
"""
import argparse
import collections
import csv
import io
import sys

UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}


def rows(path):
    lines = open(path, errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{path}: no Nsight Compute CSV header (\"ID\",...) found")
    for r in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        yield r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * UNITS[r["Metric Unit"]]


def table(calls, title, n_spans=1):
    agg = collections.defaultdict(lambda: [0, 0.0])
    for name, us in calls:
        a = agg[name[:60]]
        a[0] += 1
        a[1] += us
    total = sum(v for _, v in agg.values())
    print(f"{title}: {total / n_spans:.1f} µs" + (f" (mean of {n_spans})" if n_spans > 1 else ""))
    for name, (n, us) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name:60s} {n / n_spans:8.1f} calls {us / n_spans:10.1f} µs {us / n:8.2f} µs/call {100 * us / total:5.1f}%")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--per", help="cut into spans beginning at each call of this kernel")
    a = p.parse_args()
    calls = list(rows(a.csv))
    if a.per:
        starts = [i for i, (n, _) in enumerate(calls) if n.startswith(a.per)]
        spans = list(zip(starts, starts[1:]))
        if not spans:
            sys.exit(f"{a.csv}: fewer than two calls of {a.per}")
        table([c for s, e in spans for c in calls[s:e]], f"{len(spans)} spans from {a.per}", len(spans))
    else:
        table(calls, f"{len(calls)} kernels and graphs")


if __name__ == "__main__":
    main()
