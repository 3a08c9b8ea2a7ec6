#pragma once
// ThinK (Xu et al. 2024) as kvpress's ThinKPress: every token is kept, and each KV head keeps only the key
// channels that matter to the recent queries. A channel's score is the mean over the last 32 window queries
// of q^2 (averaged over the KV head's query heads) times the mean over the tokens of k^2 (post-RoPE); each
// head prunes its int(head_dim * key_channel_ratio) lowest-scoring channels, for every token. kvpress zeroes
// them in place (no memory saved); here the layer is held by a ChannelPrunedLayer that stores only the kept
// channels, so the footprint is real: (2 * head_dim - pruned) / (2 * head_dim) plus a byte per kept channel
// index. The footprint follows from the setting, not from kappa (values alone are half the cache), as
// KIVI's follows from its bits; snap-think (snap_think_method.h) composes it with SnapKV under kappa.
#include "codec/method.h"

namespace varrate {

class ThinKMethod : public CompressionMethod {
  public:
    static constexpr int64_t kWindow =
        32;  // ThinKPress's window_size: the recent queries that score channels

    explicit ThinKMethod(const CodecSettings& settings) : settings_(settings) {}
    std::string name() const override { return "think"; }
    const CodecSettings& settings() const override { return settings_; }
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    // Reads key_channel_ratio of `budget` (not its kappa).
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;
    // Keys with the pruned channels zero (kvpress's cache), values whole.
    LayerKV materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                        const LayerAllocation& allocation) override;
    // The kept channels only (ChannelPrunedLayer).
    std::shared_ptr<const LayerPrefix> store(const LayerCapture& capture, const LayerAnalysis& analysis,
                                             const LayerAllocation& allocation) override;

    // The query half of ThinK's channel score: the mean of q^2 over the last 32 window queries (fewer when
    // the capture holds fewer), averaged over each KV head's query heads. [G, head_dim] fp32.
    static at::Tensor query_channel_norm(const LayerCapture& capture);
    // Channels each head prunes: int(head_dim * ratio), as kvpress; throws Error for a ratio outside [0, 1].
    static int64_t pruned_channels(int64_t head_dim, double ratio);
    // The channels kept when each head prunes its `pruned` lowest scores ([G, head_dim]): [G, head_dim -
    // pruned] int64, ascending.
    static at::Tensor kept_channels(const at::Tensor& scores, int64_t pruned);
    // keys [G, n, head_dim] with every channel outside kept [G, n_kept] zero.
    static at::Tensor zero_pruned(const at::Tensor& keys, const at::Tensor& kept);
    // The store of keys [G, n, head_dim] (post-RoPE) and values reduced to their kept channels.
    static std::shared_ptr<const LayerPrefix> channel_store(int64_t layer, const at::Tensor& keys,
                                                            const at::Tensor& values, const at::Tensor& kept);

  private:
    CodecSettings settings_;
};

}  // namespace varrate
