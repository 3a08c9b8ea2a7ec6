#include "codec/registry.h"

#include <deque>
#include <functional>

#include <fmt/format.h>

#include "base/error.h"
#include "codec/footprint.h"
#include "codec/methods/adakv_method.h"
#include "codec/methods/chunkkv_method.h"
#include "codec/methods/compactor_method.h"
#include "codec/methods/critical_adakv_method.h"
#include "codec/methods/criticalkv_method.h"
#include "codec/methods/cur_method.h"
#include "codec/methods/duo_attention_method.h"
#include "codec/methods/expected_attention_method.h"
#include "codec/methods/finch_method.h"
#include "codec/methods/full_method.h"
#include "codec/methods/keydiff_method.h"
#include "codec/methods/kivi_method.h"
#include "codec/methods/knorm_method.h"
#include "codec/methods/kvzip_method.h"
#include "codec/methods/lagkv_method.h"
#include "codec/methods/leverage_method.h"
#include "codec/methods/observed_attention_method.h"
#include "codec/methods/pyramidkv_method.h"
#include "codec/methods/random_method.h"
#include "codec/methods/snap_think_method.h"
#include "codec/methods/snapkv_method.h"
#include "codec/methods/snapkv_per_layer_method.h"
#include "codec/methods/snapkv_rerotate_method.h"
#include "codec/methods/streamingllm_method.h"
#include "codec/methods/think_method.h"
#include "codec/methods/tova_method.h"
#include "codec/methods/varrate_method.h"

