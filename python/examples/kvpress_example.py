#!/usr/bin/env python3
"""VarRatePress in kvpress's pipeline on the shipped demo model (resources/models/varrate-demo): the needle
document of this folder, query-agnostic (the context is compressed before the question comes), kappa 0.2 with the
model's basis file and codec defaults. Prints the answer, and the footprint and mean rank of each layer, which are
what `varrate compare` prints for the same ids:

    build/bin/varrate compare --model resources/models/varrate-demo --context-file python/examples/needle.txt \\
      --question "What is the special magic number for copperbison?" \\
      --answer-prefix "The special magic number for copperbison is" --mode query-agnostic \\
      --methods full,varrate --budget 0.2 --dtype fp32
"""
import argparse
from pathlib import Path

import torch
import transformers
from kvpress import KVPressTextGenerationPipeline  # noqa: F401  (registers "kv-press-text-generation")

from varrate.kvpress import VarRatePress

HERE = Path(__file__).resolve().parent
KEY = "copperbison"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(HERE.parents[1] / "resources/models/varrate-demo"))
    ap.add_argument("--kappa", type=float, default=0.2)
    args = ap.parse_args()

    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    pipe = transformers.pipeline("kv-press-text-generation", model=model, tokenizer=tokenizer, device="cpu")
    context = (HERE / "needle.txt").read_text()
    press = VarRatePress(kappa=args.kappa)
    # The CLI's prompt without a chat template: "\n\nQuestion: <question>\nAnswer: <answer prefix>".
    answer = pipe(context, question=f"\n\nQuestion: What is the special magic number for {KEY}?",
                  answer_prefix=f"Answer: The special magic number for {KEY} is", press=press,
                  max_new_tokens=10)["answer"]
    print(f"varrate kappa {args.kappa}: answer {answer!r}, accounted footprint {press.footprint:.4f}")
    for layer in press.layers:
        print(f"  layer {layer['layer']}: {layer['n_exact']} exact + {layer['n_coded']} coded tokens, mean rank "
              f"{layer['sum_ranks'] / max(layer['n_coded'], 1):.2f}, mean rel. error {layer['mean_rel_error']:.4f}")


if __name__ == "__main__":
    main()
