// Captures, methods, allocations and compressed stores on torch tensors (see bindings.h).
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "bindings.h"
#include "codec/basis.h"
#include "codec/codec_json.h"
#include "codec/compressed_layer.h"
#include "codec/method.h"
#include "codec/registry.h"
#include "codec/settings_table.h"

namespace py = pybind11;
using nlohmann::json;

namespace varrate::python {

CodecSettings settings_from(const std::string& settings, const std::string& base, const std::string& where);

namespace {

// The method, shared by the analyses and allocations it made (they must not outlive it).
struct MethodHandle {
    std::shared_ptr<CompressionMethod> method;
};

struct AnalysisHandle {
    std::shared_ptr<CompressionMethod> method;
    std::shared_ptr<const LayerAnalysis> analysis;
};

struct AllocationHandle {
    std::shared_ptr<CompressionMethod> method;
    std::shared_ptr<const LayerAnalysis> analysis;
    std::shared_ptr<LayerAllocation> allocation;
};

// A compressed layer (immutable, shared with the caches that hold it).
struct StoreHandle {
    std::shared_ptr<const LayerPrefix> prefix;
};

at::Tensor opt(const std::optional<at::Tensor>& t) {
    return t ? *t : at::Tensor();
}

}  // namespace

void bind_codec(py::module_& m) {
    py::class_<LayerCapture>(m, "LayerCapture")
        .def(
            py::init(
                [](int64_t layer, int64_t n_layers, const at::Tensor& keys, const at::Tensor& values,
                   const std::optional<at::Tensor>& keys_pre_rope,
                   const std::optional<at::Tensor>& window_queries, const std::optional<at::Tensor>& rope_cos,
                   const std::optional<at::Tensor>& rope_sin, const std::optional<at::Tensor>& rope_inv_freq,
                   const std::optional<at::Tensor>& o_proj, const std::optional<at::Tensor>& query_mean,
                   const std::optional<at::Tensor>& query_cov, const std::optional<at::Tensor>& token_ids) {
                    LayerCapture c;
                    c.layer = layer;
                    c.n_layers = n_layers;
                    c.keys = keys;
                    c.values = values;
                    c.keys_pre_rope = opt(keys_pre_rope);
                    c.window_queries = opt(window_queries);
                    c.rope_cos = opt(rope_cos);
                    c.rope_sin = opt(rope_sin);
                    c.rope_inv_freq = opt(rope_inv_freq);
                    c.o_proj = opt(o_proj);
                    c.query_mean = opt(query_mean);
                    c.query_cov = opt(query_cov);
                    c.token_ids = opt(token_ids);
                    return c;
                }),
            py::kw_only(), py::arg("layer"), py::arg("n_layers"), py::arg("keys"), py::arg("values"),
            py::arg("keys_pre_rope") = py::none(), py::arg("window_queries") = py::none(),
            py::arg("rope_cos") = py::none(), py::arg("rope_sin") = py::none(),
            py::arg("rope_inv_freq") = py::none(), py::arg("o_proj") = py::none(),
            py::arg("query_mean") = py::none(), py::arg("query_cov") = py::none(),
            py::arg("token_ids") = py::none())
        .def_readonly("layer", &LayerCapture::layer)
        .def_readonly("n_layers", &LayerCapture::n_layers)
        .def_readonly("keys", &LayerCapture::keys)
        .def_readonly("values", &LayerCapture::values)
        .def_readonly("keys_pre_rope", &LayerCapture::keys_pre_rope)
        .def_readonly("window_queries", &LayerCapture::window_queries)
        .def_readonly("rope_cos", &LayerCapture::rope_cos)
        .def_readonly("rope_sin", &LayerCapture::rope_sin)
        .def_readonly("rope_inv_freq", &LayerCapture::rope_inv_freq);

    py::class_<MethodHandle>(m, "Method")
        .def(py::init([](const std::string& name, const std::string& settings,
                         const std::shared_ptr<Basis>& basis) {
                 const CodecSettings s = settings_from(settings, "", "settings of " + name);
                 check_codec_settings(s, "settings of " + name);
                 return MethodHandle{std::shared_ptr<CompressionMethod>(make_method(name, s, basis))};
             }),
             py::arg("name"), py::arg("settings"), py::arg("basis") = nullptr)
        .def_property_readonly("name", [](const MethodHandle& h) { return h.method->name(); })
        .def_property_readonly("settings_json",
                               [](const MethodHandle& h) { return to_json(h.method->settings()).dump(); })
        .def(
            "analyse",
            [](const MethodHandle& h, const LayerCapture& capture) {
                return AnalysisHandle{h.method, h.method->analyse(capture)};
            },
            py::call_guard<py::gil_scoped_release>())
        // Each layer's budget when the method shares kappa across layers (every layer's analysis, in order);
        // empty: every layer takes `budget`'s kappa.
        .def("layer_budgets",
             [](const MethodHandle& h, const std::vector<AnalysisHandle>& layers, const std::string& budget) {
                 std::vector<std::shared_ptr<const LayerAnalysis>> analyses;
                 for (const AnalysisHandle& a : layers) analyses.push_back(a.analysis);
                 const CodecSettings s =
                     settings_from(budget, to_json(h.method->settings()).dump(), "layer budgets");
                 return h.method->layer_budgets(analyses, s);
             });

    py::class_<AnalysisHandle>(m, "Analysis")
        .def_property_readonly("layer", [](const AnalysisHandle& a) { return a.analysis->layer; })
        .def_property_readonly("n_tokens", [](const AnalysisHandle& a) { return a.analysis->n_tokens; })
        .def(
            "allocate",
            [](const AnalysisHandle& a, const std::string& budget) {
                // The method's settings with the budget's fields over them (kappa, r_min, R, bits, ...).
                const CodecSettings s =
                    settings_from(budget, to_json(a.method->settings()).dump(), "allocation settings");
                check_codec_settings(s, "allocation settings");
                auto alloc = std::make_shared<LayerAllocation>(a.method->allocate(*a.analysis, s));
                return AllocationHandle{a.method, a.analysis, alloc};
            },
            py::arg("budget"), py::call_guard<py::gil_scoped_release>());

    py::class_<AllocationHandle>(m, "Allocation")
        .def(
            "diagnostics_json",
            [](const AllocationHandle& a, bool per_token) {
                return to_json(a.allocation->diagnostics, per_token).dump();
            },
            py::arg("per_token") = false)
        .def_property_readonly("rank",
                               [](const AllocationHandle& a) { return a.allocation->diagnostics.rank; })
        .def_property_readonly("exact",
                               [](const AllocationHandle& a) { return a.allocation->diagnostics.exact; })
        .def_property_readonly("salience",
                               [](const AllocationHandle& a) { return a.allocation->diagnostics.salience; })
        .def_property_readonly("rel_error",
                               [](const AllocationHandle& a) { return a.allocation->diagnostics.rel_error; })
        .def_property_readonly("kept", [](const AllocationHandle& a) { return a.allocation->kept; })
        .def(
            "materialise",
            [](const AllocationHandle& a, const LayerCapture& capture) {
                LayerKV kv = a.method->materialise(capture, *a.analysis, *a.allocation);
                return std::make_pair(kv.keys, kv.values);
            },
            py::call_guard<py::gil_scoped_release>())
        .def(
            "store",
            [](const AllocationHandle& a, const LayerCapture& capture) {
                std::shared_ptr<const LayerPrefix> p = a.method->store(capture, *a.analysis, *a.allocation);
                return p ? std::optional<StoreHandle>(StoreHandle{p}) : std::nullopt;
            },
            py::call_guard<py::gil_scoped_release>());

    py::class_<StoreHandle>(m, "Store")
        .def_property_readonly("length", [](const StoreHandle& s) { return s.prefix->length(); })
        .def_property_readonly("resident_bytes",
                               [](const StoreHandle& s) { return s.prefix->resident_bytes(); })
        .def(
            "attend",
            [](const StoreHandle& s, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
               double scale) { return s.prefix->attend(q, k, v, scale); },
            py::arg("q"), py::arg("tail_keys"), py::arg("tail_values"), py::arg("scale"),
            py::call_guard<py::gil_scoped_release>())
        .def(
            "reconstruct",
            [](const StoreHandle& s) {
                LayerKV kv = s.prefix->reconstruct();
                return std::make_pair(kv.keys, kv.values);
            },
            py::call_guard<py::gil_scoped_release>())
        .def("describe", [](const StoreHandle& s) { return store_attention_summary({s.prefix}); });

    py::class_<BasisCalibrator>(m, "BasisCalibrator")
        .def(py::init([](const std::string& settings, int64_t n_layer) {
                 return BasisCalibrator(settings_from(settings, "", "calibration settings"), n_layer);
             }),
             py::arg("settings"), py::arg("n_layer"))
        .def("add", &BasisCalibrator::add, py::call_guard<py::gil_scoped_release>())
        .def("tokens", &BasisCalibrator::tokens)
        .def(
            "finish",
            [](const BasisCalibrator& c, int64_t rank, const std::string& fingerprint, bool self_calibrated) {
                return std::make_shared<Basis>(c.finish(rank, fingerprint, self_calibrated));
            },
            py::call_guard<py::gil_scoped_release>());
}

}  // namespace varrate::python
