"""kvpress's DuoAttentionPress with on_the_fly_scoring (kvpress_duo.json, target "kvpress-duo" of generate.py) on
the SnapKV case's llama31-gqa4 checkpoint, with a context of DUO_CONTEXT ids: longer than the 128 sink and 256
recent tokens a streaming head keeps, so that streaming drops tokens. kvpress computes the head scores
(duo_attention_on_the_fly, its own code) from 50 BookSum texts; this machine has no datasets, so its
load_dataset and tokenizer are replaced around the call by 50 copies of the compressed ids themselves (the mean
of 50 equal means is that mean), and kvpress's cache of one pattern per model name is cleared before each case:
the head scores of the document being compressed, which is what our duo-attention computes. Both modes, streaming 2 and 4 of the 6 KV heads (head_compression_ratio 1/3 and 2/3).
Each case records the head scores [layer][KV head], the streaming heads, per layer and KV head the positions
kvpress leaves unmasked (module.masked_key_indices), and the greedy answer when kvpress's pipeline decodes one.
"""

import pandas
import torch
from kvpress import DuoAttentionPress
from kvpress.presses import duo_attention_press
from transformers import AutoModelForCausalLM, BatchEncoding

DUO_CONTEXT = 700
DUO_SEED = 4343
STREAMING_HEADS = [2, 4]


class _DocumentAsBookSum:
    """What duo_attention_on_the_fly reads of load_dataset("kmfoda/booksum") and AutoTokenizer: 50 "chapters"
    whose ids are the document's."""

    def __init__(self, ids):
        self.ids = ids

    def load_dataset(self, *args, **kwargs):
        frame = pandas.DataFrame({"chapter": ["document"] * 50})
        return type("Dataset", (), {"to_pandas": lambda _self: frame})()

    def from_pretrained(self, *args, **kwargs):
        ids = self.ids
        return lambda text, return_tensors=None: BatchEncoding({"input_ids": torch.tensor([ids])})


def _recording_duo(g):
    class RecordingDuo(DuoAttentionPress):
        records: list = None

        def compress(self, module, hidden_states, keys, values, attentions, kwargs):
            if self.records is None:
                self.records = []
            out = super().compress(module, hidden_states, keys, values, attentions, kwargs)
            self.records.append({"layer": int(module.layer_idx),
                                 "kept": g.kept_from_masked(module, keys.shape[1], keys.shape[2])})
            return out

    return RecordingDuo


def reference(g):
    model_dir = g.DATA / g.SNAPKV_MODEL
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    n_question, n_suffix = g.SNAPKV_QUESTION, g.SNAPKV_SUFFIX
    ids = g.id_sequence(DUO_SEED, DUO_CONTEXT + n_question + n_suffix, model.config.vocab_size, first=1)
    context, question, suffix = ids[:DUO_CONTEXT], ids[DUO_CONTEXT:DUO_CONTEXT + n_question], ids[-n_suffix:]
    ref = {
        "generator": g.generator_info(),
        "model": g.SNAPKV_MODEL,
        "model_safetensors_sha256": g.sha256(model_dir / "model.safetensors"),
        "pipeline": "kvpress.pipeline.KVPressTextGenerationPipeline._forward + generate_answer on ids "
                    "(no tokenizer), CPU; head scores by kvpress's duo_attention_on_the_fly on the compressed ids",
        "dtype": "fp32",
        "attn_implementation": "sdpa",
        "answer_tokens": g.SNAPKV_ANSWER_TOKENS,
        "eos_token_id": model.generation_config.eos_token_id,
        "context_ids": context,
        "question_ids": question,
        "suffix_ids": suffix,
        "cases": [],
    }
    n_heads = model.config.num_hidden_layers * model.config.num_key_value_heads
    for mode in ("query-agnostic", "query-aware"):
        compressed = context if mode == "query-agnostic" else context + question
        prompt = question + suffix if mode == "query-agnostic" else suffix
        for n in STREAMING_HEADS:
            stand_in, scored = _DocumentAsBookSum(compressed), []
            saved = (duo_attention_press.load_dataset, duo_attention_press.AutoTokenizer,
                     duo_attention_press.duo_attention_on_the_fly)

            def recording_on_the_fly(model_):
                scored.append(saved[2](model_))
                return scored[-1]

            (duo_attention_press.load_dataset, duo_attention_press.AutoTokenizer,
             duo_attention_press.duo_attention_on_the_fly) = stand_in.load_dataset, stand_in, recording_on_the_fly
            duo_attention_press.cache.clear()  # kvpress keeps one pattern per model name: score this document
            try:
                press = _recording_duo(g)(head_compression_ratio=n / n_heads, on_the_fly_scoring=True)
                press.post_init_from_model(model)
            finally:
                (duo_attention_press.load_dataset, duo_attention_press.AutoTokenizer,
                 duo_attention_press.duo_attention_on_the_fly) = saved
            assert int(press.streaming_mask.sum()) == n
            press.post_init_from_model = lambda model_: None  # scored once, above
            try:
                answer = g.kvpress_run(model, press, compressed, prompt)
            except Exception as e:  # noqa: BLE001 - recorded as "no answer", with the reason printed
                print(f"kvpress DuoAttentionPress {mode} {n} streaming: no answer ({type(e).__name__}: {e})")
                press.records = []
                with torch.no_grad(), press(model):
                    model.model(input_ids=torch.tensor([compressed]), past_key_values=g.DynamicCache())
                answer = None
            assert len(press.records) == model.config.num_hidden_layers
            ref["cases"].append({
                "press": "DuoAttentionPress", "mode": mode, "streaming_heads": n,
                "head_compression_ratio": n / n_heads, "sink_size": press.sink_size,
                "recent_size": press.recent_size, "n_tokens": len(compressed),
                "head_scores": [[g.f(float(s)) for s in row] for row in scored[0]],
                "streaming": [[bool(s) for s in row] for row in press.streaming_mask.tolist()],
                "answer_ids": answer, "layers": press.records})
            print(f"kvpress DuoAttentionPress {mode}, {n} of {n_heads} heads streaming: kept "
                  f"{[[len(k) for k in r['kept']] for r in press.records]}, answer {answer}", flush=True)
    return ref
