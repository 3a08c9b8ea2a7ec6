"""kvpress's wrapper presses on the SnapKV case's checkpoint and ids (kvpress_wrappers.json, target
"kvpress-wrappers" of generate.py), unchanged, run through kvpress's pipeline code in both modes at the SnapKV
case's ratios: ThinKPress alone (key channel ratios 0.25 and 0.5), ComposedPress([SnapKVPress(ratio),
ThinKPress(0.5)]) (kvpress's "snap_think"), CriticalKVPress(SnapKVPress(ratio)) ("critical_snapkv"),
CriticalAdaKVPress(SnapKVPress(ratio)) ("critical_adakv_snapkv") and KeyRerotationPress(SnapKVPress(ratio)).
Each records, per layer and KV head, the key channels ThinK zeroed, the entries kept (matched by rows;
KeyRerotation: by the values' rows, its keys are turned; CriticalAdaKV: those it does not mask), and the greedy
answer decoded from the compressed cache (KeyRerotation: decoding continues at the kept count, as kvpress's
pipeline does for it). FinchPress (its defaults: no chunks, normalised scores, keys rerotated) runs query-aware only
(its window is the question, found by a delimiter id between context and question that its embedding hook
removes: the model reads context + question), recording the sorted indices it hands to rerotate_keys.
PerLayerCompressionPress(SnapKVPress(), ratios) runs at two ratio lists whose mean is 0.5, both modes, recording
SnapKV's kept entries per layer; its answers are decoded when kvpress's pipeline can (layers of other lengths).
"""

import torch
from kvpress import (ComposedPress, CriticalAdaKVPress, CriticalKVPress, FinchPress, KeyRerotationPress,
                     PerLayerCompressionPress, SnapKVPress, ThinKPress)
from transformers import AutoModelForCausalLM

THINK_RATIOS = [0.25, 0.5]
# PerLayerCompressionPress's ratios per layer (3 layers), each list of mean 0.5: exact in binary, so that kappa 0.5 x
# (1 - r_l) / 0.5 is 1 - r_l to the bit.
PER_LAYER_RATIOS = [[0.25, 0.5, 0.75], [0.625, 0.375, 0.5]]
COMPOSED_THINK_RATIO = 0.5


def _pruned_channels(keys, new_keys):
    """Per KV head, the ascending channels ThinK zeroed in `new_keys` [1, G, L, d] (and were not zero)."""
    out = []
    for h in range(keys.shape[1]):
        zeroed = (new_keys[0, h] == 0).all(0) & ~(keys[0, h] == 0).all(0)  # [d]
        unchanged = (new_keys[0, h] == keys[0, h]).all(0)
        assert bool((zeroed | unchanged).all()), "ThinK changed a channel without zeroing it"
        out.append([int(c) for c in torch.nonzero(zeroed).flatten()])
    return out


class RecordingThinK(ThinKPress):
    """ThinKPress, unchanged, recording the channels it zeroed (it zeroes them in place: compared with a copy)."""

    records: list = None

    def compress(self, module, hidden_states, keys, values, attentions, kwargs):
        if self.records is None:
            self.records = []
        original = keys.clone()
        new_keys, new_values = super().compress(module, hidden_states, keys, values, attentions, kwargs)
        keys = original
        self.records.append({"layer": int(module.layer_idx), "pruned_channels": _pruned_channels(keys, new_keys)})
        return new_keys, new_values


def _recording_snapkv(g):
    class RecordingSnapKV(SnapKVPress):
        def __post_init__(self):
            super().__post_init__()
            self.records = []

        def compress(self, module, hidden_states, keys, values, attentions, kwargs):
            new_keys, new_values = super().compress(module, hidden_states, keys, values, attentions, kwargs)
            self.records.append({"layer": int(module.layer_idx), "kept": g.kept_by_matching(keys, new_keys)})
            return new_keys, new_values

    return RecordingSnapKV


