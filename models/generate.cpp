#include "models/generate.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/base/error.h"

namespace varrate {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Argmax of fp32 CPU logits [1, vocab]; ties go to the lowest id, NaN never wins.
int64_t greedy_token(const at::Tensor& logits) {
    const at::Tensor row = logits.reshape({-1}).to(at::kFloat).contiguous();
    const float* p = row.data_ptr<float>();
    const int64_t n = row.numel();
    int64_t best = -1;
    for (int64_t i = 0; i < n; ++i)
        if (!std::isnan(p[i]) && (best < 0 || p[i] > p[best])) best = i;
    if (best < 0) throw Error("generate: the logits are all NaN (numerical failure in the forward pass)");
    return best;
}

}  // namespace

GenerateResult generate_greedy(const LlamaModel& model, KVCache& cache, const std::vector<int64_t>& prompt,
                               const GenerateOptions& opt) {
    if (prompt.empty()) throw Error("generate: the prompt is empty");
    if (opt.max_new_tokens < 0) throw Error("generate: max_new_tokens must not be negative");
    GenerateResult r;
    ForwardOptions prefill = opt.prefill;
    prefill.all_logits = false;
    if (!prefill.cancel) prefill.cancel = opt.cancel;
    if (!prefill.progress) prefill.progress = opt.progress;
    auto t0 = Clock::now();
    at::Tensor logits = model.forward(prompt, cache, prefill);  // [1, vocab] fp32 CPU: the one host sync
    const double prefill_ms = ms_since(t0);
    r = decode_greedy(model, cache, std::move(logits), opt);
    r.prefill_ms = prefill_ms;
    return r;
}

GenerateResult decode_greedy(const LlamaModel& model, KVCache& cache, at::Tensor logits,
                             const GenerateOptions& opt) {
    if (opt.max_new_tokens < 0) throw Error("generate: max_new_tokens must not be negative");
    GenerateResult r;
    ForwardOptions step;
    step.cancel = opt.cancel;
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < opt.max_new_tokens; ++i) {
        const int64_t token = greedy_token(logits);
        r.generated.push_back(token);
        if (opt.on_token) opt.on_token(token);
        if (opt.progress) opt.progress("decode", i + 1, opt.max_new_tokens);
        if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), token) != opt.stop_ids.end()) {
            r.stopped = true;
            break;
        }
        if (i + 1 == opt.max_new_tokens) break;  // the last token is not fed back
        check_cancel(opt.cancel);
        logits = model.forward({token}, cache, step);
    }
    r.decode_ms = ms_since(t0);
    return r;
}

}  // namespace varrate
