#include "app/train/demo_llama.h"

#include <cmath>
#include <limits>

#include "base/error.h"
#include "models/layer_math.h"
#include "models/rope.h"

namespace varrate::train {

ModelConfig DemoModelShape::to_model_config(int64_t bos_id, int64_t eos_id) const {
    ModelConfig c;
    c.architecture = "LlamaForCausalLM";
    c.model_type = "llama";
    c.hidden_size = hidden;
    c.intermediate_size = intermediate;
    c.n_layer = layers;
    c.n_head = heads;
    c.n_kv_head = n_kv_head;
    c.head_dim = head_dim;
    c.vocab_size = vocab_size;
    c.max_position_embeddings = max_position_embeddings;
    c.rms_norm_eps = rms_norm_eps;
    c.rope_theta = rope_theta;
    c.tie_word_embeddings = tie_embeddings;
    c.bos_token_id = bos_id;
    c.eos_token_ids = {eos_id};
    c.torch_dtype = "float32";
    return c;
}

void DemoModelShape::validate() const {
    auto positive = [](int64_t v, const char* name) {
        if (v <= 0)
            throw Error(std::string("model shape: ") + name + " must be positive, got " + std::to_string(v));
    };
    positive(vocab_size, "vocab_size");
    positive(hidden, "hidden");
    positive(layers, "layers");
    positive(heads, "heads");
    positive(n_kv_head, "kv_heads");
    positive(head_dim, "head_dim");
    positive(intermediate, "intermediate");
    if (heads % n_kv_head != 0)
        throw Error("model shape: heads (" + std::to_string(heads) + ") must be a multiple of kv_heads (" +
                    std::to_string(n_kv_head) + ")");
    if (head_dim % 2 != 0) throw Error("model shape: head_dim must be even for RoPE");
    if (!(rope_theta > 0)) throw Error("model shape: rope_theta must be positive");
}

RmsNormImpl::RmsNormImpl(int64_t dim, double eps_) : eps(eps_) {
    weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
    return rms_norm(x, weight, eps);
}

namespace {

torch::nn::Linear linear(int64_t in, int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

// A bias-free projection, computed in `dtype` (bf16: the weights are cast from the fp32 masters each step).
torch::Tensor project(const torch::nn::Linear& l, const torch::Tensor& x, c10::ScalarType dtype) {
    if (dtype == torch::kFloat) return torch::linear(x, l->weight);
    return torch::linear(x.to(dtype), l->weight.to(dtype)).to(torch::kFloat);
}

}  // namespace

AttentionImpl::AttentionImpl(const DemoModelShape& s)
    : heads(s.heads), n_kv_head(s.n_kv_head), head_dim(s.head_dim) {
    q_proj = register_module("q_proj", linear(s.hidden, s.heads * s.head_dim));
    k_proj = register_module("k_proj", linear(s.hidden, s.n_kv_head * s.head_dim));
    v_proj = register_module("v_proj", linear(s.hidden, s.n_kv_head * s.head_dim));
    o_proj = register_module("o_proj", linear(s.heads * s.head_dim, s.hidden));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                     const torch::Tensor& sin, const torch::Tensor& bias,
                                     c10::ScalarType attn_dtype) {
    const int64_t B = x.size(0), T = x.size(1), group = heads / n_kv_head;
    const torch::Tensor q =
        apply_rope(project(q_proj, x, attn_dtype).view({B, T, heads, head_dim}).transpose(1, 2), cos,
                   sin);  // [B, nh, T, hd]
    const torch::Tensor k = apply_rope(
        project(k_proj, x, attn_dtype).view({B, T, n_kv_head, head_dim}).transpose(1, 2), cos, sin);
    const torch::Tensor v =
        project(v_proj, x, attn_dtype).view({B, T, n_kv_head, head_dim}).transpose(1, 2);  // [B, nkv, T, hd]
    // GQA without repeating K/V: the query heads of one kv head become rows (g, t) of one batched matmul, and
    // scale + causal mask are one baddbmm with the additive bias.
    const torch::Tensor qg = q.reshape({B * n_kv_head, group * T, head_dim}).to(attn_dtype);
    const torch::Tensor kt = k.reshape({B * n_kv_head, T, head_dim}).to(attn_dtype).transpose(1, 2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    const torch::Tensor scores =
        torch::baddbmm(bias, qg, kt, /*beta=*/1.0, /*alpha=*/scale);  // [B nkv, group T, T]
    const torch::Tensor probs = torch::softmax(scores, -1);
    if (keep_copy_heads)
        copy_head_probs = probs.view({B, n_kv_head, group * T, T})
                              .select(1, 0)
                              .narrow(1, 0, std::min<int64_t>(group, 2) * T)
                              .reshape({B, -1, T, T});
    const torch::Tensor out = torch::bmm(probs, v.reshape({B * n_kv_head, T, head_dim}).to(attn_dtype))
                                  .to(torch::kFloat)
                                  .view({B, heads, T, head_dim})
                                  .transpose(1, 2)
                                  .reshape({B, T, heads * head_dim});
    if (keep_copy_head_out)
        copy_head_out = torch::linear(out.narrow(-1, 0, head_dim), o_proj->weight.narrow(1, 0, head_dim));
    return project(o_proj, out, attn_dtype);
}

MlpImpl::MlpImpl(const DemoModelShape& s) {
    gate_proj = register_module("gate_proj", linear(s.hidden, s.intermediate));
    up_proj = register_module("up_proj", linear(s.hidden, s.intermediate));
    down_proj = register_module("down_proj", linear(s.intermediate, s.hidden));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x, c10::ScalarType dtype) {
    return project(down_proj, swiglu(project(gate_proj, x, dtype), project(up_proj, x, dtype)), dtype);
}

DecoderLayerImpl::DecoderLayerImpl(const DemoModelShape& s) {
    input_layernorm = register_module("input_layernorm", RmsNorm(s.hidden, s.rms_norm_eps));
    self_attn = register_module("self_attn", Attention(s));
    post_attention_layernorm = register_module("post_attention_layernorm", RmsNorm(s.hidden, s.rms_norm_eps));
    mlp = register_module("mlp", Mlp(s));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                        const torch::Tensor& sin, const torch::Tensor& bias,
                                        c10::ScalarType attn_dtype) {
    const torch::Tensor h = x + self_attn(input_layernorm(x), cos, sin, bias, attn_dtype);
    return h + mlp(post_attention_layernorm(h), attn_dtype);
}

LlamaBodyImpl::LlamaBodyImpl(const DemoModelShape& s) {
    embed_tokens = register_module("embed_tokens", torch::nn::Embedding(s.vocab_size, s.hidden));
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < s.layers; ++i) layers->push_back(DecoderLayer(s));
    norm = register_module("norm", RmsNorm(s.hidden, s.rms_norm_eps));
}

DemoLlamaImpl::DemoLlamaImpl(const DemoModelShape& s) : shape(s) {
    s.validate();
    model = register_module("model", LlamaBody(s));
    if (!s.tie_embeddings) lm_head = register_module("lm_head", linear(s.hidden, s.vocab_size));
    torch::NoGradGuard no_grad;
    const double out_std = 0.02 / std::sqrt(2.0 * static_cast<double>(s.layers));
    for (auto& item : named_parameters()) {
        const std::string& name = item.key();
        torch::Tensor& p = item.value();
        if (name.find("norm") != std::string::npos) continue;
        const bool residual_out =
            name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos;
        p.normal_(0.0, residual_out ? out_std : 0.02);
    }
    ModelConfig c = s.to_model_config(0, 0);
    inv_freq_ = rope_inv_freq(c);
}

torch::Tensor DemoLlamaImpl::hidden_states(const torch::Tensor& ids, c10::ScalarType attn_dtype) {
    const int64_t T = ids.size(1), group = shape.heads / shape.n_kv_head;
    const auto [cos, sin] = rope_cos_sin(inv_freq_.to(ids.device()), 0, T, torch::kFloat);  // [T, head_dim]
    // Additive causal bias for rows (g, t): 0 where key <= t, -inf after.
    const torch::Tensor causal =
        torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(ids.device())).triu(1);
    const torch::Tensor bias =
        torch::zeros({T, T}, torch::TensorOptions().dtype(attn_dtype).device(ids.device()))
            .masked_fill_(causal, -std::numeric_limits<float>::infinity())
            .repeat({group, 1});                 // [group T, T]
    torch::Tensor x = model->embed_tokens(ids);  // [B, T, hidden]
    for (const auto& layer : *model->layers)
        x = layer->as<DecoderLayer>()->forward(x, cos, sin, bias, attn_dtype);
    return model->norm(x);
}

torch::Tensor DemoLlamaImpl::logits(const torch::Tensor& hidden_rows) {
    return torch::matmul(hidden_rows, (lm_head ? lm_head->weight : model->embed_tokens->weight).t());
}

void DemoLlamaImpl::keep_copy_heads(int64_t layer, bool keep, bool with_output) {
    auto attn = (*model->layers)[static_cast<size_t>(layer)]->as<DecoderLayer>()->self_attn;
    attn->keep_copy_heads = keep;
    attn->keep_copy_head_out = keep && with_output;
    if (!keep) {
        attn->copy_head_probs = torch::Tensor();
        attn->copy_head_out = torch::Tensor();
    }
}

torch::Tensor DemoLlamaImpl::copy_head_probs(int64_t layer) {
    return (*model->layers)[static_cast<size_t>(layer)]->as<DecoderLayer>()->self_attn->copy_head_probs;
}

torch::Tensor DemoLlamaImpl::copy_head_out(int64_t layer) {
    return (*model->layers)[static_cast<size_t>(layer)]->as<DecoderLayer>()->self_attn->copy_head_out;
}

void DemoLlamaImpl::keep_last_copy_heads(bool keep, bool with_output) {
    keep_copy_heads(static_cast<int64_t>(model->layers->size()) - 1, keep, with_output);
}

torch::Tensor DemoLlamaImpl::last_copy_head_out() {
    return copy_head_out(static_cast<int64_t>(model->layers->size()) - 1);
}

torch::Tensor DemoLlamaImpl::last_copy_head_probs() {
    return copy_head_probs(static_cast<int64_t>(model->layers->size()) - 1);
}

std::vector<std::pair<std::string, torch::Tensor>> DemoLlamaImpl::hf_tensors() {
    const auto params = named_parameters();
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& [name, shape_] : shape.to_model_config(0, 0).expected_tensors()) {
        const torch::Tensor* t = params.find(name);
        if (!t) throw Error("demo model: no parameter named '" + name + "'");
        if (t->sizes().vec() != shape_)
            throw Error("demo model: parameter '" + name + "' has the wrong shape");
        out.emplace_back(name, t->detach());
    }
    if (out.size() != params.size())
        throw Error("demo model: " + std::to_string(params.size()) + " parameters, the HF layout names " +
                    std::to_string(out.size()));
    return out;
}

}  // namespace varrate::train
