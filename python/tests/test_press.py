"""VarRatePress (and FlatPress, and the varrate@<signal> presses) through kvpress's own pipeline on the shipped
demo model gives what `varrate compare --mode query-agnostic` gives on the same ids (data/compare_demo.json,
written by the CLI): the same answers, the same rank of every token in every layer, the same footprints, and
reconstruction errors within 1e-6 (relative) of the CLI's."""
import math
import shutil

import pytest
import torch

pytest.importorskip("kvpress")
transformers = pytest.importorskip("transformers")

import varrate  # noqa: E402
from conftest import DEMO_MODEL  # noqa: E402
from varrate.kvpress import FlatPress, VarRatePress, press, press_names, registry_presses  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(DEMO_MODEL)


def load_pipeline(model_dir, tokenizer):
    from kvpress import KVPressTextGenerationPipeline  # noqa: F401  (registers the pipeline)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                              attn_implementation="sdpa")
    return transformers.pipeline("kv-press-text-generation", model=model, tokenizer=tokenizer, device="cpu")


@pytest.fixture(scope="module")
def pipe(tokenizer):
    return load_pipeline(DEMO_MODEL, tokenizer)


@pytest.fixture(scope="module")
def pipe_without_basis(tokenizer, tmp_path_factory):
    """The demo model without its basis file: the press calibrates on the context, as the CLI does."""
    model_dir = tmp_path_factory.mktemp("model") / "varrate-demo"
    shutil.copytree(DEMO_MODEL, model_dir, ignore=shutil.ignore_patterns("varrate-basis.safetensors"))
    return load_pipeline(model_dir, tokenizer)


def ask(pipe, press_, reference, document):
    # The CLI's plain prompt ("\n\nQuestion: ...\nAnswer: <answer prefix>") in kvpress's form: question, then
    # kvpress's "\n", then the answer prefix.
    out = pipe(document, question="\n\nQuestion: " + reference["question"],
               answer_prefix="Answer: " + reference["answer_prefix"], press=press_,
               max_new_tokens=reference["max_new_tokens"])
    return out["answer"]


def test_same_ids_as_the_cli(tokenizer, reference, document):
    ids = tokenizer.encode(tokenizer.bos_token + document, add_special_tokens=False)
    assert ids == reference["context_ids"]


def cases(basis):
    import json
    from conftest import REFERENCE
    return [(basis, c["method"], c["budget"]) for c in json.loads(REFERENCE.read_text())["bases"][basis]]


def check_case(press_, case, reference, answer):
    assert answer == case["answer"], f"{case['method']} kappa {case['budget']}"
    assert len(press_.layers) == len(case["layers"])
    for layer, (got, want) in enumerate(zip(press_.layers, case["layers"])):
        ranks = press_.ranks[layer].tolist()
        assert len(ranks) == len(want["ranks"])
        differ = [i for i, (a, b) in enumerate(zip(ranks, want["ranks"])) if a != b]
        assert not differ, f"layer {layer}: ranks differ at positions {differ[:10]}"
        for key in ("budget_B", "sum_ranks", "n_exact", "n_coded", "min_rank", "max_rank", "stored_bytes",
                    "full_bytes", "basis_bytes"):
            assert got[key] == want[key], f"layer {layer} {key}"
        assert math.isclose(got["footprint"], want["footprint"], rel_tol=1e-12)
        assert math.isclose(got["mean_rel_error"], want["mean_rel_error"], rel_tol=1e-6), f"layer {layer}"
    assert math.isclose(press_.footprint, case["footprint"], rel_tol=1e-9)


@pytest.mark.parametrize("basis,method,budget", cases("file"))
def test_press_equals_cli_with_the_basis_file(pipe, reference, document, basis, method, budget):
    case = next(c for c in reference["bases"][basis] if c["method"] == method and c["budget"] == budget)
    p = {"varrate": VarRatePress, "flat": FlatPress}.get(method, lambda **kw: press(method, **kw))(kappa=budget)
    check_case(p, case, reference, ask(pipe, p, reference, document))


@pytest.mark.parametrize("basis,method,budget", cases("self"))
def test_press_equals_cli_self_calibrated(pipe_without_basis, reference, document, basis, method, budget):
    case = next(c for c in reference["bases"][basis] if c["method"] == method and c["budget"] == budget)
    p = press(method, compression_ratio=1.0 - budget)  # kvpress's convention
    check_case(p, case, reference, ask(pipe_without_basis, p, reference, document))


def test_self_calibrated_basis_charged(pipe_without_basis, reference, document):
    """A basis fitted on the context is charged to the budget: kappa 0.1 cannot hold it (as the CLI says)."""
    with pytest.raises(varrate.InfeasibleBudgetError, match="infeasible"):
        ask(pipe_without_basis, VarRatePress(kappa=0.1), reference, document)


def test_full_answer(pipe, reference, document):
    assert ask(pipe, None, reference, document) == reference["full_answer"]


def test_every_press_runs(pipe, reference, document):
    """Every method a press can run (the low-rank family that needs no extra pass) compresses in place within
    kappa; the ones that need an extra pass are refused by name."""
    names = press_names()
    assert {"varrate", "flat", "varrate@tova", "varrate@expected-attention", "varrate-rare",
            "varrate-layers"} <= set(names)
    for name in names:
        p = press(name, kappa=0.2)
        assert ask(pipe, p, reference, document)
        assert len(p.layers) == 4 and p.footprint <= 0.2 + 1e-9, name
    with pytest.raises(varrate.VarRateError, match="not a low-rank method that a press can run"):
        press("varrate@kvzip")
    # kvpress's evaluation sets compression_ratio on the registry's press objects.
    registry = registry_presses()
    assert set(registry) == set(names)
    registry["varrate"].compression_ratio = 0.9
    ask(pipe, registry["varrate"], reference, document)
    assert abs(registry["varrate"].footprint - 0.1) < 1e-3
