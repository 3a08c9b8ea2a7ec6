#include "codec/allocation_signal.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "codec/expected_attention_method.h"
#include "codec/salience.h"
#include "core/base/error.h"

namespace varrate {

namespace {

// One generator per layer, so that the ablations are reproducible and independent of the layer order.
at::Generator layer_generator(int64_t layer) {
    return at::detail::createCPUGenerator(0x5A11E7CEull + static_cast<uint64_t>(layer));
}

}  // namespace

std::string signal_requirement(SalienceSignal signal) {
    switch (signal) {
        case SalienceSignal::Question:
            return "the question's attention over the context (a question must be given: compare, niah)";
        case SalienceSignal::Repeat:
            return "KVzip's context-reconstruction scores (a second pass over the context)";
        case SalienceSignal::Expected:
            return "the prefill's query statistics";
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
    }
    throw Error("allocation_salience: unknown signal");
}

}  // namespace varrate
