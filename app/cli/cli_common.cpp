#include "app/cli/cli_common.h"

#include <chrono>
#include <cstdio>
#include <sstream>

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace varrate::cli {

void add_runtime_options(CLI::App& sub, RuntimeArgs& args) {
    sub.add_option("--device", args.device, "cpu, cuda or cuda:N")->capture_default_str();
    sub.add_option("--dtype", args.dtype, "fp32 or bf16 (fp16 on CUDA only)")->capture_default_str();
    sub.add_option("--threads", args.threads, "CPU threads (0 = all cores)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1024));
}

RuntimeOptions runtime_options(const RuntimeArgs& args) {
    RuntimeOptions o;
    o.device = parse_device(args.device);
    o.dtype = parse_dtype(args.dtype, o.device);
    o.threads = configure_threads(args.threads);
    return o;
}

std::unique_ptr<LlamaModel> load_model_for_cli(const std::filesystem::path& dir, const RuntimeArgs& args) {
    const RuntimeOptions o = runtime_options(args);
    const auto t0 = std::chrono::steady_clock::now();
    auto model = LlamaModel::load(dir, o);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    spdlog::info("loaded {} ({} layers) on {} as {} in {:.0f} ms, {} threads", dir.string(),
                 model->config().num_layers, o.device.str(), dtype_name(o.dtype), ms, o.threads);
    return model;
}

void add_codec_options(CLI::App& sub, CodecSettings& s) {
    sub.add_option("--budget", s.budget, "kappa: fraction of the KV cache kept, in (0, 1]")
        ->capture_default_str();
    sub.add_option("--rmin", s.r_min, "rank floor of every coded token")->capture_default_str();
    sub.add_option("--rank", s.rank, "R: basis rank and per-token rank cap (clamped to D)")
        ->capture_default_str();
    sub.add_option("--stride", s.stride, "anchor stride Delta")->capture_default_str();
    sub.add_option("--anchors", s.anchors, "c: nearest anchors per coded token")->capture_default_str();
    sub.add_option("--window", s.window, "w: recent tokens kept exactly")->capture_default_str();
    sub.add_option("--obs-window", s.obs_window, "w_obs: observation window queries for salience")
        ->capture_default_str();
    sub.add_flag("--paper-accounting", s.paper_accounting,
                 "do not charge anchor indices to the budget (the paper's accounting; footprint slightly "
                 "above kappa)");
}

JobControl terminal_job() {
    JobControl job;
    if (!isatty(fileno(stderr))) return job;
    job.progress = [](const std::string& stage, int64_t done, int64_t total) {
        std::fprintf(stderr, "\r\033[K%s %lld/%lld", stage.c_str(), static_cast<long long>(done),
                     static_cast<long long>(total));
        if (stage == "done") std::fprintf(stderr, "\r\033[K");
        std::fflush(stderr);
    };
    return job;
}

std::vector<int64_t> parse_id_list(const std::string& text, const std::string& what) {
    std::vector<int64_t> ids;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        const auto b = item.find_first_not_of(" \t");
        const auto e = item.find_last_not_of(" \t");
        if (b == std::string::npos) throw Error(what + ": empty entry in '" + text + "'");
        item = item.substr(b, e - b + 1);
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != item.size() || v < 0)
            throw Error(what + ": '" + item + "' is not a token id (non-negative integer)");
        ids.push_back(v);
    }
    if (ids.empty()) throw Error(what + ": no ids given");
    return ids;
}

}  // namespace varrate::cli
