"""kvpress's Expected Attention on the architectures whose query statistics differ, and KVzip with a chat prefix
(kvpress_signals_arch.json, target "kvpress-signals-arch" of generate.py).

- Expected Attention (AdaKVPress(ExpectedAttentionPress(epsilon=1e-2)), kvpress's pipeline prefill) on the
  llama-mha-bias checkpoint (q_proj has a bias: kvpress 0.5.5 takes its query statistics from module.q_proj(h),
  so the bias is in them) and on the qwen3 checkpoint (kvpress applies q_norm to the pre-RoPE queries). Each
  case also records how many (layer, KV head) kept sets change when the checkpoint's q bias is zeroed or its
  q_norm weight set to ones, so that the case is known to tell the variants apart.
- KVzipPress with prefix_length 5, as kvpress's __call__ sets it from a chat template (the BOS and the chat
  header before the user's content are not reconstructed: the chunks start at the prefix, the prefix's scores
  stay 0 and only the sinks are pinned), on the SnapKV checkpoint and context of kvpress_signals.json, with the
  same stand-in repeat prompt.
"""

import torch
from transformers import AutoModelForCausalLM
from transformers import DynamicCache

ARCH_MODELS = ["llama-mha-bias", "qwen3"]
ARCH_SEED = 5151
RATIOS = [0.5, 0.75]
CHAT_PREFIX = 5  # a stand-in chat header: BOS and four header ids
CHAT_CHUNKS = [128, 2048]


def _load(g, name):
    model = AutoModelForCausalLM.from_pretrained(g.DATA / name, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    return model


@torch.no_grad()
def _ea_kept(g, model, ids, ratio):
    inner = g.ExpectedAttentionPress(compression_ratio=ratio, epsilon=g.EXPECTED_ATTENTION_EPSILON)
    press = g.RecordingAdaKVPress(press=inner, alpha_safeguard=g.ADAKV_ALPHA)
    with press(model):
        model.model(input_ids=torch.tensor([ids]), past_key_values=DynamicCache())
    assert len(press.records) == model.config.num_hidden_layers
    return press.records


def _changed(a, b):
    return sum(int(x["kept"][h] != y["kept"][h]) for x, y in zip(a, b) for h in range(len(x["kept"])))


@torch.no_grad()
def _variant_changes(g, name, ids, ratio, records):
    """(layer, KV head) kept sets that change without the q bias / with a unit q_norm."""
    out = {}
    model = _load(g, name)
    attn = [layer.self_attn for layer in model.model.layers]
    if attn[0].q_proj.bias is not None:
        for a in attn:
            a.q_proj.bias.zero_()
        out["changed_without_q_bias"] = _changed(records, _ea_kept(g, model, ids, ratio))
    model = _load(g, name)
    attn = [layer.self_attn for layer in model.model.layers]
    if hasattr(attn[0], "q_norm"):
        for a in attn:
            a.q_norm.weight.fill_(1.0)
        out["changed_with_unit_q_norm"] = _changed(records, _ea_kept(g, model, ids, ratio))
    return out


def reference(g):
    """g: the generate module (its helpers and constants)."""
    ref = {
        "generator": g.generator_info(),
        "pipeline": "AdaKVPress(ExpectedAttentionPress) in the model's prefill; KVzipPress._perform_kvzip_compression "
                    "after a plain prefill with prefix_length set as a chat template sets it; CPU, fp32, sdpa",
        "expected_attention": {"epsilon": g.EXPECTED_ATTENTION_EPSILON, "alpha_safeguard": g.ADAKV_ALPHA},
        "cases": [],
    }
    for name in ARCH_MODELS:
        model = _load(g, name)
        ids = g.id_sequence(ARCH_SEED, g.SNAPKV_CONTEXT, model.config.vocab_size, first=1)
        for ratio in RATIOS:
            records = _ea_kept(g, model, ids, ratio)
            case = {"press": "AdaKVPress(ExpectedAttentionPress)", "model": name,
                    "model_safetensors_sha256": g.sha256(g.DATA / name / "model.safetensors"),
                    "mode": "query-agnostic", "compression_ratio": ratio, "ids": ids, "layers": records}
            case.update(_variant_changes(g, name, ids, ratio, records))
            ref["cases"].append(case)
            print(f"kvpress expected attention {name} ratio {ratio}: "
                  f"{ {k: v for k, v in case.items() if k.startswith('changed')} }", flush=True)

    model = _load(g, g.SNAPKV_MODEL)
    vocab = model.config.vocab_size
    ids = g.id_sequence(g.SNAPKV_SEED, g.SNAPKV_CONTEXT + g.SNAPKV_QUESTION + g.SNAPKV_SUFFIX, vocab, first=1)
    context = ids[:g.SNAPKV_CONTEXT]
    n_first, n_later, n_suffix = g.KVZIP_PROMPT_LENGTHS
    prompt_ids = g.id_sequence(g.KVZIP_PROMPT_SEED, n_first + n_later + n_suffix, vocab)
    prompt = {"first": prompt_ids[:n_first], "later": prompt_ids[n_first:n_first + n_later],
              "suffix": prompt_ids[n_first + n_later:]}
    ref["repeat_prompt"] = dict(prompt, prefix_length=CHAT_PREFIX)
    for ratio in RATIOS:
        for chunk in CHAT_CHUNKS:
            layers = g.kvzip_kept(model, ratio, chunk, context, prompt, prefix_length=CHAT_PREFIX)
            plain = g.kvzip_kept(model, ratio, chunk, context, prompt)
            ref["cases"].append({"press": "KVzipPress", "model": g.SNAPKV_MODEL, "mode": "query-agnostic",
                                 "compression_ratio": ratio, "chunk_size": chunk, "prefix_length": CHAT_PREFIX,
                                 "ids": context, "layers": layers,
                                 "changed_without_prefix": _changed(layers, plain)})
            print(f"kvpress kvzip prefix {CHAT_PREFIX} ratio {ratio} chunk {chunk}: "
                  f"{_changed(layers, plain)} kept sets differ from prefix 0", flush=True)
    return ref