namespace varrate {

namespace {

constexpr uint32_t kCodecReads = kReadsBudget | kReadsRankFloor | kReadsRank | kReadsStride | kReadsAnchors |
                                 kReadsWindow | kReadsObsWindow | kReadsPool | kReadsCoefBits |
                                 kReadsAccounting;

// Makes a method from its settings, a basis (the low-rank codec's) and the name it was asked for (an alias
// keeps its own name, so that saved sessions and sweeps naming it still match).
using Factory = std::function<std::unique_ptr<CompressionMethod>(
    const CodecSettings&, std::shared_ptr<const Basis>, const std::string&)>;

// A registered method: its traits (what the rest of the program asks about it), how to make it, and, for a
// method whose per-token scores can drive VarRate's ranks, those scores as a salience (registry() then adds
// varrate@<name>, and varrate-layers@<name> when the scores are attention mass, comparable across layers).
struct Entry {
    MethodTraits traits;
    Factory make;
    TokenSalience salience = {};
    bool salience_is_mass = false;
};

// Old names kept so that saved sessions, sweeps and scripts still open: alias -> registered name.
const std::vector<std::pair<std::string, std::string>>& aliases() {
    static const std::vector<std::pair<std::string, std::string>> a = {
        {"varrate-kvzip", "varrate@kvzip"},
        {"varrate-kvzip-layers", "varrate-layers@kvzip"},
        {"varrate-ea", "varrate@expected-attention"},
        {"varrate@snapkv", "varrate"},  // VarRate's own signal is SnapKV's window salience
        {"varrate-layers@snapkv", "varrate-layers"},
    };
    return a;
}

// A method made from its settings alone.
template <class M>
Factory from_settings() {
    return [](const CodecSettings& s, std::shared_ptr<const Basis>, const std::string&) {
        return std::make_unique<M>(s);
    };
}

// A scorer eviction's scores, mean over KV heads, as a salience.
template <class M>
TokenSalience mean_scores() {
    return [](const LayerCapture& c, const CodecSettings& s) {
        return M(s).token_scores(c).to(at::kFloat).mean(0);  // [L]
    };
}

TokenSalience signal_salience(SalienceSignal signal) {
    return
        [signal](const LayerCapture& c, const CodecSettings& s) { return allocation_salience(signal, c, s); };
}

// varrate@<scorer> (and varrate-layers@<scorer>): VarRate's codec with the scorer's salience.
Entry signal_entry(const Entry& scorer, bool across_layers, std::deque<std::string>& text) {
    const std::string prefix = across_layers ? "varrate-layers@" : "varrate@";
    const char* name = text.emplace_back(prefix + scorer.traits.name).c_str();
    const char* description =
        text.emplace_back(fmt::format("VarRate's codec, ranks water-filled by {}'s scores{}",
                                      scorer.traits.name,
                                      across_layers ? ", per-layer budgets from one water-filling of them "
                                                      "over every layer"
                                                    : ""))
            .c_str();
    const TokenSalience salience = scorer.salience;
    return {
        {name, description, MethodFamily::LowRank, true, false, scorer.traits.probe, BudgetRule::Kappa,
         ColourRole::Own, kCodecReads | scorer.traits.reads, BudgetCheck::Codec, scorer.traits.name,
         /*renumbers_positions=*/false,
         (scorer.traits.capture_needs & ~uint32_t{kNeedsAllLayers}) | (across_layers ? kNeedsAllLayers : 0u)},
        [salience, across_layers](const CodecSettings& s, std::shared_ptr<const Basis> b,
                                  const std::string& asked) {
            return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                   SalienceSignal::Scorer, asked, across_layers, salience);
        }};
}

const std::vector<Entry>& registry() {
    static std::deque<std::string> generated_text;  // names and descriptions of the generated entries
    static const std::vector<Entry> entries = [] {
        std::vector<Entry> e = {
            {{"full", "no compression (the ceiling)", MethodFamily::Reference, false, true, MethodProbe::None,
              BudgetRule::Uncompressed, ColourRole::Uncompressed, 0, BudgetCheck::None},
             from_settings<FullMethod>()},
            {{"varrate", "variable-rate low-rank codec, ranks water-filled by SnapKV salience",
              MethodFamily::LowRank, true, true, MethodProbe::None, BudgetRule::Kappa, ColourRole::Method,
              kCodecReads, BudgetCheck::Codec},
             [](const CodecSettings& s, std::shared_ptr<const Basis> b, const std::string& asked) {
                 return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                        SalienceSignal::Window, asked);
             }},
            {{"flat", "the same codec with uniform ranks (ablation)", MethodFamily::LowRank, true, true,
              MethodProbe::None, BudgetRule::Kappa, ColourRole::Ablation, kCodecReads, BudgetCheck::Codec},
             [](const CodecSettings& s, std::shared_ptr<const Basis> b, const std::string&) {
                 return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Uniform);
             }},
            {{"varrate:random", "ablation: VarRate's codec, ranks water-filled by i.i.d. random salience",
              MethodFamily::LowRank, true, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kCodecReads, BudgetCheck::Codec},
             [](const CodecSettings& s, std::shared_ptr<const Basis> b, const std::string&) {
                 return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                        SalienceSignal::Random, "varrate:random");
             }},
            {{"varrate:shuffle",
              "ablation: VarRate's window salience permuted over positions (its distribution, no meaning)",
              MethodFamily::LowRank, true, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kCodecReads, BudgetCheck::Codec},
             [](const CodecSettings& s, std::shared_ptr<const Basis> b, const std::string&) {
                 return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                        SalienceSignal::Shuffle, "varrate:shuffle");
             }},
            {{"varrate:position", "ablation: ranks water-filled by recency (salience t / L)",
              MethodFamily::LowRank, true, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kCodecReads, BudgetCheck::Codec},
             [](const CodecSettings& s, std::shared_ptr<const Basis> b, const std::string&) {
                 return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                        SalienceSignal::Position, "varrate:position");
             }},
            {{"varrate:oracle",
              "ablation: ranks water-filled by the actual question's attention over the context (an upper "
              "bound)",
              MethodFamily::LowRank, true, false, MethodProbe::Question, BudgetRule::Kappa, ColourRole::Own,
              kCodecReads, BudgetCheck::Codec},
             [](const CodecSettings& s, std::shared_ptr<const Basis> b, const std::string&) {
                 return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                        SalienceSignal::Question, "varrate:oracle");
             }},
            {{"varrate:topk", "ablation: binary ranks, the most salient tokens at R and the others at r_min",
              MethodFamily::LowRank, true, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kCodecReads, BudgetCheck::Codec},
             [](const CodecSettings& s, std::shared_ptr<const Basis> b, const std::string&) {
                 return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::TopK,
                                                        SalienceSignal::Window, "varrate:topk");
             }},
            {{"varrate-layers",
              "VarRate with per-layer budgets: one water-filling of the total over every layer's tokens by "
              "salience",
              MethodFamily::LowRank, true, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kCodecReads, BudgetCheck::Codec, nullptr, false, kNeedsAllLayers},
             [](const CodecSettings& s, std::shared_ptr<const Basis> b, const std::string& asked) {
                 return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                        SalienceSignal::Window, asked, true);
             }},
            {{"varrate-rare",
              "VarRate with a rank floor for ids rare in the context: a once-only id gets at least the "
              "90th-percentile "
              "salience",
              MethodFamily::LowRank, true, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kCodecReads, BudgetCheck::Codec, nullptr, false, kNeedsTokenIds},
             [](const CodecSettings& s, std::shared_ptr<const Basis> b, const std::string&) {
                 return std::make_unique<VarRateMethod>(s, std::move(b), RankAllocation::Salience,
                                                        SalienceSignal::RareFloor, "varrate-rare");
             }},
            {{"snapkv", "SnapKV eviction, kvpress scoring (window 64, pool 5)", MethodFamily::Eviction, false,
              true, MethodProbe::None, BudgetRule::Kappa, ColourRole::Eviction,
              kReadsBudget | kReadsObsWindow | kReadsPool, BudgetCheck::SnapKVCount},
             from_settings<SnapKVMethod>()},
            {{"snapkv-rerotate",
              "KeyRerotation over SnapKV: SnapKV's tokens, keys rotated to positions 0..n-1; decoding "
              "continues at n",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget | kReadsObsWindow | kReadsPool, BudgetCheck::SnapKVCount, nullptr,
              /*renumbers_positions=*/true},
             from_settings<SnapKVRerotateMethod>()},
            {{"snapkv-per-layer",
              "PerLayerCompression over SnapKV: SnapKV with each layer's budget from the layer profile "
              "(kappa x p_l / mean p)",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget | kReadsObsWindow | kReadsPool | kReadsLayerProfile, BudgetCheck::None},
             from_settings<SnapKVPerLayerMethod>()},
            {{"finch",
              "FINCH: SnapKV with the question as its window (query-aware; else the last window), no "
              "pooling, "
              "keys rotated to positions 0..n-1",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget | kReadsObsWindow, BudgetCheck::None, nullptr, /*renumbers_positions=*/true},
             from_settings<FinchMethod>(),
             mean_scores<FinchMethod>()},
            {{"pyramidkv",
              "PyramidKV: SnapKV's scores, kept count per layer on a linear depth schedule at SnapKV's mean",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget | kReadsObsWindow | kReadsPool, BudgetCheck::DepthSchedule},
             from_settings<PyramidKVMethod>()},
            {{"adakv",
              "Ada-KV over SnapKV: per-head safeguard (20 %), the rest by one top-k over all heads of a "
              "layer",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget | kReadsObsWindow | kReadsPool, BudgetCheck::SnapKVCount},
             from_settings<AdaKVMethod>()},
            {{"streamingllm", "StreamingLLM: the first 4 tokens (sinks) and the most recent ones",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget, BudgetCheck::None},
             from_settings<StreamingLLMMethod>(),
             mean_scores<StreamingLLMMethod>()},
            {{"knorm", "Knorm: per KV head, the keys of smallest L2 norm kept (kvpress's KnormPress)",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget, BudgetCheck::None},
             from_settings<KnormMethod>(),
             mean_scores<KnormMethod>()},
            {{"keydiff",
              "KeyDiff: per KV head, the keys least like the head's mean key direction kept (cosine)",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget, BudgetCheck::None},
             from_settings<KeyDiffMethod>(),
             mean_scores<KeyDiffMethod>()},
            {{"tova",
              "TOVA: tokens ranked by the last token's attention over all heads, one ranking for every KV "
              "head",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget, BudgetCheck::None},
             from_settings<TovaMethod>(),
             mean_scores<TovaMethod>(),
             /*salience_is_mass=*/true},
            {{"random", "Random: per KV head, uniform random scores (kvpress's RandomPress, seed 0); a floor",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget, BudgetCheck::None},
             from_settings<RandomMethod>(),
             mean_scores<RandomMethod>()},
            {{"lagkv",
              "LagKV: tokens ranked within partitions of 128 by their keys' and values' spread against the "
              "next "
              "partition's range; sinks and the last partition kept",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget, BudgetCheck::None},
             from_settings<LagKVMethod>(),
             mean_scores<LagKVMethod>()},
            {{"cur",
              "CurDKV: key x value squared norms, each normalised in windows of 16 (approximate leverage); 4 "
              "sinks kept",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget, BudgetCheck::None},
             from_settings<CURMethod>(),
             mean_scores<CURMethod>()},
            {{"observed-attention",
              "ObservedAttention (H2O): tokens ranked by the attention every prefill query pays them (an "
              "extra pass)",
              MethodFamily::Eviction, false, false, MethodProbe::Observed, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget, BudgetCheck::None},
             from_settings<ObservedAttentionMethod>(),
             mean_scores<ObservedAttentionMethod>(),
             /*salience_is_mass=*/true},
            {{"leverage",
              "Leverage: per KV head, the pre-RoPE keys of highest approximate leverage (outlier directions; "
              "a seeded Gaussian sketch of 48)",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget, BudgetCheck::None},
             from_settings<LeverageMethod>(),
             mean_scores<LeverageMethod>()},
            {{"compactor",
              "Compactor: 8 + 4 sinks kept, the rest by leverage (weighted by the compression ratio) plus "
              "non-causal chunked attention x ||v|| (an extra pass)",
              MethodFamily::Eviction, false, false, MethodProbe::NonCausal, BudgetRule::Kappa,
              ColourRole::Own, kReadsBudget, BudgetCheck::None},
             from_settings<CompactorMethod>(),
             mean_scores<CompactorMethod>()},
            {{"chunkkv",
              "ChunkKV over SnapKV: whole chunks of 20 tokens kept by their mean SnapKV score, the same for "
              "every KV head",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget | kReadsObsWindow | kReadsPool, BudgetCheck::None},
             from_settings<ChunkKVMethod>()},
            {{"criticalkv",
              "CriticalKV over SnapKV: half of each head's tokens by SnapKV's score, the rest by score x "
              "||W_o v||_1 (what the value adds through the output projection)",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget | kReadsObsWindow | kReadsPool, BudgetCheck::None},
             from_settings<CriticalKVMethod>()},
            {{"critical-adakv",
              "CriticalAdaKV over SnapKV: Ada-KV's budgets per head, CriticalKV's two stages within each",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget | kReadsObsWindow | kReadsPool, BudgetCheck::SnapKVCount},
             from_settings<CriticalAdaKVMethod>()},
            {{"expected-attention",
              "Expected Attention inside Ada-KV: keys scored by the statistics of future queries (epsilon "
              "0.01)",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget, BudgetCheck::None, nullptr, false, kNeedsQueryStats},
             from_settings<ExpectedAttentionMethod>(),
             signal_salience(SalienceSignal::Expected)},
            {{"kvzip",
              "KVzip: context-reconstruction scores (a second pass), lowest dropped across layers and heads",
              MethodFamily::Eviction, false, false, MethodProbe::Repeat, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget | kReadsObsWindow, BudgetCheck::None, nullptr, false, kNeedsAllLayers},
             from_settings<KVzipMethod>(),
             signal_salience(SalienceSignal::Repeat),
             /*salience_is_mass=*/true},
            {{"duo-attention",
              "DuoAttention: every token in retrieval heads, the first 128 and last 256 (the streaming "
              "settings) in streaming heads; "
              "the heads whose attention on the document's mean query and key accumulates fastest stream, "
              "across layers",
              MethodFamily::Eviction, false, false, MethodProbe::None, BudgetRule::Kappa, ColourRole::Own,
              kReadsBudget | kReadsStreaming, BudgetCheck::None, nullptr, false,
              kNeedsQueryStats | kNeedsAllLayers},
             from_settings<DuoAttentionMethod>()},
            {{"think",
              "ThinK: every token kept, each KV head's lowest-scoring key channels pruned (the window "
              "queries' q^2 times the keys' k^2); footprint set by the key channel ratio",
              MethodFamily::ChannelPruning, false, false, MethodProbe::None, BudgetRule::OwnSettings,
              ColourRole::Own, kReadsObsWindow | kReadsKeyChannels, BudgetCheck::None},
             from_settings<ThinKMethod>()},
            {{"snap-think",
              "SnapKV then ThinK (kvpress's ComposedPress): key channels pruned by the ratio, SnapKV keeps "
              "what fits in kappa",
              MethodFamily::ChannelPruning, false, false, MethodProbe::None, BudgetRule::Kappa,
              ColourRole::Own, kReadsBudget | kReadsObsWindow | kReadsPool | kReadsKeyChannels,
              BudgetCheck::None},
             from_settings<SnapThinKMethod>()},
            {{"kivi2", "KIVI 2-bit quantization (keys per channel, values per token, 128 recent exact)",
              MethodFamily::Quantization, false, false, MethodProbe::None, BudgetRule::OwnSettings,
              ColourRole::Own, 0, BudgetCheck::None},
             [](const CodecSettings& s, std::shared_ptr<const Basis>, const std::string&) {
                 return std::make_unique<KiviMethod>(s, 2);
             }},
            {{"kivi4", "KIVI 4-bit quantization (keys per channel, values per token, 128 recent exact)",
              MethodFamily::Quantization, false, false, MethodProbe::None, BudgetRule::OwnSettings,
              ColourRole::Own, 0, BudgetCheck::None},
             [](const CodecSettings& s, std::shared_ptr<const Basis>, const std::string&) {
                 return std::make_unique<KiviMethod>(s, 4);
             }},
        };
        // Every scorer's twins, after the presses.
        const size_t n = e.size();
        for (size_t i = 0; i < n; ++i)
            if (e[i].salience) e.push_back(signal_entry(e[i], false, generated_text));
        for (size_t i = 0; i < n; ++i)
            if (e[i].salience && e[i].salience_is_mass) e.push_back(signal_entry(e[i], true, generated_text));
        return e;
    }();
    return entries;
}

