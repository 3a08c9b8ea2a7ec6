#!/usr/bin/env python3
"""Paired comparison of two `varrate niah` output folders over the same documents (same grid and seed), for
example the same sweep in fp32 and in bf16: per method and budget, each folder's accuracy, the paired
difference B - A with a percentile-bootstrap 95 % interval over documents, the discordant pairs and the exact
two-sided sign (McNemar) test. Documents are matched by record file name (length, depth, sample); a method or
budget missing from either folder is skipped. Standard library only.

`varrate eval` folders work the same way: a document is a (task, length, sample) record, its value the record's
score over 100 (RULER's partial credit), so the "accuracy" columns are mean scores in [0, 1] and the sign test
counts the pairs where one side scored higher. Infeasible records are left out.

With --against METHOD and one folder, every method and budget of that folder is paired with METHOD on the same
documents instead (at the same budget, or METHOD's single run when it has no budget, as full): e.g. every press
against full, or every varrate@<signal> against varrate.

Usage: scripts/niah-paired.py A_DIR B_DIR [--label-a fp32] [--label-b bf16] [--bootstrap 10000] [--json OUT]
       scripts/niah-paired.py DIR --against full [--bootstrap 10000] [--json OUT]
"""
import argparse
import json
import math
import os
import random
import re
import zlib
import sys


def records(root):
    """{(method, budget): {doc: correct}} from root/records/<method>[/k<budget>]/<doc>.json."""
    out = {}
    base = os.path.join(root, "records")
    for method in sorted(os.listdir(base)):
        mdir = os.path.join(base, method)
        subdirs = [d for d in sorted(os.listdir(mdir)) if os.path.isdir(os.path.join(mdir, d))]
        # k<kappa> folders hold a budget's records; a method run once (full, think) keeps its own (an eval's
        # are in task folders).
        groups = [(d[1:], os.path.join(mdir, d)) for d in subdirs if re.fullmatch(r"k[0-9.e-]+", d)] or [("-", mdir)]
        for budget, gdir in groups:
            docs = {}
            for here, _, files in os.walk(gdir):
                for f in files:
                    if not f.endswith(".json"):
                        continue
                    with open(os.path.join(here, f)) as fh:
                        r = json.load(fh)
                    doc = os.path.relpath(os.path.join(here, f[:-5]), gdir)
                    if "correct" in r:
                        docs[doc] = 1 if r["correct"] else 0
                    elif r.get("score") is not None:
                        docs[doc] = r["score"] / 100.0
            out[(method, budget)] = docs
    return out


def sign_test_p(wins, losses):
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def bootstrap_ci(diffs, n_boot, seed):
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot))
    return means[int(0.025 * n_boot)], means[min(n_boot - 1, int(0.975 * n_boot))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--against", help="pair every method of one folder with this method of the same folder")
    ap.add_argument("--label-a", default="A")
    ap.add_argument("--label-b", default="B")
    ap.add_argument("--bootstrap", type=int, default=10000)
    ap.add_argument("--json")
    args = ap.parse_args()
    if (args.b is None) == (args.against is None):
        ap.error("give two folders, or one folder and --against METHOD")
    if args.against:
        own = records(args.a)
        ra, rb = {}, {}
        for (method, budget), docs in own.items():
            base = own.get((args.against, budget), own.get((args.against, "-")))
            if method == args.against or base is None:
                continue
            ra[(method, budget)], rb[(method, budget)] = base, docs
        args.label_a, args.label_b = args.against, "method"
    else:
        ra, rb = records(args.a), records(args.b)
    rows = []
    print(f"| method | kappa | n | {args.label_a} | {args.label_b} | {args.label_b} - {args.label_a} [95% CI] "
          f"| +/- pairs | sign p |")
    print("| --- | --- | ---: | ---: | ---: | --- | --- | ---: |")
    for key in sorted(set(ra) & set(rb)):
        docs = sorted(set(ra[key]) & set(rb[key]))
        if not docs:
            continue
        a = [ra[key][d] for d in docs]
        b = [rb[key][d] for d in docs]
        diffs = [y - x for x, y in zip(a, b)]
        n = len(docs)
        lo, hi = bootstrap_ci(diffs, args.bootstrap, seed=zlib.crc32(f"{key[0]}:{key[1]}".encode()))
        wins, losses = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
        row = {"method": key[0], "budget": key[1], "n": n, "acc_a": sum(a) / n, "acc_b": sum(b) / n,
               "diff": sum(diffs) / n, "ci": [lo, hi], "b_only": wins, "a_only": losses,
               "sign_p": sign_test_p(wins, losses)}
        rows.append(row)
        print(f"| {key[0]} | {key[1]} | {n} | {row['acc_a']:.3f} | {row['acc_b']:.3f} | {row['diff']:+.3f} "
              f"[{lo:+.3f}, {hi:+.3f}] | {wins}/{losses} | {row['sign_p']:.3g} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
