#!/usr/bin/env python3
"""LongBench references: THUDM/LongBench's own LongBench/metrics.py and eval.py (loaded from a checkout, not
copied) score fixed and seeded predictions, and pred.py's middle truncation (transformers' tokenizer on the
shared llama3 fixture) cuts a few prompts. Read by tests/test_core_longbench.cpp.

metrics.py imports jieba for its Chinese metrics, which are not exercised: a stand-in module is given. Its
code_sim_score calls fuzzywuzzy's fuzz.ratio, which is difflib's SequenceMatcher ratio unless
python-Levenshtein is installed (then Levenshtein.ratio); LongBench's requirements.txt installs fuzzywuzzy
alone, so eval.py's scores use difflib, and fuzz.ratio is recorded both ways.

Run as generate.py's target "longbench" (generate.sh --only longbench --longbench DIR), or alone:
  ~/.cache/varrate/oracle-venv/bin/python scripts/oracles/longbench_reference.py --longbench DIR
where DIR is a THUDM/LongBench checkout (the file names the commit and the SHA-256 of the files it loaded).
Needs rouge==1.0.1, fuzzywuzzy==0.18.0 and python-Levenshtein (scripts/oracles/requirements.txt).
"""

import argparse
import hashlib
import importlib.util
import json
import platform
import subprocess
import sys
import types
import warnings
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle_rng import splitmix64  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "data" / "oracles" / "longbench.json"
TOKENIZER = Path("tokenizers") / "llama3"  # under the shared fixtures


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_metrics(lb, name, with_levenshtein):
    """LongBench/metrics.py as module `name`, with fuzzywuzzy imported afresh with or without Levenshtein."""
    for key in [k for k in sys.modules if k.startswith("fuzzywuzzy")]:
        del sys.modules[key]
    saved = sys.modules.get("Levenshtein")
    if not with_levenshtein:
        sys.modules["Levenshtein"] = None  # `from Levenshtein import *` raises ImportError
    sys.modules.setdefault("jieba", types.ModuleType("jieba"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec = importlib.util.spec_from_file_location(name, lb / "metrics.py")
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
    finally:
        if not with_levenshtein:
            if saved is None:
                del sys.modules["Levenshtein"]
            else:
                sys.modules["Levenshtein"] = saved
    fuzz = mod.fuzz
    backend = "difflib" if fuzz.SequenceMatcher.__module__ == "difflib" else "Levenshtein"
    assert backend == ("Levenshtein" if with_levenshtein else "difflib"), backend
    return mod


def load_eval(lb, metrics):
    sys.modules["metrics"] = metrics
    spec = importlib.util.spec_from_file_location("longbench_eval", lb / "eval.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Rng:
    def __init__(self, seed):
        self.state = seed

    def below(self, n):
        self.state, r = splitmix64(self.state)
        return r % n

    def pick(self, seq):
        return seq[self.below(len(seq))]


WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "The", "Cat", "an", "report", "budget", "of",
         "federal", "agency", "funds", "and", "to", "in", "is", "was", "GAO", "found", "that", "it"]


def random_summary(rng, n_words):
    out = []
    for _ in range(n_words):
        out.append(rng.pick(WORDS))
        r = rng.below(10)
        if r == 0:
            out.append(".")
        elif r == 1:
            out.append(". ")
        elif r == 2:
            out.append("\n")
        else:
            out.append(" ")
    return "".join(out)


def random_code(rng, n):
    chars = "abcdefxyz_ ()=+.,:;0123"
    return "".join(rng.pick(chars) for _ in range(n))


QA_CASES = [
    ("Paris", "Paris"),
    ("The city of Paris.", "paris"),
    ("It is the Eiffel Tower, in Paris!", "Eiffel Tower"),
    ("an apple a day", "An Apple"),
    ("Ananas and the theme", "ananas theme"),
    ("cat cat cat dog", "cat dog dog"),
    ("", "Paris"),
    ("Paris", ""),
    ("a an the", "the"),
    ("İstanbul, Türkiye", "istanbul türkiye"),
    ("Straße\u00a0und\u2003Weg\x1cEnde", "straße und weg ende"),
    ("©the© x", "© © x"),
    ("the_cat", "thecat"),
    ("théâtre the", "THÉÂTRE"),
    ("1,000 people (approx.)", "1000 people approx"),
    ("Σίσυφος ΣΟΦΟΣ", "σίσυφοσ σοφοσ"),
    ("«Yes» — no", "yes no"),
    ("\tYes\n\nno  ", "yes no"),
]

NORMALIZE_CASES = [t for pair in QA_CASES for t in pair] + ["A. B. C.", "An-the", "x\u2028the\u3000y", "Ⅻ the ½"]

ROUGE_CASES = [
    ("the cat sat on the mat", "the cat sat on the mat"),
    ("The cat sat. The dog ran.", "the cat sat on the mat. a dog ran"),
    ("", "the cat"),
    ("...", "the cat"),
    ("the cat", ""),
    ("Hi. ", "Yo. "),
    ("the cat. ", "dog. "),
    ("a b c d e", "e d c b a"),
    ("a b a b a", "b a b a b"),
    ("w1 w2 w6 w7 w8. w1 w3 w8 w9 w5", "w1 w2 w3 w4 w5"),
    ("Cat cat CAT", "cat"),
    ("x\u00a0y\u2003z. x", "x y z"),
    ("report. . . budget", "report budget. ."),
]

TREC_CLASSES = ["Person", "Person name", "Other person", "Other", "Description", "Description of a person",
                "Date", "City", "Country", "Abbreviation", "Expression abbreviated"]
CLASSIFICATION_CASES = [
    ("Other person", "Other person", TREC_CLASSES),
    ("Other person or Person", "Other person", TREC_CLASSES),
    ("Description of a person", "Description of a person", TREC_CLASSES),
    ("Description of a person", "Description", TREC_CLASSES),
    ("City", "Country", TREC_CLASSES),
    ("Expression abbreviated", "Abbreviation", TREC_CLASSES),
    ("nothing", "City", TREC_CLASSES),
    ("A B AB", "AB", ["A", "B", "AB"]),
    ("A B AB", "AB", ["A", "A", "AB", "B"]),
    ("xyz", "xyz", ["x", "y", "z", "xyz", "xy"]),
]

RETRIEVAL_CASES = [
    ("Paragraph 12", "Paragraph 12"),
    ("Paragraph 12 and Paragraph 3", "Paragraph 12"),
    ("12, 12, 3", "Paragraph 12"),
    ("none", "Paragraph 12"),
    ("Paragraph １２", "Paragraph 12"),
    ("Paragraph 012", "Paragraph 12"),
    ("The answer is Paragraph 7.", "Paragraph 7"),
]

COUNT_CASES = [
    ("5", "5"),
    ("There are 5 paragraphs, not 6", "5"),
    ("55", "5"),
    ("", "5"),
    ("٥ unique", "5"),
    ("5 5 5 4", "5"),
]

CODE_CASES = [
    ("x = 1", "x = 1"),
    ("\n\n# comment\nreturn a + b\nfoo()", "return a + b"),
    ("```python\n    if x:\n```", "    if x:"),
    ("// c\n/* c */ y++;", "y++;"),
    ("# only\n// comments", "x = 1"),
    ("# only", ""),
    ("print('hi')", "print(\"hi\")"),
    ("a" + "b" * 39, "a" + "c" * 39),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--longbench", required=True, help="a THUDM/LongBench checkout (its LongBench/ directory is read)")
    ap.add_argument("--fixtures", default=str(REPO.parent / "shared" / "fixtures"))
    args = ap.parse_args()
    write(reference(Path(args.longbench), Path(args.fixtures)))


def write(ref):
    OUT.write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT.relative_to(REPO)} ({OUT.stat().st_size} bytes)", flush=True)


def reference(checkout, fixtures, generator=None):
    lb = checkout / "LongBench"
    m = load_metrics(lb, "lb_metrics_difflib", with_levenshtein=False)
    ml = load_metrics(lb, "lb_metrics_levenshtein", with_levenshtein=True)
    ev = load_eval(lb, m)
    try:
        commit = subprocess.check_output(["git", "-C", str(checkout), "rev-parse", "HEAD"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    rng = Rng(20260301)

    ref = {
        "generator": dict(generator or {}, **{
            "script": "scripts/oracles/longbench_reference.py",
            "python": platform.python_version(),
            "longbench_commit": commit,
            "metrics_py_sha256": sha256(lb / "metrics.py"),
            "eval_py_sha256": sha256(lb / "eval.py"),
            "rouge": version("rouge"),
            "fuzzywuzzy": version("fuzzywuzzy"),
            "Levenshtein": version("Levenshtein"),
            "numpy": version("numpy"),
            "transformers": version("transformers"),
        }),
    }
    ref["normalize_answer"] = [{"s": s, "normalized": m.normalize_answer(s)} for s in NORMALIZE_CASES]
    ref["qa_f1_score"] = [{"prediction": p, "ground_truth": g, "score": m.qa_f1_score(p, g)} for p, g in QA_CASES]

    rouge_cases = list(ROUGE_CASES)
    for _ in range(40):
        rouge_cases.append((random_summary(rng, 5 + rng.below(60)), random_summary(rng, 5 + rng.below(40))))
    ref["rouge_score"] = [{"prediction": p, "ground_truth": g, "score": m.rouge_score(p, g)} for p, g in rouge_cases]

    ref["classification_score"] = [
        {"prediction": p, "ground_truth": g, "all_classes": c, "score": m.classification_score(p, g, all_classes=c)}
        for p, g, c in CLASSIFICATION_CASES]
    ref["retrieval_score"] = [{"prediction": p, "ground_truth": g, "score": m.retrieval_score(p, g)}
                              for p, g in RETRIEVAL_CASES]
    ref["count_score"] = [{"prediction": p, "ground_truth": g, "score": m.count_score(p, g)} for p, g in COUNT_CASES]
    ref["code_sim_score"] = [{"prediction": p, "ground_truth": g, "difflib": m.code_sim_score(p, g),
                              "levenshtein": ml.code_sim_score(p, g)} for p, g in CODE_CASES]

    # fuzz.ratio on its own: short and long strings, some with b >= 200 elements (difflib's autojunk).
    pairs = [("", ""), ("abc", ""), ("abc", "abc"), ("abcd", "bcde"), ("a" + "b" * 39, "a" + "c" * 39),
             ("aaaaaaab", "abbbbbbb"), ("naïve café 東京", "naive cafe 東京")]
    for n_a, n_b in [(10, 12), (30, 25), (80, 120), (150, 220), (250, 300), (40, 400)]:
        for _ in range(3):
            pairs.append((random_code(rng, n_a), random_code(rng, n_b)))
    ref["fuzz_ratio"] = [{"a": a, "b": b, "difflib": m.fuzz.ratio(a, b), "levenshtein": ml.fuzz.ratio(a, b)}
                         for a, b in pairs]

    # eval.py's scorer and scorer_e on a seeded set per metric (first-line rule where eval.py applies it).
    datasets = []
    for name, n in [("hotpotqa", 21), ("triviaqa", 13), ("samsum", 9), ("trec", 11), ("passage_retrieval_en", 10),
                    ("passage_count", 9), ("lcc", 12)]:
        preds, answers, lengths = [], [], []
        for i in range(n):
            if name in ("hotpotqa", "triviaqa"):
                gold = [" ".join(rng.pick(WORDS) for _ in range(1 + rng.below(3))) for _ in range(1 + rng.below(3))]
                pred = " ".join(rng.pick(WORDS) for _ in range(rng.below(5)))
                if rng.below(3) == 0:
                    pred = "\n" + pred + "\nextra " + gold[0]
            elif name == "samsum":
                gold = [random_summary(rng, 8 + rng.below(20))]
                pred = random_summary(rng, 4 + rng.below(20))
            elif name == "trec":
                gold = [rng.pick(TREC_CLASSES)]
                pred = rng.pick(TREC_CLASSES) + (" or " + rng.pick(TREC_CLASSES) if rng.below(2) else "")
                if rng.below(4) == 0:
                    pred = pred + "\n" + gold[0]
            elif name == "passage_retrieval_en":
                gold = [f"Paragraph {1 + rng.below(30)}"]
                pred = " ".join(f"Paragraph {1 + rng.below(30)}" for _ in range(1 + rng.below(2)))
            elif name == "passage_count":
                gold = [str(1 + rng.below(9))]
                pred = " ".join(str(1 + rng.below(9)) for _ in range(1 + rng.below(3)))
            else:
                gold = [random_code(rng, 10 + rng.below(30))]
                pred = ("# note\n" if rng.below(2) else "") + random_code(rng, 5 + rng.below(30)) + "\nnext()"
            preds.append(pred)
            answers.append(gold)
            lengths.append([500, 3999, 4000, 7999, 8000, 20000][rng.below(6)])
        all_classes = TREC_CLASSES if name == "trec" else None
        per_sample = []
        for p, gs in zip(preds, answers):
            pp = p.lstrip("\n").split("\n")[0] if name in ("trec", "triviaqa", "samsum", "lsht") else p
            per_sample.append(max([0.0] + [ev.dataset2metric[name](pp, g, all_classes=all_classes) for g in gs]))
        datasets.append({
            "dataset": name,
            "predictions": preds,
            "answers": answers,
            "lengths": lengths,
            "all_classes": all_classes,
            "per_sample": per_sample,
            "score": ev.scorer(name, preds, answers, all_classes),
            # an empty bucket is NaN (numpy's mean of nothing): null in JSON
            "score_e": {k: (None if v != v else v)
                        for k, v in ev.scorer_e(name, preds, answers, lengths, all_classes).items()},
        })
    ref["eval"] = datasets

    ref["truncation"] = truncation_reference(fixtures)
    return ref


def truncation_reference(fixtures):
    """pred.py's cut on a hotpotqa-style prompt: ids with special tokens, halves decoded without them."""
    from transformers import AutoTokenizer

    tok_dir = Path(fixtures) / TOKENIZER
    tokenizer = AutoTokenizer.from_pretrained(str(tok_dir))
    rng = Rng(77)
    paragraphs = []
    for k in range(12):
        words = [rng.pick(WORDS + ["Zürich", "東京", "🚀", "naïve", "1984", "co-operate"]) for _ in range(25)]
        paragraphs.append(f"Passage {k + 1}:\n" + " ".join(words) + ".")
    context = "\n".join(paragraphs)
    question = "Which agency found that the federal budget was in the report?"
    template = ("Answer the question based on the given passages. Only give me the answer and do not output any "
                "other words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the "
                "given passages. Only give me the answer and do not output any other words.\n\nQuestion: {input}"
                "\nAnswer:")
    prompt = template.format(context=context, input=question)
    cases = []
    for max_length in (2, 3, 64, 65, 101, 150, 100000):
        ids = tokenizer(prompt, truncation=False).input_ids
        text = prompt
        if len(ids) > max_length:
            half = int(max_length / 2)
            text = (tokenizer.decode(ids[:half], skip_special_tokens=True) +
                    tokenizer.decode(ids[-half:], skip_special_tokens=True))
        cases.append({"max_length": max_length, "truncated": text,
                      "ids": tokenizer(text, truncation=False).input_ids})
    return {"tokenizer": str(TOKENIZER), "tokenizer_json_sha256": sha256(tok_dir / "tokenizer.json"),
            "template": template, "context": context, "input": question, "prompt_token_count":
            len(tokenizer(prompt).input_ids), "cases": cases}


if __name__ == "__main__":
    main()
