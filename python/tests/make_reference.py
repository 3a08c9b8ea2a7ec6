#!/usr/bin/env python3
"""Writes data/compare_demo.json, what the package's presses are checked against: `varrate compare --mode
query-agnostic` on the shipped demo model and examples/needle.txt, fp32, one thread: with the model's basis file
(kappa 0.1 and 0.2; varrate, flat, varrate@tova, varrate@expected-attention, varrate-rare, varrate-layers), and
self-calibrated on a copy of the model directory without it (varrate and flat at kappa 0.3 and 0.5: the fitted
basis is charged).
For each case: the answer, and per layer the CLI's diagnostics and every token's rank (from --rank-log).

    python3 python/tests/make_reference.py [--varrate build/bin/varrate]
Needs only the CLI (no Python packages): the reference is committed."""
import argparse
import csv
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MODEL = REPO / "resources/models/varrate-demo"
DOCUMENT = REPO / "python/examples/needle.txt"
KEY = "copperbison"
QUESTION = f"What is the special magic number for {KEY}?"
ANSWER_PREFIX = f"The special magic number for {KEY} is"
# Per basis: the codec and its ablation, and with the basis file the signals whose capture the press builds
# itself (query statistics, the context's ids) and one that shares kappa across layers.
METHODS = {"file": ["varrate", "flat", "varrate@tova", "varrate@expected-attention", "varrate-rare",
                    "varrate-layers"],
           "self": ["varrate", "flat"]}
# A basis fitted on the context is charged to the budget (R x D per layer): below kappa 0.26 it does not fit.
BUDGETS = {"file": [0.1, 0.2], "self": [0.3, 0.5]}
MAX_NEW_TOKENS = 10
LAYER_FIELDS = ["budget_B", "sum_ranks", "n_exact", "n_coded", "min_rank", "max_rank", "stored_bytes",
                "full_bytes", "footprint", "mean_rel_error", "basis_bytes"]


def run_case(varrate, model_dir, methods, budget, work):
    out_json, out_log = work / "compare.json", work / "ranks.csv"
    cmd = [str(varrate), "compare", "--model", str(model_dir), "--context-file", str(DOCUMENT), "--question",
           QUESTION, "--answer-prefix", ANSWER_PREFIX, "--mode", "query-agnostic", "--methods",
           ",".join(["full"] + methods), "--budget", str(budget), "--dtype", "fp32", "--threads", "1",
           "--max-new-tokens", str(MAX_NEW_TOKENS), "--json", str(out_json), "--rank-log", str(out_log)]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    result = json.loads(out_json.read_text())
    ranks, ids = {}, {}
    with out_log.open() as f:
        for row in csv.DictReader(f):
            key = (row["method"], int(row["layer"]))
            ranks.setdefault(key, []).append(int(row["rank"]))
            if key[1] == 0:
                ids.setdefault(row["method"], []).append(int(row["token_id"]))
    cases = []
    for m in result["methods"]:
        if m["method"] not in methods:
            continue
        cases.append({
            "method": m["method"], "budget": budget, "answer": m["answers"][0], "answer_ids": m["answer_ids"][0],
            "footprint": m["footprint_fraction"],
            "layers": [dict({k: layer[k] for k in LAYER_FIELDS}, ranks=ranks[(m["method"], layer["layer"])])
                       for layer in m["layers"]]})
    full = next(m for m in result["methods"] if m["method"] == "full")
    return cases, ids["full"], full["answers"][0], result["settings"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--varrate", default=str(REPO / "build/bin/varrate"))
    args = ap.parse_args()
    version = subprocess.run([args.varrate, "--version"], capture_output=True, text=True).stdout.strip()
    ref = {"generator": {"command": "varrate compare (python/tests/make_reference.py)", "varrate": version},
           "model": "resources/models/varrate-demo", "document": "python/examples/needle.txt",
           "question": QUESTION, "answer_prefix": ANSWER_PREFIX, "mode": "query-agnostic", "dtype": "fp32",
           "max_new_tokens": MAX_NEW_TOKENS, "bases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        self_model = tmp / "varrate-demo-no-basis"
        shutil.copytree(MODEL, self_model, ignore=shutil.ignore_patterns("varrate-basis.safetensors"))
        for basis, model_dir in (("file", MODEL), ("self", self_model)):
            cases = []
            for budget in BUDGETS[basis]:
                c, ids, full_answer, s = run_case(args.varrate, model_dir, METHODS[basis], budget, tmp)
                cases += c
            ref["context_ids"] = ids
            ref["full_answer"] = full_answer
            ref["settings"] = {k: v for k, v in s.items() if k != "budget"}
            ref["bases"][basis] = cases
    out = HERE / "data/compare_demo.json"
    out.write_text(json.dumps(ref, separators=(",", ":")) + "\n")
    print("wrote", out, out.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
