#include "codec/settings_table.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"

namespace varrate {

namespace {

CodecSettingSpec row(const char* key, const char* flag, const char* label, const char* help, SettingKind kind,
                     SettingTier tier) {
    CodecSettingSpec s;
    s.key = key;
    s.flag = flag;
    s.label = label;
    s.help = help;
    s.kind = kind;
    s.tier = tier;
    return s;
}

CodecSettingSpec fraction(const char* key, const char* flag, const char* label, const char* help,
                          SettingTier tier, double CodecSettings::*field) {
    CodecSettingSpec s = row(key, flag, label, help, SettingKind::Fraction, tier);
    s.min = 0.0;
    s.max = 1.0;
    s.real = field;
    return s;
}

CodecSettingSpec integer(const char* key, const char* flag, const char* label, const char* help,
                         SettingTier tier, int64_t CodecSettings::*field, int64_t min, int64_t max) {
    CodecSettingSpec s = row(key, flag, label, help, SettingKind::Integer, tier);
    s.min = static_cast<double>(min);
    s.max = static_cast<double>(max);
    s.integer = field;
    return s;
}

CodecSettingSpec choice(const char* key, const char* flag, const char* label, const char* help,
                        SettingTier tier, int64_t CodecSettings::*field, std::vector<int64_t> choices) {
    CodecSettingSpec s = row(key, flag, label, help, SettingKind::Choice, tier);
    s.choices = std::move(choices);
    s.integer = field;
    return s;
}

CodecSettingSpec flag(const char* key, const char* cli_flag, const char* label, const char* help,
                      SettingTier tier, bool CodecSettings::*field) {
    CodecSettingSpec s = row(key, cli_flag, label, help, SettingKind::Flag, tier);
    s.boolean = field;
    return s;
}

CodecSettingSpec list(const char* key, const char* flag, const char* label, const char* help,
                      SettingTier tier, std::vector<double> CodecSettings::*field, double max) {
    CodecSettingSpec s = row(key, flag, label, help, SettingKind::List, tier);
    s.min = 0.0;
    s.max = max;
    s.list = field;
    return s;
}

// Traits a row adds to its kind, read as: model(slider(fraction(...))).
CodecSettingSpec model(CodecSettingSpec s) {
    s.model_default = true;
    return s;
}

CodecSettingSpec slider(CodecSettingSpec s) {
    s.slider = true;
    return s;
}

CodecSettingSpec up_to_dim(CodecSettingSpec s) {
    s.dim_bounded = true;
    return s;
}

CodecSettingSpec added_later(CodecSettingSpec s) {
    s.omit_default = true;
    return s;
}

CodecSettingSpec basis(CodecSettingSpec s) {
    s.shapes_basis = true;
    return s;
}

constexpr int64_t kMaxLength = int64_t{1} << 20;  // more tokens than any capture holds

std::vector<CodecSettingSpec> make_specs() {
    using T = SettingTier;
    using S = CodecSettings;
    return {
        model(slider(fraction("budget", "--budget", "Budget κ",
                              "kappa: fraction of the KV cache kept, in (0, 1]", T::Budget, &S::budget))),
        model(slider(up_to_dim(integer("r_min", "--rmin", "r_min", "rank floor of every coded token",
                                       T::Allocation, &S::r_min, 0, 65536)))),
        model(slider(up_to_dim(integer("rank", "--rank", "Rank R",
                                       "R: basis rank and per-token rank cap (clamped to D)", T::Analysis,
                                       &S::rank, 1, kMaxLength)))),
        basis(model(integer("stride", "--stride", "Stride Δ",
                            "Delta: anchors at 0, Delta, 2 Delta, ... are stored exactly", T::Structural,
                            &S::stride, 1, kMaxLength))),
        basis(model(integer("anchors", "--anchors", "Anchors c",
                            "c: a coded token is predicted by the mean of its c nearest anchors",
                            T::Structural, &S::anchors, 1, 64))),
        basis(model(integer("window", "--window", "Window w", "w: the last w tokens are stored exactly",
                            T::Structural, &S::window, 0, kMaxLength))),
        model(integer("obs_window", "--obs-window", "Obs. window",
                      "w_obs: queries of the last w_obs tokens score salience (SnapKV's window)",
                      T::Structural, &S::obs_window, 1, kMaxLength)),
        integer("pool_kernel", "--pool-kernel", "Pool kernel",
                "SnapKV's smoothing of the window attention (average pool, padding kernel/2)", T::Structural,
                &S::pool_kernel, 1, 255),
        choice(
            "coef_bits", "--coef-bits", "Coefficient bits",
            "bits per stored VarRate/flat coefficient: 2, 3, 4 or 8 quantizes them (groups of 32 along each "
            "token's rank, fp16 scale and minimum; the budget counts bits); 16 keeps the cache precision. "
            "Other methods ignore it (kivi2 / kivi4 have their own bits)",
            T::Allocation, &S::coef_bits, {16, 8, 4, 3, 2}),
        fraction("key_channel_ratio", "--key-channel-ratio", "Key channels pruned",
                 "ThinK (think, snap-think): fraction of each KV head's key channels pruned, int(head_dim * "
                 "ratio) of the lowest-scoring ones; other methods ignore it",
                 T::Allocation, &S::key_channel_ratio),
        list("layer_profile", "--layer-profile", "Per-layer profile",
             "snapkv-per-layer (kvpress's PerLayerCompressionPress over SnapKV): one positive number per "
             "layer, comma-separated; layer l keeps kappa x p_l / mean(p), so the layers keep kappa on "
             "average "
             "(kvpress's ratios r_l are p_l = 1 - r_l at kappa = their mean); empty: kappa everywhere. Other "
             "methods ignore it",
             T::Allocation, &S::layer_profile, 1e6),
        added_later(
            integer("streaming_sink", "--streaming-sink", "Streaming sink",
                    "DuoAttention (duo-attention): the first tokens a streaming head keeps (kvpress's "
                    "on-the-fly pattern: 128); other methods ignore it",
                    T::Allocation, &S::streaming_sink, 0, kMaxLength)),
        added_later(integer("streaming_recent", "--streaming-recent", "Streaming recent",
                            "DuoAttention (duo-attention): the last tokens a streaming head keeps (kvpress's "
                            "on-the-fly pattern: 256); other methods ignore it",
                            T::Allocation, &S::streaming_recent, 0, kMaxLength)),
        added_later(integer(
            "select_tokens", "--select-tokens", "Selective attention tokens",
            "VarRate/flat stores: the coded tokens whose keys a decoding step rebuilds, in whole chunks "
            "chosen per KV head by their landmarks (each chunk's key bounds, stored and charged to the "
            "budget); 0 "
            "rebuilds every coded key every step (exact attention, the reference). Other methods ignore it",
            T::Allocation, &S::select_tokens, 0, kMaxLength)),
        added_later(
            integer("landmark_chunk", "--landmark-chunk", "Landmark chunk",
                    "coded tokens per landmark with --select-tokens > 0 (the channel-wise minimum and "
                    "maximum post-RoPE key per KV head and chunk: 1 / chunk of the full cache's bytes per "
                    "coded token)",
                    T::Allocation, &S::landmark_chunk, 1, 4096)),
        flag("paper_accounting", "--paper-accounting", "Paper accounting (indices free)",
             "charge neither anchor indices nor a self-calibrated basis to the budget (the paper's "
             "accounting; "
             "footprint slightly above kappa, runs labelled \"basis not charged\")",
             T::Analysis, &S::paper_accounting),
        flag(
            "precise_timing", "--precise-timing", "Precise stage timing",
            "wait for the device at every stage boundary so that stage times are real (a host read per stage "
            "on a GPU; changes no number)",
            T::Runtime, &S::precise_timing),
    };
}

}  // namespace

const std::vector<CodecSettingSpec>& codec_setting_specs() {
    static const std::vector<CodecSettingSpec> specs = make_specs();
    return specs;
}

const CodecSettingSpec* find_codec_setting(const std::string& key) {
    for (const CodecSettingSpec& s : codec_setting_specs())
        if (key == s.key) return &s;
    return nullptr;
}

double setting_value(const CodecSettingSpec& spec, const CodecSettings& s) {
    if (spec.list)
        throw Error(fmt::format("internal: the list setting \"{}\" has no single value", spec.key));
    if (spec.real) return s.*(spec.real);
    if (spec.integer) return static_cast<double>(s.*(spec.integer));
    return s.*(spec.boolean) ? 1.0 : 0.0;
}

void set_setting_value(const CodecSettingSpec& spec, CodecSettings& s, double value) {
    if (spec.list)
        throw Error(fmt::format("internal: the list setting \"{}\" has no single value", spec.key));
    if (spec.real)
        s.*(spec.real) = value;
    else if (spec.integer)
        s.*(spec.integer) = static_cast<int64_t>(std::llround(value));
    else
        s.*(spec.boolean) = value != 0.0;
}

bool same_setting(const CodecSettingSpec& spec, const CodecSettings& a, const CodecSettings& b) {
    if (spec.list) return a.*(spec.list) == b.*(spec.list);
    return setting_value(spec, a) == setting_value(spec, b);
}

std::vector<double> parse_setting_list(const CodecSettingSpec& spec, const std::string& text,
                                       const std::string& where) {
    std::vector<double> out;
    if (text.find_first_not_of(" \t") == std::string::npos) return out;
    size_t begin = 0;
    while (true) {
        const size_t end = std::min(text.find(',', begin), text.size());
        const std::string item = text.substr(begin, end - begin);
        const size_t first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
        const std::string trimmed = first == std::string::npos ? "" : item.substr(first, last - first + 1);
        size_t used = 0;
        double v = std::nan("");
        try {
            v = std::stod(trimmed, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (trimmed.empty() || used != trimmed.size() || !setting_violation(spec, v).empty())
            throw Error(fmt::format("{}: \"{}\" entry {} must be {}, got \"{}\"", where, spec.key,
                                    out.size() + 1, setting_violation(spec, std::nan("")), trimmed));
        out.push_back(v);
        if (end == text.size()) break;
        begin = end + 1;
    }
    return out;
}

std::string setting_violation(const CodecSettingSpec& spec, double v) {
    switch (spec.kind) {
        case SettingKind::List:
        case SettingKind::Fraction:
            if (v > spec.min && v <= spec.max) return "";
            return fmt::format("a number in ({:g}, {:g}]", spec.min, spec.max);
        case SettingKind::Integer:
            if (v == std::floor(v) && v >= spec.min && v <= spec.max) return "";
            return fmt::format("an integer in [{:g}, {:g}]", spec.min, spec.max);
        case SettingKind::Choice: {
            for (int64_t c : spec.choices)
                if (v == static_cast<double>(c)) return "";
            std::vector<int64_t> sorted = spec.choices;
            std::sort(sorted.begin(), sorted.end());
            std::string out;
            for (size_t i = 0; i < sorted.size(); ++i)
                out += fmt::format("{}{}", i == 0 ? "" : (i + 1 == sorted.size() ? " or " : ", "), sorted[i]);
            return out;
        }
        case SettingKind::Flag:
            if (v == 0.0 || v == 1.0) return "";
            return "true or false";
    }
    return "";
}

void check_setting(const CodecSettingSpec& spec, double value, const std::string& where) {
    const std::string allowed = setting_violation(spec, value);
    if (!allowed.empty())
        throw Error(fmt::format("{}: \"{}\" must be {}, got {:g}", where, spec.key, allowed, value));
}

void check_budget(double budget, const std::string& where, const std::string& hint) {
    static const CodecSettingSpec& spec = *find_codec_setting("budget");
    if (hint.empty()) return check_setting(spec, budget, where);
    if (!setting_violation(spec, budget).empty())
        throw Error(fmt::format("{}: \"budget\" must be {}, got {:g}; {}", where,
                                setting_violation(spec, budget), budget, hint));
}

void check_codec_settings(const CodecSettings& s, const std::string& where) {
    for (const CodecSettingSpec& spec : codec_setting_specs()) {
        if (!spec.list) {
            check_setting(spec, setting_value(spec, s), where);
            continue;
        }
        const std::vector<double>& values = s.*(spec.list);
        for (size_t i = 0; i < values.size(); ++i)
            if (!setting_violation(spec, values[i]).empty())
                throw Error(fmt::format("{}: \"{}\" entry {} must be {}, got {:g}", where, spec.key, i + 1,
                                        setting_violation(spec, values[i]), values[i]));
    }
}

std::string format_setting(const CodecSettingSpec& spec, const CodecSettings& s) {
    if (spec.list) {
        std::vector<std::string> items;
        for (double v : s.*(spec.list)) items.push_back(fmt::format("{:g}", v));
        return fmt::format("{}", fmt::join(items, ","));
    }
    if (spec.real) return fmt::format("{:g}", s.*(spec.real));
    if (spec.integer) return fmt::format("{}", s.*(spec.integer));
    return s.*(spec.boolean) ? "true" : "false";
}

std::string setting_difference(const CodecSettings& a, const CodecSettings& b, SettingTier from) {
    for (const CodecSettingSpec& spec : codec_setting_specs()) {
        if (spec.tier < from || same_setting(spec, a, b)) continue;
        return fmt::format("{} {} vs {}", spec.key, format_setting(spec, a), format_setting(spec, b));
    }
    return "";
}

SettingTier update_tier(const CodecSettings& a, const CodecSettings& b) {
    SettingTier out = SettingTier::Runtime;
    for (const CodecSettingSpec& spec : codec_setting_specs())
        if (!same_setting(spec, a, b) && spec.tier > out) out = spec.tier;
    return out;
}

const std::vector<double>& default_budget_grid() {
    static const std::vector<double> grid = {0.02, 0.03, 0.05, 0.075, 0.1, 0.125, 0.15,
                                             0.2,  0.25, 0.3,  0.4,   0.5, 0.75};
    return grid;
}

}  // namespace varrate