const Entry* find_entry(const std::string& name) {
    for (const Entry& e : registry())
        if (name == e.traits.name) return &e;
    for (const auto& [alias, registered] : aliases())
        if (name == alias) return find_entry(registered);
    return nullptr;
}

const Entry& find(const std::string& name) {
    if (const Entry* e = find_entry(name)) return *e;
    throw Error(
        fmt::format("unknown compression method '{}' (known: {})", name, fmt::join(method_names(), ", ")));
}

}  // namespace

std::string to_string(MethodFamily f) {
    switch (f) {
        case MethodFamily::Reference:
            return "reference";
        case MethodFamily::LowRank:
            return "low-rank";
        case MethodFamily::Eviction:
            return "eviction";
        case MethodFamily::ChannelPruning:
            return "channel pruning";
        case MethodFamily::Quantization:
            return "quantization";
    }
    return "?";
}

std::string method_group(const MethodTraits& traits) {
    if (traits.signal_of) return "VarRate by signal";
    return to_string(traits.family);
}

std::vector<MethodGroup> methods_by_group() {
    std::vector<MethodGroup> groups;
    for (const char* g :
         {"reference", "low-rank", "VarRate by signal", "eviction", "channel pruning", "quantization"}) {
        MethodGroup group{g, {}};
        for (const Entry& e : registry())
            if (method_group(e.traits) == group.name) group.methods.emplace_back(e.traits.name);
        if (!group.methods.empty()) groups.push_back(std::move(group));
    }
    return groups;
}

