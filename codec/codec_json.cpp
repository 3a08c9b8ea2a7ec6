#include "codec/codec_json.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "base/json_field.h"
#include "codec/settings_table.h"

namespace varrate {

namespace {

// Per-token vectors: NaN/inf become null (what nlohmann writes for them anyway), and read back as NaN.
nlohmann::json float_vector_json(const at::Tensor& t) {
    if (!t.defined()) return nullptr;
    const at::Tensor c = t.to(at::kCPU, at::kFloat).contiguous();
    const float* p = c.data_ptr<float>();
    nlohmann::json out = nlohmann::json::array();
    for (int64_t i = 0; i < c.numel(); ++i)
        out.push_back(std::isfinite(p[i]) ? nlohmann::json(p[i]) : nullptr);
    return out;
}

nlohmann::json long_vector_json(const at::Tensor& t) {
    if (!t.defined()) return nullptr;
    const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
    const int64_t* p = c.data_ptr<int64_t>();
    return std::vector<int64_t>(p, p + c.numel());
}

at::Tensor float_tensor(const nlohmann::json& j) {
    if (j.is_null()) return {};
    std::vector<float> v;
    v.reserve(j.size());
    constexpr float kInf = std::numeric_limits<float>::infinity();
    for (const auto& x : j) {
        // A double beyond float's range becomes an infinity (the cast alone is undefined behaviour there).
        const double d = x.is_number() ? x.get<double>() : std::numeric_limits<double>::quiet_NaN();
        v.push_back(std::fabs(d) > std::numeric_limits<float>::max()
                        ? std::copysign(kInf, static_cast<float>(d))
                        : static_cast<float>(d));
    }
    return at::tensor(v, at::kFloat);
}

// Thrown for integers out of int64's range (get<> casts floats unchecked); read as malformed diagnostics.
struct OutOfRange {};

std::vector<int64_t> long_vector(const nlohmann::json& j) {
    if (!detail::json_value_fits<std::vector<int64_t>>(j)) throw OutOfRange{};
    return j.get<std::vector<int64_t>>();
}

at::Tensor long_tensor(const nlohmann::json& j) {
    if (j.is_null()) return {};
    return at::tensor(long_vector(j), at::kLong);
}

}  // namespace

nlohmann::json to_json(const CodecSettings& s) {
    nlohmann::json j = nlohmann::json::object();
    const CodecSettings defaults;
    for (const CodecSettingSpec& spec : codec_setting_specs()) {
        if (spec.omit_default && same_setting(spec, s, defaults)) continue;
        if (spec.list) {
            // Written only when set, so that settings, sweep identities and references made before the row
            // existed read the same.
            if (!(s.*(spec.list)).empty()) j[spec.key] = s.*(spec.list);
        } else if (spec.real)
            j[spec.key] = s.*(spec.real);
        else if (spec.integer)
            j[spec.key] = s.*(spec.integer);
        else
            j[spec.key] = s.*(spec.boolean);
    }
    return j;
}

CodecSettings codec_settings_from_json(const nlohmann::json& j, const std::string& where,
                                       const CodecSettings& base, const std::vector<std::string>& ignored) {
    if (!j.is_object()) throw Error(where + ": expected a JSON object of codec settings");
    CodecSettings s = base;
    for (const auto& item : j.items()) {
        const std::string& key = item.key();
        const nlohmann::json& value = item.value();
        if (std::find(ignored.begin(), ignored.end(), key) != ignored.end()) continue;
        const CodecSettingSpec* spec = find_codec_setting(key);
        if (!spec) {
            std::vector<std::string> known;
            for (const CodecSettingSpec& f : codec_setting_specs()) known.push_back(f.key);
            known.insert(known.end(), ignored.begin(), ignored.end());
            throw Error(
                fmt::format("{}: unknown field \"{}\" (known: {})", where, key, fmt::join(known, ", ")));
        }
        if (spec->list) {
            std::vector<double> values;
            if (value.is_array())
                for (const nlohmann::json& v : value) {
                    if (!v.is_number() || !setting_violation(*spec, v.get<double>()).empty())
                        throw Error(fmt::format("{}: \"{}\" entry {} must be {}, got {}", where, key,
                                                values.size() + 1, setting_violation(*spec, std::nan("")),
                                                v.dump()));
                    values.push_back(v.get<double>());
                }
            else
                throw Error(fmt::format("{}: \"{}\" must be an array of numbers in (0, {:g}], got {}", where,
                                        key, spec->max, value.dump()));
            s.*(spec->list) = std::move(values);
            continue;
        }
        // The JSON type first (an integer setting given 2.5 or "4" is named as such), then the table's range.
        const bool typed = spec->kind == SettingKind::Flag       ? value.is_boolean()
                           : spec->kind == SettingKind::Fraction ? value.is_number()
                                                                 : value.is_number_integer();
        const double v = !typed               ? 0.0
                         : value.is_boolean() ? (value.get<bool>() ? 1.0 : 0.0)
                                              : value.get<double>();
        if (!typed || !setting_violation(*spec, v).empty()) {
            const std::string allowed = setting_violation(*spec, typed ? v : std::nan(""));
            throw Error(fmt::format("{}: \"{}\" must be {}, got {}", where, key,
                                    allowed.empty() ? "a number" : allowed, value.dump()));
        }
        set_setting_value(*spec, s, v);
    }
    return s;
}

nlohmann::json to_json(const LayerDiagnostics& d, bool per_token) {
    nlohmann::json j = {
        {"layer", d.layer},
        {"method", d.method},
        {"n_tokens", d.n_tokens},
        {"dim", d.dim},
        {"budget_B", d.budget_B},
        {"sum_ranks", d.sum_ranks},
        {"n_exact", d.n_exact},
        {"n_coded", d.n_coded},
        {"min_rank", d.min_rank},
        {"max_rank", d.max_rank},
        {"mean_rank", d.mean_rank},
        {"floor_share", d.floor_share},
        {"index_bits", d.index_bits},
        {"set_bits", d.set_bits},
        {"rank_bits", d.rank_bits},
        {"basis_bytes", d.basis_bytes},
        {"stored_bytes", d.stored_bytes},
        {"full_bytes", d.full_bytes},
        {"footprint", d.footprint},
        {"mean_rel_error", d.mean_rel_error},
        {"mean_quant_error", d.mean_quant_error},
        {"coef_bits", d.coef_bits},
        {"schedule_fallback", d.schedule_fallback},
        {"weighted_rel_error", d.weighted_rel_error},
        {"attn_output_error", d.attn_output_error},
        {"timing_ms",
         {{"anchor_search", d.timing.anchor_search},
          {"salience", d.timing.salience},
          {"water_filling", d.timing.water_filling},
          {"projection", d.timing.projection},
          {"reconstruction", d.timing.reconstruction},
          {"total", d.timing.total()}}},
    };
    if (per_token) {
        j["salience"] = float_vector_json(d.salience);
        j["salience_norm"] = float_vector_json(d.salience_norm);
        j["rank"] = long_vector_json(d.rank);
        j["exact"] = long_vector_json(d.exact);
        j["rel_error"] = float_vector_json(d.rel_error);
        if (d.kept.defined()) {
            j["kept_shape"] = d.kept.sizes().vec();
            j["kept"] = long_vector_json(d.kept.reshape({-1}));
        }
    }
    return j;
}

LayerDiagnostics layer_diagnostics_from_json(const nlohmann::json& j, const std::string& where) {
    LayerDiagnostics d;
    d.method = json_field<std::string>(j, "method", where, "");
    d.layer = json_field<int64_t>(j, "layer", where, 0);
    d.n_tokens = json_field<int64_t>(j, "n_tokens", where, 0);
    d.dim = json_field<int64_t>(j, "dim", where, 0);
    d.budget_B = json_field<int64_t>(j, "budget_B", where, 0);
    d.sum_ranks = json_field<int64_t>(j, "sum_ranks", where, 0);
    d.n_exact = json_field<int64_t>(j, "n_exact", where, 0);
    d.n_coded = json_field<int64_t>(j, "n_coded", where, 0);
    d.min_rank = json_field<int64_t>(j, "min_rank", where, 0);
    d.max_rank = json_field<int64_t>(j, "max_rank", where, 0);
    d.mean_rank = json_field<double>(j, "mean_rank", where, 0);
    d.floor_share = json_field<double>(j, "floor_share", where, 0);
    // Runs saved before the indices were packed name the bytes of an int16 / int32 index.
    d.schedule_fallback = json_field<bool>(j, "schedule_fallback", where, false);
    d.index_bits = j.contains("index_bits") ? json_field<int64_t>(j, "index_bits", where, 0)
                                            : 8 * json_field<int64_t>(j, "index_bytes", where, 0);
    // Runs saved before anchor sets and unstored ranks have neither field (their sets were ordinals).
    d.set_bits = json_field<int64_t>(j, "set_bits", where, 0);
    d.rank_bits = json_field<int64_t>(j, "rank_bits", where, 0);
    d.basis_bytes = json_field<int64_t>(j, "basis_bytes", where, 0);
    d.stored_bytes = json_field<int64_t>(j, "stored_bytes", where, 0);
    d.full_bytes = json_field<int64_t>(j, "full_bytes", where, 0);
    d.footprint = json_field<double>(j, "footprint", where, 0);
    d.mean_rel_error = json_field<double>(j, "mean_rel_error", where, 0);
    d.mean_quant_error = json_field<double>(j, "mean_quant_error", where, 0);
    d.coef_bits = json_field<int64_t>(j, "coef_bits", where, 0);
    d.weighted_rel_error = json_field<double>(j, "weighted_rel_error", where, -1);
    d.attn_output_error = json_field<double>(j, "attn_output_error", where, -1);
    if (j.contains("timing_ms")) {
        const auto& t = j["timing_ms"];
        const std::string w = where + " timing_ms";
        d.timing.anchor_search = json_field<double>(t, "anchor_search", w, 0);
        d.timing.salience = json_field<double>(t, "salience", w, 0);
        d.timing.water_filling = json_field<double>(t, "water_filling", w, 0);
        d.timing.projection = json_field<double>(t, "projection", w, 0);
        d.timing.reconstruction = json_field<double>(t, "reconstruction", w, 0);
    }
    try {
        if (j.contains("salience")) d.salience = float_tensor(j["salience"]);
        if (j.contains("salience_norm")) d.salience_norm = float_tensor(j["salience_norm"]);
        if (j.contains("rank")) d.rank = long_tensor(j["rank"]);
        if (j.contains("exact") && !j["exact"].is_null()) d.exact = long_tensor(j["exact"]).to(at::kBool);
        if (j.contains("rel_error")) d.rel_error = float_tensor(j["rel_error"]);
        if (j.contains("kept") && j.contains("kept_shape")) {
            const at::Tensor kept = long_tensor(j["kept"]);
            const std::vector<int64_t> shape = long_vector(j["kept_shape"]);
            // Checked here: LibTorch's own shape error is not a c10::Error in every build (Debian's 1.13
            // throws std::runtime_error from view).
            int64_t n = 1;
            bool valid = kept.defined();
            for (int64_t s : shape) valid = valid && s >= 0 && !__builtin_mul_overflow(n, s, &n);
            if (!valid || n != kept.numel())
                throw Error(where + ": per-token diagnostics have inconsistent shapes");
            d.kept = kept.view(shape).to(at::kBool);
        }
    } catch (const nlohmann::json::exception&) {
        throw Error(where + ": per-token diagnostics are malformed");
    } catch (const OutOfRange&) {
        throw Error(where + ": per-token diagnostics are malformed");
    } catch (const c10::Error&) {
        throw Error(where + ": per-token diagnostics have inconsistent shapes");
    }
    for (const at::Tensor* t : {&d.salience, &d.salience_norm, &d.rank, &d.exact, &d.rel_error})
        if (t->defined() && t->numel() != d.n_tokens)
            throw Error(fmt::format("{}: a per-token vector has {} entries for n_tokens {}", where,
                                    t->numel(), d.n_tokens));
    return d;
}

nlohmann::json to_json(const BasisInfo& info) {
    return {{"model_fingerprint", info.model_fingerprint},
            {"dim", info.dim},
            {"rank", info.rank},
            {"stride", info.stride},
            {"anchors", info.anchors},
            {"window", info.window},
            {"calibration_tokens", info.calibration_tokens},
            {"self_calibrated", info.self_calibrated}};
}

BasisInfo basis_info_from_json(const nlohmann::json& j, const std::string& where) {
    if (!j.is_object()) throw Error(where + ": a basis description must be a JSON object");
    BasisInfo i;
    i.model_fingerprint = json_field<std::string>(j, "model_fingerprint", where, "");
    i.dim = json_field<int64_t>(j, "dim", where, 0);
    i.rank = json_field<int64_t>(j, "rank", where, 0);
    i.stride = json_field<int64_t>(j, "stride", where, 0);
    i.anchors = json_field<int64_t>(j, "anchors", where, 0);
    i.window = json_field<int64_t>(j, "window", where, 0);
    i.calibration_tokens = json_field<int64_t>(j, "calibration_tokens", where, 0);
    i.self_calibrated = json_field<bool>(j, "self_calibrated", where, false);
    return i;
}

}  // namespace varrate