class RecordingCriticalKV(CriticalKVPress):
    records: list = None

    def compress(self, module, hidden_states, keys, values, attentions, kwargs):
        if self.records is None:
            self.records = []
        new_keys, new_values = super().compress(module, hidden_states, keys, values, attentions, kwargs)
        self.records.append({"layer": int(module.layer_idx), "kept": self.g.kept_by_matching(keys, new_keys)})
        return new_keys, new_values


class RecordingCriticalAdaKV(CriticalAdaKVPress):
    records: list = None

    def compress(self, module, hidden_states, keys, values, attentions, kwargs):
        if self.records is None:
            self.records = []
        new_keys, new_values = super().compress(module, hidden_states, keys, values, attentions, kwargs)
        self.records.append({"layer": int(module.layer_idx),
                             "kept": self.g.kept_from_masked(module, keys.shape[1], keys.shape[2])})
        return new_keys, new_values


class RecordingKeyRerotation(KeyRerotationPress):
    """KeyRerotationPress, unchanged, recording the sorted indices its compress() hands to rerotate_keys (its keys
    are turned and layer 0's values repeat with the tokens, so rows cannot be matched)."""

    records: list = None

    def rerotate_keys(self, module, indices, keys):
        if self.records is None:
            self.records = []
        self.records.append({"layer": int(module.layer_idx),
                             "kept": [[int(t) for t in row] for row in indices[0]]})
        return KeyRerotationPress.rerotate_keys(module, indices, keys)


class RecordingFinch(FinchPress):
    """FinchPress, unchanged, recording the sorted indices its compress() hands to KeyRerotationPress.rerotate_keys
    (patched around the call only)."""

    records: list = None

    def compress(self, module, hidden_states, keys, values, attentions, kwargs):
        if self.records is None:
            self.records = []
        original = KeyRerotationPress.rerotate_keys

        def recording(module_, indices, keys_):
            self.records.append({"layer": int(module_.layer_idx),
                                 "kept": [[int(t) for t in row] for row in indices[0]]})
            return original(module_, indices, keys_)

        KeyRerotationPress.rerotate_keys = staticmethod(recording)
        try:
            return super().compress(module, hidden_states, keys, values, attentions, kwargs)
        finally:
            KeyRerotationPress.rerotate_keys = staticmethod(original)