const MethodTraits* find_method_traits(const std::string& name) {
    const Entry* e = find_entry(name);
    return e ? &e->traits : nullptr;
}

const MethodTraits& method_traits(const std::string& name) {
    return find(name).traits;
}

std::unique_ptr<CompressionMethod> make_method(const std::string& name, const CodecSettings& settings,
                                               std::shared_ptr<const Basis> basis) {
    const Entry& e = find(name);
    if (e.traits.needs_basis && !basis)
        throw Error(fmt::format("method '{}' needs a basis: calibrate one or pass a basis file", name));
    return e.make(settings, std::move(basis), name);
}

std::vector<std::string> method_names() {
    std::vector<std::string> names;
    for (const Entry& e : registry()) names.emplace_back(e.traits.name);
    return names;
}

std::vector<std::string> default_method_names() {
    std::vector<std::string> names;
    for (const Entry& e : registry())
        if (e.traits.by_default) names.emplace_back(e.traits.name);
    return names;
}

const std::string& reference_method_name() {
    static const std::string name = [] {
        for (const Entry& e : registry())
            if (e.traits.budget == BudgetRule::Uncompressed) return std::string(e.traits.name);
        throw Error("internal: no uncompressed reference method is registered");
    }();
    return name;
}

const std::string& method_with_role(ColourRole role) {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v(static_cast<size_t>(ColourRole::Own) + 1);  // one per role
        for (const Entry& e : registry())
            if (v[static_cast<size_t>(e.traits.colour)].empty() && e.traits.colour != ColourRole::Own)
                v[static_cast<size_t>(e.traits.colour)] = e.traits.name;
        return v;
    }();
    const std::string& name = names.at(static_cast<size_t>(role));
    if (name.empty()) throw Error("internal: no method is registered with that colour role");
    return name;
}

