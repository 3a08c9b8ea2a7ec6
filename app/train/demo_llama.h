#pragma once
// The trainable Llama of the demo model: the same architecture and the same Hugging Face parameter names as
// models/llama_model.h reads (embeddings, RMSNorm, RoPE in rotate_half layout, grouped-query attention,
// SwiGLU, tied or separate lm_head), in LibTorch autograd modules. fp32 master weights; the T x T attention
// work can run in bf16.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "models/model_config.h"

namespace varrate::train {

struct DemoModelShape {
    int64_t vocab_size = 0;
    int64_t hidden = 256;
    int64_t layers = 4;
    int64_t heads = 4;
    int64_t n_kv_head = 2;
    int64_t head_dim = 64;
    int64_t intermediate = 512;
    double rope_theta = 100000.0;
    double rms_norm_eps = 1e-5;
    int64_t max_position_embeddings = 32768;
    // A separate lm_head. Tied, every token that is rarely a target (keys, digits under an answer-only loss)
    // is pushed along one shared "not next" direction, which also blurs those tokens as inputs.
    bool tie_embeddings = true;

    // The HF config.json the export carries (LlamaForCausalLM, fp32).
    ModelConfig to_model_config(int64_t bos_id, int64_t eos_id) const;
    void validate() const;  // throws Error naming the bad size
};

struct RmsNormImpl : torch::nn::Module {
    explicit RmsNormImpl(int64_t dim, double eps);
    torch::Tensor forward(const torch::Tensor& x);  // fp32 normalisation, as the runtime and HF do
    torch::Tensor weight;
    double eps;
};
TORCH_MODULE(RmsNorm);

struct AttentionImpl : torch::nn::Module {
    explicit AttentionImpl(const DemoModelShape& s);
    // x [B, T, hidden], cos/sin [T, head_dim] fp32, bias [group*T, T] additive causal mask in attn_dtype.
    torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                          const torch::Tensor& bias, c10::ScalarType attn_dtype);
    torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
    int64_t heads, n_kv_head, head_dim;
    bool keep_copy_heads =
        false;  // keep the attention probabilities of query heads 0 and 1 (with their graph)
    torch::Tensor
        copy_head_probs;  // [B, 2, T, T] in attn_dtype, when keep_copy_heads (heads 0, 1 of KV head 0)
    bool keep_copy_head_out = false;  // also keep query head 0's own term of o_proj's output
    torch::Tensor copy_head_out;      // [B, T, hidden] fp32, when keep_copy_head_out
};
TORCH_MODULE(Attention);

struct MlpImpl : torch::nn::Module {
    explicit MlpImpl(const DemoModelShape& s);
    torch::Tensor forward(const torch::Tensor& x, c10::ScalarType dtype);  // down(silu(gate(x)) * up(x))
    torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(Mlp);

struct DecoderLayerImpl : torch::nn::Module {
    explicit DecoderLayerImpl(const DemoModelShape& s);
    torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                          const torch::Tensor& bias, c10::ScalarType attn_dtype);
    RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
    Attention self_attn{nullptr};
    Mlp mlp{nullptr};
};
TORCH_MODULE(DecoderLayer);

// Holds "embed_tokens", "layers.N", "norm": registered as "model" in DemoLlama so names match HF.
struct LlamaBodyImpl : torch::nn::Module {
    explicit LlamaBodyImpl(const DemoModelShape& s);
    torch::nn::Embedding embed_tokens{nullptr};
    torch::nn::ModuleList layers;
    RmsNorm norm{nullptr};
};
TORCH_MODULE(LlamaBody);

struct DemoLlamaImpl : torch::nn::Module {
    // Weights ~ N(0, 0.02) from torch's default generator (seed it first); o_proj and down_proj scaled by
    // 1/sqrt(2 layers); norms 1.
    explicit DemoLlamaImpl(const DemoModelShape& s);

    // ids [B, T] int64 -> final-norm hidden states [B, T, hidden] fp32. attn_dtype: kFloat or kBFloat16.
    torch::Tensor hidden_states(const torch::Tensor& ids, c10::ScalarType attn_dtype);
    // Logits of chosen rows of `hidden` ([N, hidden]) with the lm_head (or the tied embedding): [N, vocab].
    torch::Tensor logits(const torch::Tensor& hidden_rows);
    // Attention probabilities of query heads 0 and 1 of the last layer in the last hidden_states() call,
    // [B, 2, T, T] (kept only while keep_last_copy_heads(true)): the heads that attention supervision trains.
    // with_output: also keep head 0's residual contribution (last_copy_head_out).
    void keep_last_copy_heads(bool keep, bool with_output = false);
    torch::Tensor last_copy_head_probs();
    torch::Tensor last_copy_head_out();
    // The same for any layer (the key-gather and previous-token supervisions use earlier ones).
    void keep_copy_heads(int64_t layer, bool keep, bool with_output = false);
    torch::Tensor copy_head_probs(int64_t layer);
    // Query head 0's own contribution to the residual stream at every position: [B, T, hidden].
    torch::Tensor copy_head_out(int64_t layer);

    // Parameters by HF name, in the order of ModelConfig::expected_tensors().
    std::vector<std::pair<std::string, torch::Tensor>> hf_tensors();

    DemoModelShape shape;
    LlamaBody model{nullptr};
    torch::nn::Linear lm_head{nullptr};  // only when !shape.tie_embeddings

  private:
    torch::Tensor inv_freq_;  // [head_dim/2] fp32, as models/rope.h computes it
};
TORCH_MODULE(DemoLlama);

}  // namespace varrate::train
