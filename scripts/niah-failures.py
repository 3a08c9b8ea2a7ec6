#!/usr/bin/env python3
"""Which of a NIAH sweep's failures are the compression's own, and what it kept of the asked needle there.

Reads the records of a `varrate niah` output directory that ran "full" beside other methods. For each method
and budget (records/<method>/k<budget>/, or records/<method>/ in directories of single-budget sweeps) it counts the documents it got wrong where the uncompressed model was right (its own failures) and, over all
documents and over those failures, how often the last layer kept the asked needle's value whole (every value
token, every KV head, at full rank: kept_fraction 1 in the record's needle_retention), the mean share of the
value's K/V kept there, and the value's salience percentile there.

Usage: scripts/niah-failures.py OUT_DIR [OUT_DIR ...]
"""
import glob
import json
import os
import sys


def records(out_dir, series):
    found = {}
    for path in glob.glob(os.path.join(out_dir, "records", series, "*.json")):
        with open(path) as f:
            r = json.load(f)
        if isinstance(r.get("correct"), bool):  # infeasible cells have none
            found[os.path.basename(path)] = r
    return found


def last_layer(record, key):
    kept = record.get("needle_retention", {}).get("needle") or {}
    values = (kept.get("per_layer") or {}).get(key)
    return values[-1] if values else None


def series_of(out_dir):
    """Every compressed method and budget with records: "varrate/k0.1", or "varrate" for the older layout."""
    root = os.path.join(out_dir, "records")
    found = []
    for m in sorted(os.listdir(root)):
        if m == "full" or not os.path.isdir(os.path.join(root, m)):
            continue
        if glob.glob(os.path.join(root, m, "*.json")):
            found.append(m)
        found += sorted(os.path.join(m, k) for k in os.listdir(os.path.join(root, m))
                        if k.startswith("k") and os.path.isdir(os.path.join(root, m, k)))
    return found


def main(out_dirs):
    for out_dir in out_dirs:
        full = records(out_dir, "full")
        if not full:
            sys.exit(f"{out_dir}: no records of the method 'full' to compare with")
        print(out_dir)
        for m in series_of(out_dir):
            runs = {k: r for k, r in records(out_dir, m).items() if k in full}
            own = [k for k, r in runs.items() if not r["correct"] and full[k]["correct"]]
            shared = sum(1 for k, r in runs.items() if not r["correct"] and not full[k]["correct"])
            whole = [k for k, r in runs.items() if (last_layer(r, "kept_fraction") or 0) >= 0.999]
            own_whole = sum(1 for k in own if k in whole)
            kept = [last_layer(r, "kept_fraction") or 0 for r in runs.values()]
            sal = [last_layer(r, "salience_percentile") for r in runs.values()]
            sal = [s for s in sal if s is not None]
            print(f"  {m}: {len(runs)} documents, {len(own)} own failures (wrong where full is right), "
                  f"{shared} shared with full; last layer kept the asked value whole in {len(whole)} "
                  f"({100.0 * len(whole) / max(len(runs), 1):.0f}%), in {own_whole} of the own failures; "
                  f"mean share kept there {sum(kept) / max(len(kept), 1):.2f}"
                  + (f"; its mean last-layer salience percentile {sum(sal) / len(sal):.3f}" if sal else ""))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
