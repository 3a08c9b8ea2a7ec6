#include "codec/allocation_signal.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "base/error.h"
#include "codec/methods/expected_attention_method.h"
#include "codec/salience.h"

namespace varrate {

namespace {

// One generator per layer, so that the ablations are reproducible and independent of the layer order.
at::Generator layer_generator(int64_t layer) {
    return at::detail::createCPUGenerator(0x5A11E7CEull + static_cast<uint64_t>(layer));
}

}  // namespace

at::Tensor rare_token_mask(const at::Tensor& ids, int64_t max_count) {
    // Counts per distinct id, mapped back to positions: no host sync, any vocabulary size.
    const auto [unique, inverse, counts] = at::_unique2(ids, /*sorted=*/false, /*return_inverse=*/true,
                                                        /*return_counts=*/true);
    return counts.index_select(0, inverse.reshape({-1})) <= max_count;  // [L] bool
}

std::string signal_requirement(SalienceSignal signal) {
    switch (signal) {
        case SalienceSignal::Question:
            return "the question's attention over the context (a question must be given: compare, niah)";
        case SalienceSignal::Repeat:
            return "KVzip's context-reconstruction scores (a second pass over the context)";
        case SalienceSignal::Expected:
            return "the prefill's query statistics";
        case SalienceSignal::RareFloor:
            return "the context's token ids (a prefill that began on an empty cache)";
        case SalienceSignal::Scorer:
            return "a method's score function (varrate@<method>)";
        default:
            return "";
    }
}

at::Tensor allocation_salience(SalienceSignal signal, const LayerCapture& capture,
                               const CodecSettings& settings) {
    const int64_t L = capture.keys.size(1);
    const auto opts = capture.keys.options().dtype(at::kFloat);
    switch (signal) {
        case SalienceSignal::Window:
            return varrate_salience(capture, settings.obs_window, settings.pool_kernel);
        case SalienceSignal::Constant:
            return at::ones({L}, opts);
        case SalienceSignal::Random: {
            at::Generator gen = layer_generator(capture.layer);
            return at::rand({L}, gen, at::TensorOptions().dtype(at::kFloat)).to(opts.device());
        }
        case SalienceSignal::Shuffle: {
            at::Generator gen = layer_generator(capture.layer);
            const at::Tensor perm = at::randperm(L, gen, at::TensorOptions().dtype(at::kLong));
            return varrate_salience(capture, settings.obs_window, settings.pool_kernel)
                .index_select(0, perm.to(opts.device()));
        }
        case SalienceSignal::Position:
            return at::arange(L, opts) / static_cast<double>(L);
        case SalienceSignal::Question: {
            const at::Tensor& qa = capture.question_attention;  // [H, L]
            if (!qa.defined() || qa.dim() != 2 || qa.size(1) != L)
                throw Error(fmt::format("layer {}: this signal needs {}; the capture has {}", capture.layer,
                                        signal_requirement(signal), shape_str(qa)));
            return pool_scores(qa.to(at::kFloat).mean(0, /*keepdim=*/true), settings.pool_kernel).squeeze(0);
        }
        case SalienceSignal::Repeat: {
            const at::Tensor& rs = capture.repeat_scores;  // [G, L]
            if (!rs.defined() || rs.dim() != 2 || rs.size(1) != L)
                throw Error(fmt::format("layer {}: this signal needs {}; the capture has {}", capture.layer,
                                        signal_requirement(signal), shape_str(rs)));
            return std::get<0>(rs.to(at::kFloat).max(0));
        }
        case SalienceSignal::Expected:
            return expected_attention_scores(capture).mean(0);
        case SalienceSignal::RareFloor: {
            const at::Tensor& ids = capture.token_ids;  // [L]
            if (!ids.defined() || ids.dim() != 1 || ids.size(0) != L)
                throw Error(fmt::format("layer {}: this signal needs {}; the capture has {}", capture.layer,
                                        signal_requirement(signal), shape_str(ids)));
            const at::Tensor window = varrate_salience(capture, settings.obs_window, settings.pool_kernel);
            const at::Tensor floor = at::quantile(window.to(at::kFloat), kRareQuantile);  // 0-dim
            const at::Tensor rare = rare_token_mask(ids.to(window.device()), kRareMaxCount);
            return at::where(rare, at::maximum(window, floor.to(window.dtype())), window);
        }
        case SalienceSignal::Scorer:
            throw Error(
                fmt::format("layer {}: this signal needs {}", capture.layer, signal_requirement(signal)));
    }
    throw Error("allocation_salience: unknown signal");
}

}  // namespace varrate
