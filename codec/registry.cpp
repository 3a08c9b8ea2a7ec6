#include "codec/registry.h"

#include <functional>

#include <fmt/format.h>

#include "codec/adakv_method.h"
#include "codec/expected_attention_method.h"
#include "codec/full_method.h"
#include "codec/kivi_method.h"
#include "codec/kvzip_method.h"
#include "codec/pyramidkv_method.h"
#include "codec/snapkv_method.h"
#include "codec/streamingllm_method.h"
#include "codec/varrate_method.h"
#include "core/base/error.h"

namespace varrate {

namespace {

using Factory =
    std::function<std::unique_ptr<CompressionMethod>(const CodecSettings&, std::shared_ptr<const Basis>)>;

struct Entry {
    const char* name;
    bool needs_basis;
    bool by_default;  // run when no method list is given
    const char* description;
    Factory make;
    MethodProbe probe = MethodProbe::None;
    // What sets the footprint: kappa (one run per budget), its own settings (KIVI's bits: one run, labelled
    // by the footprint it measures), or nothing (the uncompressed reference).
    BudgetRule budget = BudgetRule::Kappa;
};

const std::vector<Entry>& registry() {
    static const std::vector<Entry> entries = {
        {"full", false, true, "no compression (the ceiling)",
         [](const CodecSettings& s, std::shared_ptr<const Basis>) { return std::make_unique<FullMethod>(s); },
         MethodProbe::None, BudgetRule::Uncompressed},
        {"varrate", true, true, "variable-rate low-rank codec, ranks water-filled by SnapKV salience",
         [](const CodecSettings& s, std::shared_ptr<const Basis> b) {
             return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience);
         }},
        {"flat", true, true, "the same codec with uniform ranks (ablation)",
         [](const CodecSettings& s, std::shared_ptr<const Basis> b) {
             return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Uniform);
         }},
        {"varrate:random", true, false,
         "ablation: VarRate's codec, ranks water-filled by i.i.d. random salience",
         [](const CodecSettings& s, std::shared_ptr<const Basis> b) {
             return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                    SalienceSignal::Random, "varrate:random");
         }},
        {"varrate:shuffle", true, false,
         "ablation: VarRate's window salience permuted over positions (its distribution, no meaning)",
         [](const CodecSettings& s, std::shared_ptr<const Basis> b) {
             return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                    SalienceSignal::Shuffle, "varrate:shuffle");
         }},
        {"varrate:position", true, false, "ablation: ranks water-filled by recency (salience t / L)",
         [](const CodecSettings& s, std::shared_ptr<const Basis> b) {
             return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                    SalienceSignal::Position, "varrate:position");
         }},
        {"varrate:oracle", true, false,
         "ablation: ranks water-filled by the actual question's attention over the context (an upper bound)",
         [](const CodecSettings& s, std::shared_ptr<const Basis> b) {
             return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                    SalienceSignal::Question, "varrate:oracle");
         },
         MethodProbe::Question},
        {"varrate:topk", true, false,
         "ablation: binary ranks, the most salient tokens at R and the others at r_min",
         [](const CodecSettings& s, std::shared_ptr<const Basis> b) {
             return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::TopK,
                                                    SalienceSignal::Window, "varrate:topk");
         }},
        {"varrate-kvzip", true, false,
         "VarRate with KVzip's context-reconstruction scores as salience (query-agnostic; a second pass)",
         [](const CodecSettings& s, std::shared_ptr<const Basis> b) {
             return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                    SalienceSignal::Repeat, "varrate-kvzip");
         },
         MethodProbe::Repeat},
        {"varrate-layers", true, false,
         "VarRate with per-layer budgets: one water-filling of the total over every layer's tokens by "
         "salience",
         [](const CodecSettings& s, std::shared_ptr<const Basis> b) {
             return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                    SalienceSignal::Window, "varrate-layers", true);
         }},
        {"varrate-kvzip-layers", true, false,
         "varrate-kvzip with per-layer budgets from one water-filling of its scores over every layer",
         [](const CodecSettings& s, std::shared_ptr<const Basis> b) {
             return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                    SalienceSignal::Repeat, "varrate-kvzip-layers", true);
         },
         MethodProbe::Repeat},
        {"varrate-ea", true, false, "VarRate with Expected Attention's future-query scores as salience",
         [](const CodecSettings& s, std::shared_ptr<const Basis> b) {
             return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                    SalienceSignal::Expected, "varrate-ea");
         }},
        {"varrate-rare", true, false,
         "VarRate with a rank floor for ids rare in the context: a once-only id gets at least the "
         "90th-percentile "
         "salience",
         [](const CodecSettings& s, std::shared_ptr<const Basis> b) {
             return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                    SalienceSignal::RareFloor, "varrate-rare");
         }},
        {"snapkv", false, true, "SnapKV eviction, kvpress scoring (window 64, pool 5)",
         [](const CodecSettings& s, std::shared_ptr<const Basis>) {
             return std::make_unique<SnapKVMethod>(s);
         }},
        {"pyramidkv", false, false,
         "PyramidKV: SnapKV's scores, kept count per layer on a linear depth schedule at SnapKV's mean",
         [](const CodecSettings& s, std::shared_ptr<const Basis>) {
             return std::make_unique<PyramidKVMethod>(s);
         }},
        {"adakv", false, false,
         "Ada-KV over SnapKV: per-head safeguard (20 %), the rest by one top-k over all heads of a layer",
         [](const CodecSettings& s, std::shared_ptr<const Basis>) {
             return std::make_unique<AdaKVMethod>(s);
         }},
        {"streamingllm", false, false, "StreamingLLM: the first 4 tokens (sinks) and the most recent ones",
         [](const CodecSettings& s, std::shared_ptr<const Basis>) {
             return std::make_unique<StreamingLLMMethod>(s);
         }},
        {"expected-attention", false, false,
         "Expected Attention inside Ada-KV: keys scored by the statistics of future queries (epsilon 0.01)",
         [](const CodecSettings& s, std::shared_ptr<const Basis>) {
             return std::make_unique<ExpectedAttentionMethod>(s);
         }},
        {"kvzip", false, false,
         "KVzip: context-reconstruction scores (a second pass), lowest dropped across layers and heads",
         [](const CodecSettings& s, std::shared_ptr<const Basis>) {
             return std::make_unique<KVzipMethod>(s);
         },
         MethodProbe::Repeat},
        {"kivi2", false, false,
         "KIVI 2-bit quantization (keys per channel, values per token, 128 recent exact)",
         [](const CodecSettings& s, std::shared_ptr<const Basis>) {
             return std::make_unique<KiviMethod>(s, 2);
         },
         MethodProbe::None, BudgetRule::OwnSettings},
        {"kivi4", false, false,
         "KIVI 4-bit quantization (keys per channel, values per token, 128 recent exact)",
         [](const CodecSettings& s, std::shared_ptr<const Basis>) {
             return std::make_unique<KiviMethod>(s, 4);
         },
         MethodProbe::None, BudgetRule::OwnSettings},
    };
    return entries;
}

