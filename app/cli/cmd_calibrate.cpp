// varrate calibrate: a per-layer residual basis from unlabeled texts (paper section 3.1).
#include <iostream>

#include <fmt/format.h>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "base/error.h"
#include "core/session.h"
#include "core/suites/demo_corpus.h"

namespace varrate::cli {

namespace {

struct CalibrateArgs {
    std::string model;
    std::vector<std::string> text_files;
    std::string out;
    int64_t rank = 1024;
    CodecSettings settings;
    CLI::Option *stride_flag = nullptr, *anchors_flag = nullptr, *window_flag = nullptr;
    RuntimeArgs runtime;
    int64_t max_tokens = 4096;
    int64_t demo_documents = 0, demo_length = 2048;
    uint64_t demo_seed = 7;
};

int run_calibrate(const CalibrateArgs& a) {
    auto session = Session::open(a.model, runtime_options(a.runtime));
    // Stride, anchors and window not given: the model's codec defaults, as runs on it use them (a basis
    // only serves runs with its stride and anchors).
    CodecSettings settings = a.settings;
    const CodecSettings d = session->default_codec_settings();
    auto take = [](const CLI::Option* o) { return o == nullptr || o->count() == 0; };
    if (take(a.stride_flag)) settings.stride = d.stride;
    if (take(a.anchors_flag)) settings.anchors = d.anchors;
    if (take(a.window_flag)) settings.window = d.window;
    std::vector<std::filesystem::path> files(a.text_files.begin(), a.text_files.end());
    std::vector<std::vector<int64_t>> texts = session->calibration_texts(files, settings, a.max_tokens);
    // Documents of the demo corpus: seeds below 2^63 (the training range; evaluations use seeds above it).
    for (int64_t i = 0; i < a.demo_documents; ++i) {
        const uint64_t seed =
            (a.demo_seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i)) & ~(uint64_t(1) << 63);
        const DemoDocument doc =
            make_document(seed, a.demo_length, static_cast<int>(i % 4), static_cast<double>((i * 37) % 101));
        std::vector<int64_t> ids = session->tokenizer().encode(doc.text, true);
        if (static_cast<int64_t>(ids.size()) > a.max_tokens) ids.resize(a.max_tokens);
        texts.push_back(std::move(ids));
    }
    if (texts.empty()) throw Error("calibrate: give --text-file or --demo-documents");
    const Basis basis = session->calibrate(texts, settings, a.rank, false, terminal_job());
    basis.save(a.out);
    const BasisInfo& info = basis.info();
    std::cout << fmt::format(
        "wrote {}: {} layers, D {}, R {}, stride {}, anchors {}, {} residual tokens per layer\n", a.out,
        basis.n_layer(), info.dim, info.rank, info.stride, info.anchors, info.calibration_tokens);
    std::cout << "layer  directions for 90% / 99% of the residual energy\n";
    for (int64_t l = 0; l < basis.n_layer(); ++l)
        std::cout << fmt::format("{:>5}  {:>5} / {:>5}\n", l, basis.directions_for_energy(l, 0.90),
                                 basis.directions_for_energy(l, 0.99));
    return 0;
}

}  // namespace

Command add_calibrate(CLI::App& root) {
    auto a = std::make_shared<CalibrateArgs>();
    CLI::App* sub =
        root.add_subcommand("calibrate", "Calibrate the codec's per-layer residual basis on texts");
    sub->add_option("--model", a->model, "Hugging Face model directory")
        ->required()
        ->check(CLI::ExistingDirectory);
    sub->add_option("--text-file", a->text_files, "unlabeled calibration text (repeatable)")
        ->check(CLI::ExistingFile);
    sub->add_option("--demo-documents", a->demo_documents,
                    "also calibrate on N generated documents of the demo corpus (the demo model's data)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{100000}));
    sub->add_option("--demo-length", a->demo_length, "tokens per generated document")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{64}, int64_t{1} << 20));
    sub->add_option("--demo-seed", a->demo_seed, "seed of the generated documents")->capture_default_str();
    sub->add_option("--out", a->out, "basis file to write (.safetensors)")->required();
    sub->add_option("--rank", a->rank, "R: rows kept per layer (clamped to D)")->capture_default_str();
    a->stride_flag = sub->add_option("--stride", a->settings.stride, "anchor stride (default: the model's)");
    a->anchors_flag =
        sub->add_option("--anchors", a->settings.anchors, "nearest anchors per token (default: the model's)");
    a->window_flag = sub->add_option("--window", a->settings.window,
                                     "recent tokens kept exactly, not residuals (default: the model's)");
    sub->add_option("--max-tokens", a->max_tokens, "tokens used from each text")->capture_default_str();
    add_runtime_options(*sub, a->runtime);
    return {sub, [a] { return run_calibrate(*a); }};
}

}  // namespace varrate::cli