def reference(g):
    model_dir = g.DATA / g.SNAPKV_MODEL
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    ref, (context, question, suffix) = g.snapkv_case_header(model, model_dir)
    for mode in ("query-agnostic", "query-aware"):
        compressed = context if mode == "query-agnostic" else context + question
        prompt = question + suffix if mode == "query-agnostic" else suffix
        for kcr in THINK_RATIOS:
            think = RecordingThinK(key_channel_compression_ratio=kcr)
            answer = g.kvpress_run(model, think, compressed, prompt)
            assert len(think.records) == model.config.num_hidden_layers
            ref["cases"].append({"press": "ThinKPress", "mode": mode, "key_channel_compression_ratio": kcr,
                                 "n_tokens": len(compressed), "answer_ids": answer, "layers": think.records})
            print(f"kvpress ThinKPress({kcr}) {mode}: pruned {len(think.records[0]['pruned_channels'][0])} "
                  f"channels per head, answer {answer}", flush=True)
        for ratio in g.SNAPKV_RATIOS:
            snap = _recording_snapkv(g)(compression_ratio=ratio)
            think = RecordingThinK(key_channel_compression_ratio=COMPOSED_THINK_RATIO)
            answer = g.kvpress_run(model, ComposedPress([snap, think]), compressed, prompt)
            layers = [{**s, **t} for s, t in zip(snap.records, think.records)]
            assert len(layers) == model.config.num_hidden_layers
            ref["cases"].append({"press": "ComposedPress", "presses": ["SnapKVPress", "ThinKPress"], "mode": mode,
                                 "compression_ratio": ratio,
                                 "key_channel_compression_ratio": COMPOSED_THINK_RATIO,
                                 "n_tokens": len(compressed), "answer_ids": answer, "layers": layers})
            print(f"kvpress ComposedPress([SnapKVPress({ratio}), ThinKPress({COMPOSED_THINK_RATIO})]) {mode}: "
                  f"kept {len(layers[0]['kept'][0])} tokens per head, answer {answer}", flush=True)
        for cls in (RecordingCriticalKV, RecordingCriticalAdaKV, RecordingKeyRerotation):
            for ratio in g.SNAPKV_RATIOS:
                press = cls(SnapKVPress(compression_ratio=ratio))
                press.g = g
                if cls is RecordingCriticalAdaKV:
                    # Only the prefill, as the Ada-KV reference: kvpress masks the evicted keys in decoding with a
                    # fake key every query of a KV group must score negatively, which this checkpoint's queries
                    # (16 dimensions) do not allow ("Could not find fake keys").
                    with torch.no_grad(), press(model):
                        model.model(input_ids=torch.tensor([compressed]), past_key_values=g.DynamicCache())
                    answer = None
                else:
                    answer = g.kvpress_run(model, press, compressed, prompt)
                assert len(press.records) == model.config.num_hidden_layers
                name = cls.__bases__[0].__name__
                ref["cases"].append({"press": name, "inner_press": "SnapKVPress", "mode": mode,
                                     "compression_ratio": ratio, "n_tokens": len(compressed),
                                     "answer_ids": answer, "layers": press.records})
                print(f"kvpress {name}(SnapKVPress({ratio})) {mode}: kept "
                      f"{[len(k) for k in press.records[0]['kept']]} in layer 0, answer {answer}", flush=True)
    for mode in ("query-agnostic", "query-aware"):
        compressed = context if mode == "query-agnostic" else context + question
        prompt = question + suffix if mode == "query-agnostic" else suffix
        for ratios in PER_LAYER_RATIOS:
            snap = _recording_snapkv(g)(compression_ratio=0.0)
            press = PerLayerCompressionPress(press=snap, compression_ratios=ratios)
            try:
                answer = g.kvpress_run(model, press, compressed, prompt)
            except Exception as e:  # noqa: BLE001 - recorded as "no answer", with the reason printed
                print(f"kvpress PerLayerCompressionPress({ratios}) {mode}: no answer ({type(e).__name__}: {e})")
                snap.records = []
                with torch.no_grad(), press(model):
                    model.model(input_ids=torch.tensor([compressed]), past_key_values=g.DynamicCache())
                answer = None
            assert len(snap.records) == model.config.num_hidden_layers
            ref["cases"].append({"press": "PerLayerCompressionPress", "inner_press": "SnapKVPress", "mode": mode,
                                 "compression_ratios": ratios, "n_tokens": len(compressed), "answer_ids": answer,
                                 "layers": snap.records})
            print(f"kvpress PerLayerCompressionPress(SnapKVPress(), {ratios}) {mode}: kept "
                  f"{[len(r['kept'][0]) for r in snap.records]}, answer {answer}", flush=True)
    # Finch: query-aware only (it needs the question as its window), a delimiter id absent from every id used.
    delimiter = min(set(range(model.config.vocab_size)) - set(context + question + suffix))
    for ratio in g.SNAPKV_RATIOS:
        press = RecordingFinch(compression_ratio=ratio)
        press.delimiter_token_id = delimiter
        answer = g.kvpress_run(model, press, context + [delimiter] + question, suffix)
        assert press.window_size == len(question)
        assert len(press.records) == model.config.num_hidden_layers
        ref["cases"].append({"press": "FinchPress", "mode": "query-aware", "compression_ratio": ratio,
                             "delimiter_id": delimiter, "window": press.window_size,
                             "n_tokens": len(context + question), "answer_ids": answer, "layers": press.records})
        print(f"kvpress FinchPress({ratio}) query-aware: kept {len(press.records[0]['kept'][0])} tokens per head, "
              f"answer {answer}", flush=True)
    return ref
