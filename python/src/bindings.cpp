#include "bindings.h"

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "codec/basis.h"
#include "codec/codec_json.h"
#include "codec/registry.h"
#include "codec/settings_table.h"
#include "core/codec_defaults.h"
#include "models/model_config.h"
#include "models/model_fingerprint.h"

namespace py = pybind11;
using nlohmann::json;

namespace varrate::python {
namespace {

const char* to_string(SettingKind k) {
    switch (k) {
        case SettingKind::Fraction:
            return "fraction";
        case SettingKind::Integer:
            return "integer";
        case SettingKind::Choice:
            return "choice";
        case SettingKind::Flag:
            return "flag";
        case SettingKind::List:
            return "list";
    }
    return "?";
}

const char* to_string(BudgetRule r) {
    switch (r) {
        case BudgetRule::Kappa:
            return "kappa";
        case BudgetRule::OwnSettings:
            return "own settings";
        case BudgetRule::Uncompressed:
            return "uncompressed";
    }
    return "?";
}

const char* to_string(MethodProbe p) {
    switch (p) {
        case MethodProbe::None:
            return "";
        case MethodProbe::Question:
            return "question";
        case MethodProbe::Repeat:
            return "repeat";
        case MethodProbe::Observed:
            return "observed";
        case MethodProbe::NonCausal:
            return "non-causal";
    }
    return "?";
}

// The registered methods with their traits, in registry order: what varrate.methods() lists.
std::string methods_json() {
    json out = json::array();
    // The settings each MethodReads bit stands for, in the settings table's order.
    static const std::vector<std::pair<const char*, uint32_t>> bits = {
        {"budget", kReadsBudget},
        {"r_min", kReadsRankFloor},
        {"rank", kReadsRank},
        {"stride", kReadsStride},
        {"anchors", kReadsAnchors},
        {"window", kReadsWindow},
        {"obs_window", kReadsObsWindow},
        {"pool_kernel", kReadsPool},
        {"coef_bits", kReadsCoefBits},
        {"key_channel_ratio", kReadsKeyChannels},
        {"layer_profile", kReadsLayerProfile},
        {"streaming_sink", kReadsStreaming},
        {"streaming_recent", kReadsStreaming},
        {"paper_accounting", kReadsAccounting}};
    for (const std::string& name : method_names()) {
        const MethodTraits& t = method_traits(name);
        json reads = json::array();
        for (const auto& [key, bit] : bits)
            if (t.reads & bit) reads.push_back(key);
        json needs = json::array();
        if (t.capture_needs & kNeedsQueryStats) needs.push_back("query_stats");
        if (t.capture_needs & kNeedsTokenIds) needs.push_back("token_ids");
        if (t.capture_needs & kNeedsAllLayers) needs.push_back("all_layers");
        out.push_back({{"name", name},
                       {"description", t.description},
                       {"family", to_string(t.family)},
                       {"group", method_group(t)},
                       {"needs_basis", t.needs_basis},
                       {"budget_rule", to_string(t.budget)},
                       {"probe", to_string(t.probe)},
                       {"signal_of", t.signal_of ? t.signal_of : ""},
                       {"reads", reads},
                       {"capture_needs", needs}});
    }
    return out.dump();
}

// Every row of the settings table with its default (CodecSettings{}: the paper's).
std::string setting_specs_json() {
    json out = json::array();
    const json defaults = to_json(CodecSettings{});
    for (const CodecSettingSpec& spec : codec_setting_specs()) {
        json row = {{"key", spec.key},
                    {"flag", spec.flag},
                    {"help", spec.help},
                    {"kind", to_string(spec.kind)},
                    {"min", spec.min},
                    {"max", spec.max},
                    {"default", defaults.contains(spec.key) ? defaults[spec.key] : json()}};
        if (spec.kind == SettingKind::Choice) row["choices"] = spec.choices;
        out.push_back(row);
    }
    return out.dump();
}

json parse(const std::string& text, const std::string& where) {
    try {
        return json::parse(text);
    } catch (const json::exception& e) {
        throw Error(where + ": not JSON: " + e.what());
    }
}

// What a basis must match (empty / 0: not checked).
BasisRequirements requirements(const std::string& fingerprint, int64_t dim, int64_t stride, int64_t anchors) {
    BasisRequirements req;
    req.model_fingerprint = fingerprint;
    req.dim = dim;
    req.stride = stride;
    req.anchors = anchors;
    return req;
}

}  // namespace

// settings: JSON object of CodecSettings fields applied over `base` (JSON; "" = the paper's defaults).
CodecSettings settings_from(const std::string& settings, const std::string& base, const std::string& where) {
    CodecSettings b;
    if (!base.empty()) b = codec_settings_from_json(parse(base, where), where);
    if (settings.empty()) return b;
    return codec_settings_from_json(parse(settings, where), where, b);
}

}  // namespace varrate::python

PYBIND11_MODULE(_varrate, m) {
    using namespace varrate;
    using namespace varrate::python;
    m.doc() = "VarRate's C++ codec on torch tensors (use the varrate package, not this module)";

    // One Python exception per C++ one (the later registration is tried first); LibTorch's own errors stay
    // RuntimeError.
    auto error = py::register_exception<Error>(m, "VarRateError", PyExc_ValueError);
    py::register_exception<InfeasibleBudget>(m, "InfeasibleBudgetError", error.ptr());

    m.def("methods_json", &methods_json);
    m.def("setting_specs_json", &setting_specs_json);
    m.def("registered_method_name", &registered_method_name);
    m.def("settings_json",
          [](const std::string& settings, const std::string& base, const std::string& where) {
              const CodecSettings s = settings_from(settings, base, where);
              check_codec_settings(s, where);
              return to_json(s).dump();
          });
    m.def("model_settings_json", [](const std::string& model_dir) {
        return to_json(default_codec_settings(std::filesystem::path(model_dir))).dump();
    });
    m.def("width_settings_json",
          [](int64_t joint_dim) { return to_json(width_codec_defaults(joint_dim)).dump(); });
    m.def("model_fingerprint", [](const std::string& model_dir) { return model_fingerprint(model_dir); });
    m.def("model_joint_dim",
          [](const std::string& model_dir) { return joint_dim(ModelConfig::load(model_dir)); });

    py::class_<Basis, std::shared_ptr<Basis>>(m, "Basis")
        .def(py::init([](const std::string& info, std::vector<at::Tensor> layers) {
            return std::make_shared<Basis>(basis_info_from_json(parse(info, "basis info"), "basis info"),
                                           std::move(layers));
        }))
        .def_static("load",
                    [](const std::string& path, const std::string& fingerprint, int64_t dim, int64_t stride,
                       int64_t anchors) {
                        return std::make_shared<Basis>(
                            Basis::load(path, requirements(fingerprint, dim, stride, anchors)));
                    })
        .def("save", [](const Basis& b, const std::string& path) { b.save(path); })
        .def(
            "check",
            [](const Basis& b, const std::string& fingerprint, int64_t dim, int64_t stride, int64_t anchors,
               const std::string& where) { b.check(requirements(fingerprint, dim, stride, anchors), where); })
        .def_property_readonly("n_layer", &Basis::n_layer)
        .def("layer", [](const Basis& b, int64_t i) { return b.layer(i); })
        .def_property_readonly("info_json", [](const Basis& b) { return to_json(b.info()).dump(); });

    bind_codec(m);
}
