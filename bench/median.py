"""Medians of `go test -bench GRPOStep -count N` output, one table per benchmark.

  go test ./engine -run '^$' -bench GRPOStep -cpu 1,2 -benchtime 1x -count 3 | tee out.txt
  python3 bench/median.py out.txt

Standard library only. Prints, per benchmark (model and GOMAXPROCS), the median of each metric
over the runs, with the runs' spread (min-max), then the Go / PyTorch ratios.
"""
import re
import statistics
import sys

LINE = re.compile(r"^(Benchmark\S+)\s+\d+\s+(.*)$")

ORDER = ["tokens/s", "torch-tokens/s", "x-torch", "rollout-s", "torch-rollout-s", "scoring-s", "torch-scoring-s",
         "lossbwd-s", "torch-lossbwd-s", "update-s", "torch-update-s", "cpu-s", "torch-cpu-s", "params"]


def parse(lines):
    runs = {}
    for line in lines:
        m = LINE.match(line.strip())
        if not m:
            continue
        fields = m.group(2).split()
        vals = {fields[i + 1]: float(fields[i]) for i in range(0, len(fields) - 1, 2)}
        runs.setdefault(m.group(1), []).append(vals)
    return runs


def main():
    src = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    runs = parse(src)
    for name, rs in runs.items():
        print("%s  (%d runs)" % (name, len(rs)))
        keys = [k for k in ORDER if k in rs[0]] + sorted(k for k in rs[0] if k not in ORDER and k != "ns/op")
        med = {}
        for k in keys:
            xs = [r[k] for r in rs if k in r]
            med[k] = statistics.median(xs)
            print("  %-16s %12.4g   [%.4g … %.4g]" % (k, med[k], min(xs), max(xs)))
        if "torch-tokens/s" in med:
            print("  ratio of the medians (Go / PyTorch speed): step %.2fx" % (med["tokens/s"] / med["torch-tokens/s"]), end="")
            for p in ("rollout-s", "scoring-s", "lossbwd-s", "update-s"):
                if med.get(p):
                    print(", %s %.2fx" % (p[:-2], med["torch-" + p] / med[p]), end="")
            print()
        print()


if __name__ == "__main__":
    main()