const Entry& find(const std::string& name) {
    for (const Entry& e : registry())
        if (name == e.name) return e;
    throw Error(
        fmt::format("unknown compression method '{}' (known: {})", name, fmt::join(method_names(), ", ")));
}

}  // namespace

std::unique_ptr<CompressionMethod> make_method(const std::string& name, const CodecSettings& settings,
                                               std::shared_ptr<const Basis> basis) {
    const Entry& e = find(name);
    if (e.needs_basis && !basis)
        throw Error(fmt::format("method '{}' needs a basis: calibrate one or pass a basis file", name));
    return e.make(settings, std::move(basis));
}

std::vector<std::string> method_names() {
    std::vector<std::string> names;
    for (const Entry& e : registry()) names.emplace_back(e.name);
    return names;
}

std::vector<std::string> default_method_names() {
    std::vector<std::string> names;
    for (const Entry& e : registry())
        if (e.by_default) names.emplace_back(e.name);
    return names;
}

bool method_needs_basis(const std::string& name) {
    return find(name).needs_basis;
}

std::string method_description(const std::string& name) {
    return find(name).description;
}

MethodProbe method_probe(const std::string& name) {
    return find(name).probe;
}

BudgetRule method_budget_rule(const std::string& name) {
    return find(name).budget;
}

namespace {

// Summaries and records read from disk may name a method this build does not know (one that a later or
// earlier build registered): shown as a budgeted compressor, the common case, rather than refused.
BudgetRule rule_or_kappa(const std::string& name) {
    for (const Entry& e : registry())
        if (name == e.name) return e.budget;
    return BudgetRule::Kappa;
}

}  // namespace

bool method_takes_budget(const std::string& name) {
    return rule_or_kappa(name) == BudgetRule::Kappa;
}

bool method_compresses(const std::string& name) {
    return rule_or_kappa(name) != BudgetRule::Uncompressed;
}

}  // namespace varrate
