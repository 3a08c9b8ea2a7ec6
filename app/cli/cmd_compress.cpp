// varrate compress: one document's query-agnostic prefill compressed once by one method and saved as a cache
// file (core/cache_file.h), which `varrate ask` answers questions from without prefilling the document.
#include <filesystem>
#include <iostream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "base/error.h"
#include "base/file_io.h"
#include "codec/codec_json.h"
#include "codec/registry.h"
#include "core/cache_file.h"

namespace varrate::cli {

namespace {

struct CompressArgs {
    std::string model, basis, context_file, method, out;
    CodecSettings settings;
    CodecFlags codec_flags;
    RuntimeArgs runtime;
    bool chat = false;
    bool json = false;
};

int run_compress(const CompressArgs& a) {
    CompressContextRequest req;
    const std::vector<std::string> methods = parse_methods(a.method);
    if (methods.size() != 1) throw Error("--method: name one method (a cache holds one)");
    req.method = methods.front();
    req.settings = a.settings;
    apply_model_codec_defaults(a.codec_flags, a.model, req.settings);
    req.context = read_document_file(a.context_file);
    req.chat = a.chat;
    auto session = Session::open(a.model, runtime_options(a.runtime), a.basis);
    const CompressedContext ctx = compress_context(*session, req, terminal_job());
    const CacheFileInfo info = write_cache_file(a.out, ctx);
    for (const std::string& w : info.warnings) spdlog::warn("{}", w);
    const int64_t file_bytes = static_cast<int64_t>(std::filesystem::file_size(a.out));
    if (a.json) {
        const nlohmann::json j = {{"file", a.out},
                                  {"file_bytes", file_bytes},
                                  {"method", info.method},
                                  {"budget", method_takes_budget(info.method) ? info.settings.budget : 1.0},
                                  {"settings", to_json(info.settings)},
                                  {"chat", info.chat},
                                  {"context_tokens", info.next_position},
                                  {"stored_bytes", info.stored_bytes},
                                  {"full_bytes", info.full_bytes},
                                  {"footprint_fraction", info.footprint_fraction()},
                                  {"resident_bytes", info.resident_bytes},
                                  {"basis_bytes", info.basis_bytes},
                                  {"saved_shared_bytes", info.saved_shared_bytes},
                                  {"basis", info.basis_source},
                                  {"basis_accounting", info.basis_accounting},
                                  {"warnings", info.warnings}};
        std::cout << j.dump(2) << std::endl;
        return 0;
    }
    const std::string basis = info.basis_source.empty()
                                  ? ""
                                  : fmt::format(", basis: {} ({})", info.basis_source, info.basis_accounting);
    std::cout << fmt::format("{} tokens of context compressed by {} at kappa {:g}{}\n", info.next_position,
                             info.method, method_takes_budget(info.method) ? info.settings.budget : 1.0,
                             basis);
    std::cout << fmt::format(
        "accounted {} bytes ({:.2f}% of the full cache's {}), resident {} bytes ({:.2f}%){}\n",
        info.stored_bytes, 100.0 * info.footprint_fraction(), info.full_bytes, info.resident_bytes,
        100.0 * info.resident_fraction(),
        info.saved_shared_bytes > 0 ? fmt::format("; basis rows and RoPE frequencies saved with it: {} bytes",
                                                  info.saved_shared_bytes)
                                    : "");
    std::cout << fmt::format(
        "wrote {} ({} bytes); answer from it with varrate ask --model {} --cache {} --question ...\n", a.out,
        file_bytes, a.model, a.out);
    return 0;
}

}  // namespace

Command add_compress(CLI::App& root) {
    auto a = std::make_shared<CompressArgs>();
    CLI::App* sub = root.add_subcommand(
        "compress", "Compress a document's KV cache once (query-agnostic) and save it for varrate ask");
    sub->add_option("--model", a->model, "Hugging Face model directory")
        ->required()
        ->check(CLI::ExistingDirectory);
    sub->add_option("--context-file", a->context_file, "the document")->required()->check(CLI::ExistingFile);
    sub->add_option("--method", a->method,
                    "the method (" + fmt::format("{}", fmt::join(method_names(), ", ")) + ")")
        ->required();
    sub->add_option("--basis", a->basis,
                    "codec basis file (default: beside the model, else self-calibrated)");
    a->codec_flags = add_codec_options(*sub, a->settings);
    sub->add_flag("--chat", a->chat, "wrap the context in the model's chat template (as compare --chat)");
    sub->add_option("--out", a->out, "the cache file to write (.vrkv)")->required();
    sub->add_flag("--json", a->json, "print what was written as JSON");
    add_runtime_options(*sub, a->runtime);
    return {sub, [a] { return run_compress(*a); }};
}

}  // namespace varrate::cli