std::string registered_method_name(const std::string& name) {
    return find(name).traits.name;
}

bool method_needs_basis(const std::string& name) {
    return find(name).traits.needs_basis;
}

std::string method_description(const std::string& name) {
    return find(name).traits.description;
}

MethodProbe method_probe(const std::string& name) {
    return find(name).traits.probe;
}

BudgetRule method_budget_rule(const std::string& name) {
    return find(name).traits.budget;
}

void check_budget_feasible(const std::string& name, const CodecSettings& settings, int64_t n_tokens,
                           int64_t n_layer, int64_t dim, int64_t element_size) {
    switch (find(name).traits.budget_check) {
        case BudgetCheck::None:
            return;
        case BudgetCheck::SnapKVCount:  // Ada-KV keeps SnapKV's count per head on average
            snapkv_kept_tokens(settings, n_tokens, name);
            return;
        case BudgetCheck::DepthSchedule:  // the schedule's counts fall from layer 0 to the last
            for (int64_t layer : {int64_t{0}, n_layer - 1})
                PyramidKVMethod::layer_kept_tokens(settings, n_tokens, n_layer, layer);
            return;
        case BudgetCheck::Codec:
            plan_codec_budget(settings, n_tokens, dim, element_size, name);
            return;
    }
}

// Summaries and records read from disk may name a method this build does not know (one that a later or
// earlier build registered): shown as a budgeted compressor, the common case, rather than refused.
bool method_takes_budget(const std::string& name) {
    const Entry* e = find_entry(name);
    return !e || e->traits.budget == BudgetRule::Kappa;
}

int64_t method_decode_position(const std::string& name, int64_t next_position, int64_t first_layer_entries) {
    const Entry* e = find_entry(name);
    return e && e->traits.renumbers_positions ? first_layer_entries : next_position;
}

bool method_compresses(const std::string& name) {
    const Entry* e = find_entry(name);
    return !e || e->traits.budget != BudgetRule::Uncompressed;
}

}  // namespace varrate
