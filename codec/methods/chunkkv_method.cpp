#include "codec/methods/chunkkv_method.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "codec/footprint.h"
#include "codec/settings_table.h"

namespace varrate {

LayerAllocation ChunkKVMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    const auto& a = dynamic_cast<const SnapKVAnalysis&>(analysis);
    check_budget_settings(a, budget);
    const int64_t L = a.n_tokens, full_chunks = L / kChunk, rest = L % kChunk;
    const int64_t n_chunks = full_chunks + (rest > 0 ? 1 : 0);
    if (full_chunks == 0) return allocate_kept(a, snapkv_kept_tokens(budget, L, name()));
    check_budget(budget.budget, name());
    const auto cap = static_cast<int64_t>(static_cast<double>(L) * budget.budget);  // tokens it may keep
    if (cap < std::min(kChunk, L))
        throw InfeasibleBudget(fmt::format(
            "{}: budget kappa={} keeps fewer than one chunk of {} tokens of L={}; "
            "the smallest feasible kappa is {:.4f}",
            name(), budget.budget, kChunk, L, static_cast<double>(kChunk) / static_cast<double>(L) + 1e-4));
    // SnapKV's scores over every position (the window at the maximum + 1, as SnapKVPress pads them), summed
    // over KV heads, averaged per chunk: [n_chunks].
    const int64_t w = L - a.scores.size(1);
    const at::Tensor scores =
        at::cat({a.scores, (a.scores.max() + 1).expand({a.scores.size(0), w})}, 1).sum(0);
    at::Tensor chunk = scores.narrow(0, 0, full_chunks * kChunk).reshape({full_chunks, kChunk}).mean(1);
    if (rest > 0) chunk = at::cat({chunk, scores.narrow(0, full_chunks * kChunk, rest).mean().reshape({1})});
    // Chunks by descending score, equal scores to the earlier chunk (stable, on every device).
    const at::Tensor order =
        std::get<1>(at::sort(chunk.neg(), /*stable=*/true, /*dim=*/0, /*descending=*/false));
    int64_t n_kept =
        std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(n_chunks) * budget.budget));
    at::Tensor sizes = at::full({n_chunks}, kChunk, order.options());
    if (rest > 0) sizes[n_chunks - 1] = rest;
    // The tokens the top n chunks hold, for every n (one host read of a [n_chunks] vector per layer).
    const at::Tensor held = sizes.index_select(0, order).cumsum(0).to(at::kCPU);
    while (n_kept > 1 && held[n_kept - 1].item<int64_t>() > cap) --n_kept;
    const at::Tensor starts = order.narrow(0, 0, n_kept) * kChunk;  // [n_kept]
    const at::Tensor offsets = at::arange(kChunk, order.options());
    at::Tensor positions = (starts.unsqueeze(1) + offsets.unsqueeze(0)).reshape({-1});
    positions = std::get<0>(positions.masked_select(positions < L).sort());  // ascending, the rest chunk cut
    return allocate_kept_positions(a, positions.unsqueeze(0).expand({a.n_kv_head, positions.size(0)}));
}

}  // namespace varrate
