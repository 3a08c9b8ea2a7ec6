#pragma once
// Name -> method and its traits. Adding a method = one file pair + one entry in registry.cpp's table; what
// makes a method different (its family, budget rule, feasibility check, the settings it reads, its colour
// role, its extra pass) is in that entry, so nothing outside codec/ tests a method's name.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codec/basis.h"
#include "codec/method.h"

namespace varrate {

// Throws Error for an unknown name (listing the known ones) or a missing basis where one is needed. A name
// may be an old one kept as an alias (varrate-kvzip is varrate@kvzip): the method then reports that name.
std::unique_ptr<CompressionMethod> make_method(const std::string& name, const CodecSettings& settings,
                                               std::shared_ptr<const Basis> basis = nullptr);
std::vector<std::string> method_names();  // in registry order: full, varrate, flat, snapkv, ... (no aliases)
// What runs when no method list is given: full, varrate, flat, snapkv (the quantization baselines kivi2 and
// kivi4 have a footprint set by their bits, not by kappa, and are asked for by name).
std::vector<std::string> default_method_names();
// The registered name a name stands for: itself, or what an old name kept as an alias now is; throws Error
// for an unknown name.
std::string registered_method_name(const std::string& name);
bool method_needs_basis(const std::string& name);
std::string method_description(const std::string& name);

// What a method reads beyond the prefill capture (core/probe.h runs the extra pass before its analysis).
enum class MethodProbe {
    None,
    Question,   // the question's attention over the context (varrate:oracle)
    Repeat,     // KVzip's context-reconstruction scores (kvzip, varrate@kvzip)
    Observed,   // every prefill query's attention over the context (observed-attention: H2O)
    NonCausal,  // every prefill query's non-causal attention within its chunk (compactor)
};
MethodProbe method_probe(const std::string& name);

// What sets a method's footprint. Sweeps (niah, eval), compare, rd and the app run a Kappa method once per
// budget and every other one once, labelled by its measured footprint.
enum class BudgetRule {
    Kappa,         // the budget kappa (varrate, flat, snapkv, ...)
    OwnSettings,   // its own settings, whatever kappa says (kivi2, kivi4: the bits)
    Uncompressed,  // nothing is compressed (full, the reference)
};
BudgetRule method_budget_rule(const std::string& name);  // throws Error for an unknown name, as make_method

enum class MethodFamily { Reference, LowRank, Eviction, ChannelPruning, Quantization };
// "reference", "low-rank", "eviction", "channel pruning", "quantization"
std::string to_string(MethodFamily f);

// How the views colour a method: VarRate's own colour, that of its flat ablation (what VarRate is compared
// with), the uncompressed reference's, the eviction baseline's (SnapKV), or a hue of its own.
enum class ColourRole { Method, Ablation, Uncompressed, Eviction, Own };  // Own last (method_with_role)

// What refuses a budget before any work (the CLI checks every method before a run): nothing, the codec's
// plan (B, anchors, metadata: codec/footprint.h), SnapKV's kept count, or PyramidKV's depth schedule.
enum class BudgetCheck { None, Codec, SnapKVCount, DepthSchedule };

// The CodecSettings fields a method reads (bits of MethodTraits::reads): what a view of its settings lists.
enum MethodReads : uint32_t {
    kReadsBudget = 1u << 0,
    kReadsRankFloor = 1u << 1,
    kReadsRank = 1u << 2,
    kReadsStride = 1u << 3,
    kReadsAnchors = 1u << 4,
    kReadsWindow = 1u << 5,
    kReadsObsWindow = 1u << 6,
    kReadsPool = 1u << 7,
    kReadsCoefBits = 1u << 8,
    kReadsAccounting = 1u << 9,
    kReadsKeyChannels = 1u << 10,
    kReadsLayerProfile = 1u << 11,
    kReadsStreaming = 1u << 12,  // streaming_sink, streaming_recent
};

// What a method reads of a layer's capture beyond its keys, values, window queries, RoPE tables and output
// projection. The runtime's prefill captures all of it; a capture made elsewhere (the Python package's
// kvpress hook) computes these only for the methods that read them.
enum MethodCaptureNeeds : uint32_t {
    kNeedsQueryStats = 1u << 0,  // LayerCapture::query_mean / query_cov / query_mean_all (Expected Attention,
                                 // DuoAttention)
    kNeedsTokenIds = 1u << 1,    // LayerCapture::token_ids (varrate-rare)
    // Not a capture field: the method shares kappa across layers (CompressionMethod::layer_budgets), so no
    // layer is allocated before every layer has been analysed.
    kNeedsAllLayers = 1u << 2,
};

struct MethodTraits {
    const char* name;
    const char* description;
    MethodFamily family;
    bool needs_basis;  // a calibrated (or self-calibrated) basis: the low-rank codec
    bool by_default;   // run when no method list is given
    MethodProbe probe;
    // What sets the footprint: kappa (one run per budget), its own settings (KIVI's bits: one run, labelled
    // by the footprint it measures), or nothing (the uncompressed reference).
    BudgetRule budget;
    ColourRole colour;
    uint32_t reads;  // MethodReads bits
    BudgetCheck budget_check;
    // varrate@<method>: the method whose scores water-fill the ranks; null for every other entry.
    const char* signal_of = nullptr;
    // The kept keys are rotated to positions 0..n-1 (kvpress's KeyRerotationPress), so decoding continues at
    // position n, the kept count, instead of after the context (method_decode_position).
    bool renumbers_positions = false;
    uint32_t capture_needs = 0;  // MethodCaptureNeeds bits
};

// How `varrate methods` and the app group the methods: "reference", "low-rank" (VarRate, flat and their
// ablations), "VarRate by signal" (varrate@<method>), "eviction", "quantization"; in that order.
std::string method_group(const MethodTraits& traits);
struct MethodGroup {
    std::string name;
    std::vector<std::string> methods;  // registry order
};
// The registered methods by group, in the order above; groups without a method left out.
std::vector<MethodGroup> methods_by_group();
const MethodTraits& method_traits(const std::string& name);  // throws Error for an unknown name
// The same, or null for a name this build does not know (read from another build's records).
const MethodTraits* find_method_traits(const std::string& name);
// The uncompressed reference every comparison is made against ("full"): the BudgetRule::Uncompressed entry.
const std::string& reference_method_name();
// The method a view shows first and the one it compares with (varrate and flat): the entries with colour
// role Method and Ablation.
const std::string& method_with_role(ColourRole role);
// Throws (InfeasibleBudget or Error, naming the method) when `settings` cannot be met at n_tokens on a model
// of n_layer layers and D = dim cache scalars per token of element_size bytes; the method's BudgetCheck.
void check_budget_feasible(const std::string& name, const CodecSettings& settings, int64_t n_tokens,
                           int64_t n_layer, int64_t dim, int64_t element_size);
// BudgetRule::Kappa / not BudgetRule::Uncompressed; a name this build does not know (read from another
// build's records) counts as a budgeted compressor.
bool method_takes_budget(const std::string& name);
// Where decoding continues after `name`'s cache of a context that ends before next_position and whose first
// layer holds first_layer_entries: next_position, or the entries for a method that renumbers positions.
int64_t method_decode_position(const std::string& name, int64_t next_position, int64_t first_layer_entries);
bool method_compresses(const std::string& name);

}  // namespace varrate
