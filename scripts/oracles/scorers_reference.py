"""kvpress's scorer presses on the SnapKV case's checkpoint and ids (kvpress_scorers.json, target
"kvpress-scorers" of generate.py): KnormPress, KeyDiffPress, TOVAPress, RandomPress (seed 0), LagKVPress,
CURPress, LeverageScorePress and CompactorPress (their defaults; the leverage sketch drawn after
torch.manual_seed(0) in every layer) and ChunkKVPress over SnapKVPress (chunks of 20, its default),
unchanged, run through kvpress's
pipeline code in both modes at the SnapKV case's ratios. Each records the entries its compress() kept per layer
and KV head (matched by rows, as the other presses' references are) and the greedy answer decoded from the
compressed cache. ObservedAttentionPress reads eager attention's weights (its model loads with eager); the others
run on sdpa attention: TOVAPress then computes the last token's attention itself
(SnapKVPress.compute_window_attention with a window of one), as it does in kvpress's default setup.
"""

import torch
from kvpress import (ChunkKVPress, CompactorPress, CURPress, KeyDiffPress, KnormPress, LagKVPress,
                     LeverageScorePress, ObservedAttentionPress, RandomPress, SnapKVPress, TOVAPress)
from transformers import AutoModelForCausalLM

# kvpress class and the arguments it is made with besides its compression ratio.
SCORERS = {"KnormPress": (KnormPress, {}), "KeyDiffPress": (KeyDiffPress, {}), "TOVAPress": (TOVAPress, {}),
           "RandomPress": (RandomPress, {"seed": 0}), "LagKVPress": (LagKVPress, {}),
           # At lag 128 the 300-token context keeps only score-1 tokens (sinks, last partition): lag 32 ranks.
           "LagKVPress-lag32": (LagKVPress, {"lag_size": 32}),
           "CURPress": (CURPress, {}), "ChunkKVPress": (ChunkKVPress, {"chunk_length": 20}),
           "LeverageScorePress": (LeverageScorePress, {}), "ObservedAttentionPress": (ObservedAttentionPress, {}),
           "CompactorPress": (CompactorPress, {})}
# Presses that read the attention weights: run on the eager-attention model.
EAGER = {"ObservedAttentionPress"}
# Presses that draw from torch's global generator: seeded with 0 before every layer's compress (kvpress leaves
# it unseeded, so its own runs differ from one another).
SEEDED = {"LeverageScorePress", "CompactorPress"}
# Wrappers: the press they wrap takes the ratio (ChunkKV over SnapKV, window scoring as the ChunkKV paper).
WRAPPED = {"ChunkKVPress": SnapKVPress}


def _make(cls, g, ratio, press_args):
    if cls.__name__ in WRAPPED:  # keyed by class name: "LagKVPress-lag32" is LagKVPress
        return _recording(cls, g)(press=WRAPPED[cls.__name__](compression_ratio=ratio), **press_args)
    return _recording(cls, g)(compression_ratio=ratio, **press_args)


def _recording(cls, g):
    class Recording(cls):
        """The press, unchanged, recording the entries its compress() kept per layer and KV head."""

        def __post_init__(self):
            super().__post_init__()
            self.records = []

        def compress(self, module, hidden_states, keys, values, attentions, kwargs):
            if cls.__name__ in SEEDED:
                torch.manual_seed(0)
            new_keys, new_values = super().compress(module, hidden_states, keys, values, attentions, kwargs)
            self.records.append({"layer": int(module.layer_idx), "kept": g.kept_by_matching(keys, new_keys)})
            return new_keys, new_values

    return Recording


def reference(g):
    model_dir = g.DATA / g.SNAPKV_MODEL
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    eager = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    eager.eval()
    model.eval()
    ref, (context, question, suffix) = g.snapkv_case_header(model, model_dir)
    for name, (cls, press_args) in SCORERS.items():
        for mode in ("query-agnostic", "query-aware"):
            for ratio in g.SNAPKV_RATIOS:
                compressed = context if mode == "query-agnostic" else context + question
                prompt = question + suffix if mode == "query-agnostic" else suffix
                press = _make(cls, g, ratio, press_args)
                answer = g.kvpress_run(eager if name in EAGER else model, press, compressed, prompt)
                assert len(press.records) == model.config.num_hidden_layers
                recorded_args = {**press_args, **({"press": WRAPPED[name].__name__} if name in WRAPPED else {}),
                                 **({"seed_per_layer": 0} if name in SEEDED else {})}
                case = {"press": name, "press_args": recorded_args, "mode": mode, "compression_ratio": ratio,
                        "n_tokens": len(compressed),
                        "n_kept": [[len(k) for k in r["kept"]] for r in press.records],
                        "answer_ids": answer, "layers": press.records}
                ref["cases"].append(case)
                print(f"kvpress {name} {mode} ratio {ratio}: kept {case['n_kept'][0][0]} of {len(compressed)} "
                      f"per head, answer {answer}", flush=True)
    return ref
