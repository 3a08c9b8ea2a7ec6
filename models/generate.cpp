#include "models/generate.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "base/error.h"
#include "base/stopwatch.h"
#include "models/batch_cache.h"
#include "models/host_read.h"

namespace varrate {

namespace {

using Clock = SteadyClock;

// Each row's greedy id of host logits [..., vocab], as greedy_ids chooses it (flattened rows, row-major).
std::vector<int64_t> greedy_tokens(const at::Tensor& logits) {
    const at::Tensor ids = to_host(greedy_ids(logits)).contiguous();
    const int64_t* p = ids.data_ptr<int64_t>();
    std::vector<int64_t> out(p, p + ids.numel());
    for (int64_t id : out)
        if (id < 0) throw Error("generate: the logits are all NaN (numerical failure in the forward pass)");
    return out;
}

// Tokens decoded between two reads of the host: every one on the CPU, where a read costs nothing and
// streaming stays token by token; on a device, kDeviceSyncEvery, so that the loop does not wait for the
// device after each step.
constexpr int64_t kDeviceSyncEvery = 16;
int64_t sync_interval(const GenerateOptions& opt, const c10::Device& device) {
    if (opt.host_sync_every > 0) return opt.host_sync_every;
    return device.is_cpu() ? 1 : kDeviceSyncEvery;
}

bool is_stop(const GenerateOptions& opt, int64_t token) {
    return std::find(opt.stop_ids.begin(), opt.stop_ids.end(), token) != opt.stop_ids.end();
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

at::Tensor greedy_ids(const at::Tensor& logits) {
    const at::Tensor l = logits.reshape({-1, logits.size(-1)}).to(at::kFloat);  // [rows, vocab]
    const at::Tensor nan = l.isnan();
    const at::Tensor ids = l.masked_fill(nan, -std::numeric_limits<float>::infinity()).argmax(1);
    return ids.masked_fill(nan.all(1), -1);  // [rows] int64, on the logits' device
}

GenerateResult decode_greedy(const LlamaModel& model, KVCache& cache, at::Tensor logits,
                             const GenerateOptions& opt) {
    if (opt.max_new_tokens < 0) throw Error("generate: max_new_tokens must not be negative");
    GenerateResult r;
    ForwardOptions step;
    step.cancel = opt.cancel;
    const c10::Device device = model.options().device;
    const int64_t every = sync_interval(opt, device);
    // The ids stay on the device and are fed back from there; the host reads them every `every` steps to
    // see a stop. Tokens fed after a stop are taken back out of the cache (its snapshot before each feed).
    std::vector<at::Tensor> pending;            // [1] int64 on the device, not yet read
    std::vector<KVCache::Snapshot> before_fed;  // the cache before pending[j] was fed
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < opt.max_new_tokens; ++i) {
        const at::Tensor id = greedy_ids(logits).to(device);  // [1]
        pending.push_back(id);
        const bool last = i + 1 == opt.max_new_tokens;
        if (static_cast<int64_t>(pending.size()) == every || last) {
            const at::Tensor host = to_host(pending.size() == 1 ? pending.front() : at::cat(pending));
            const int64_t* ids = host.data_ptr<int64_t>();
            for (size_t j = 0; j < pending.size(); ++j) {
                const int64_t token = ids[j];
                if (token < 0)
                    throw Error("generate: the logits are all NaN (numerical failure in the forward pass)");
                r.generated.push_back(token);
                if (opt.on_token) opt.on_token(token);
                if (opt.progress)
                    opt.progress("decode", static_cast<int64_t>(r.generated.size()), opt.max_new_tokens);
                if (is_stop(opt, token)) {
                    r.stopped = true;
                    if (j < before_fed.size()) cache.restore(before_fed[j]);  // the stop is not fed back
                    r.decode_ms = ms_since(t0);
                    return r;
                }
            }
            pending.clear();
            before_fed.clear();
        }
        if (last) break;  // the last token is not fed back
        check_cancel(opt.cancel);
        // The cache before `id` is fed, while `id` is still unread (pending.back()): a stop there undoes it.
        if (!pending.empty()) before_fed.push_back(cache.snapshot());
        logits = model.forward_on_device(id.clamp_min(0), cache, step);  // [1, vocab] on the device
    }
    r.decode_ms = ms_since(t0);
    return r;
}

namespace {

// Greedy continuation of the `active` rows of `cache` (indices into r), each fed its last generated token
// (its cache holds everything before it), until each stops or has max_new_tokens tokens. Rows that are done
// leave the batch, so later steps only pay for those still going. When every row still going repeats its
// last token (a degenerate tail such as "0000..."), a step also feeds that token a few more times as a draft
// and keeps what each row's own greedy tokens confirm.
void continue_greedy(const LlamaModel& model, BatchKVCache cache, std::vector<GenerateResult>& r,
                     std::vector<int64_t> active, const GenerateOptions& opt) {
    constexpr int64_t kRepeatDraft = 7;
    std::vector<int64_t> row_of(r.size());  // result index -> its row in `cache`
    for (size_t b = 0; b < r.size(); ++b) row_of[b] = static_cast<int64_t>(b);
    while (!active.empty()) {
        check_cancel(opt.cancel);
        if (static_cast<int64_t>(active.size()) < cache.batch_size()) {
            std::vector<int64_t> rows;
            for (int64_t b : active) rows.push_back(row_of[b]);
            cache = cache.select(rows);
            for (size_t k = 0; k < active.size(); ++k) row_of[active[k]] = static_cast<int64_t>(k);
        }
        bool repeating = true;
        int64_t room = kRepeatDraft;
        for (int64_t b : active) {
            const std::vector<int64_t>& g = r[b].generated;
            repeating &= g.size() >= 2 && g[g.size() - 1] == g[g.size() - 2];
            room = std::min<int64_t>(room, opt.max_new_tokens - static_cast<int64_t>(g.size()) - 1);
        }
        const int64_t n_draft = repeating ? std::max<int64_t>(0, room) : 0;
        std::vector<std::vector<int64_t>> next;
        for (int64_t b : active) next.emplace_back(static_cast<size_t>(1 + n_draft), r[b].generated.back());
        std::vector<int64_t> before;
        for (size_t k = 0; k < active.size(); ++k)
            before.push_back(cache.appended(0, static_cast<int64_t>(k)));
        const at::Tensor logits =
            model.forward_batch(next, cache, 1 + n_draft, opt.cancel);  // [B, 1+d, vocab]
        const std::vector<int64_t> chosen = greedy_tokens(logits);      // [B * (1+d)]
        std::vector<int64_t> still;
        for (size_t k = 0; k < active.size(); ++k) {
            GenerateResult& rb = r[active[k]];
            const int64_t fed = next[k].front();
            int64_t taken = 0;
            for (int64_t j = 0; j <= n_draft; ++j) {
                const int64_t token = chosen[k * static_cast<size_t>(1 + n_draft) + static_cast<size_t>(j)];
                rb.generated.push_back(token);
                ++taken;
                rb.stopped = is_stop(opt, token);
                if (rb.stopped || token != fed ||
                    static_cast<int64_t>(rb.generated.size()) >= opt.max_new_tokens)
                    break;
            }
            // Entries kept: the fed token and the draft copies its confirmed tokens equal.
            cache.truncate(static_cast<int64_t>(k), before[k] + taken);
            if (!rb.stopped && static_cast<int64_t>(rb.generated.size()) < opt.max_new_tokens)
                still.push_back(active[k]);
        }
        active = std::move(still);
    }
}

}  // namespace

std::vector<GenerateResult> generate_greedy_batch(
    const LlamaModel& model, const std::vector<const KVCache*>& caches, const std::vector<int64_t>& prompt,
    const at::Tensor& last_logits, const std::vector<int64_t>& draft, const GenerateOptions& opt) {
    if (opt.max_new_tokens < 0) throw Error("generate: max_new_tokens must not be negative");
    const int64_t B = static_cast<int64_t>(caches.size()), max_new = opt.max_new_tokens;
    if (B == 0) throw Error("generate: no caches to decode");
    if (prompt.empty() && (!last_logits.defined() || last_logits.dim() != 2 || last_logits.size(0) != B))
        throw Error("generate: without a prompt, decoding starts from last logits [" + std::to_string(B) +
                    ", vocab]");
    std::vector<GenerateResult> r(static_cast<size_t>(B));
    if (max_new == 0) return r;
    const auto t0 = Clock::now();
    // Forward the prompt and all but the last draft token: position j's logits then predict draft token j.
    const int64_t n_draft = std::min<int64_t>(static_cast<int64_t>(draft.size()), max_new);
    std::vector<int64_t> feed = prompt;
    if (n_draft > 1) feed.insert(feed.end(), draft.begin(), draft.begin() + (n_draft - 1));
    BatchKVCache batch(
        caches, static_cast<int64_t>(feed.size()) + max_new,
        opt.reconstruct_prefixes ? BatchKVCache::PrefixMode::Reconstruct : BatchKVCache::PrefixMode::Keep);
    at::Tensor predicted;  // [B, max(n_draft, 1), vocab]
    if (feed.empty()) {
        predicted = last_logits.unsqueeze(1);
    } else {
        const int64_t n_logits = prompt.empty() ? n_draft - 1 : std::max<int64_t>(n_draft, 1);
        predicted = model.forward_batch(std::vector<std::vector<int64_t>>(static_cast<size_t>(B), feed),
                                        batch, n_logits, opt.cancel);
        if (prompt.empty()) predicted = at::cat({last_logits.unsqueeze(1), predicted}, 1);
    }
    // Each row takes the draft for as long as its own greedy token agrees (speculative decoding, with another
    // cache's answer as the draft): most rows are done in that one pass. The others forget the draft past
    // their first disagreement and go on from there.
    std::vector<int64_t> active;
    const int64_t per_row = predicted.size(1);
    const std::vector<int64_t> chosen = greedy_tokens(predicted);  // [B * per_row]
    for (int64_t b = 0; b < B; ++b) {
        GenerateResult& rb = r[b];
        for (int64_t j = 0;; ++j) {
            const int64_t token = chosen[static_cast<size_t>(b * per_row + j)];
            rb.generated.push_back(token);
            rb.stopped = is_stop(opt, token);
            if (rb.stopped || j + 1 >= n_draft || token != draft[j]) break;
        }
        if (rb.stopped || static_cast<int64_t>(rb.generated.size()) == max_new) continue;
        batch.truncate(b, static_cast<int64_t>(prompt.size() + rb.generated.size()) - 1);
        active.push_back(b);
    }
    continue_greedy(model, std::move(batch), r, std::move(active), opt);
    const double ms = ms_since(t0);
    for (GenerateResult& rb : r) rb.decode_ms = ms;
    return r;
}

}  // namespace varrate
