#include "app/cli/cli_common.h"

#include <chrono>
#include <cstdio>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/error.h"
#include "codec/footprint.h"
#include "codec/registry.h"
#include "core/codec_defaults.h"

namespace varrate::cli {

void add_runtime_options(CLI::App& sub, RuntimeArgs& args) {
    sub.add_option("--device", args.device, "cpu, cuda or cuda:N")->capture_default_str();
    sub.add_option(
           "--dtype", args.dtype,
           "auto (bf16 on CUDA and on CPUs with bf16 matmul, else fp32), fp32, bf16, or fp16 (CUDA only)")
        ->capture_default_str();
    sub.add_option("--threads", args.threads, "CPU threads (0 = all cores)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1024));
}

RuntimeOptions runtime_options(const RuntimeArgs& args) {
    RuntimeOptions o = resolve_runtime(args.device, args.dtype);
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
                 model->config().n_layer, o.device.str(), dtype_name(o.dtype), ms, o.threads);
    return model;
}

std::vector<double> parse_budget_list(const std::string& text) {
    std::vector<double> out;
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) {
        const auto b = item.find_first_not_of(" \t");
        const auto e = item.find_last_not_of(" \t");
        item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
        size_t used = 0;
        double v = 0;
        try {
            v = std::stod(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (item.empty() || used != item.size() || !(v > 0 && v <= 1))
            throw Error("--budget: '" + item + "' in '" + text +
                        "' is not a fraction of the cache in (0, 1]");
        out.push_back(v);
    }
    if (out.empty()) throw Error("--budget: no budget given");
    return out;
}

CodecFlags add_codec_options(CLI::App& sub, CodecSettings& s, std::vector<double>* budget_list) {
    CodecFlags f;
    f.budgets = budget_list;
    if (budget_list) {
        // A string option: CLI11 would split a double list itself but not name the bad entry.
        f.budget = sub.add_option_function<std::string>(
                          "--budget",
                          [&s, budget_list](const std::string& text) {
                              try {
                                  *budget_list = parse_budget_list(text);
                              } catch (const Error& e) {
                                  throw CLI::ValidationError(e.what());  // reported like any bad argument
                              }
                              s.budget = budget_list->front();
                          },
                          "kappa: fractions of the KV cache kept, in (0, 1], comma-separated (one run per "
                          "budget)")
                       ->default_str(fmt::format("{:g}", s.budget));
    } else {
        f.budget = sub.add_option("--budget", s.budget, "kappa: fraction of the KV cache kept, in (0, 1]")
                       ->capture_default_str();
    }
    f.r_min = sub.add_option("--rmin", s.r_min, "rank floor of every coded token")->capture_default_str();
    f.rank = sub.add_option("--rank", s.rank, "R: basis rank and per-token rank cap (clamped to D)")
                 ->capture_default_str();
    f.stride = sub.add_option("--stride", s.stride, "anchor stride Delta")->capture_default_str();
    f.anchors =
        sub.add_option("--anchors", s.anchors, "c: nearest anchors per coded token")->capture_default_str();
    f.window = sub.add_option("--window", s.window, "w: recent tokens kept exactly")->capture_default_str();
    f.obs_window =
        sub.add_option("--obs-window", s.obs_window, "w_obs: observation window queries for salience")
            ->capture_default_str();
    sub.add_option(
           "--coef-bits", s.coef_bits,
           "bits per stored VarRate/flat coefficient: 2, 3, 4 or 8 quantizes them (groups of 32 along "
           "each token's rank, fp16 scale and minimum; the budget counts bits); 16 keeps the cache "
           "precision")
        ->check(CLI::IsMember({2, 3, 4, 8, 16}))
        ->capture_default_str();
    sub.add_flag("--paper-accounting", s.paper_accounting,
                 "charge neither anchor indices nor a self-calibrated basis to the budget (the paper's "
                 "accounting; footprint slightly above kappa, runs labelled \"basis not charged\")");
    sub.footer("Codec settings not given come from MODEL/" + std::string(kCodecDefaultsFile) +
               " when the model directory has one (the shipped demo model does), else from the model's "
               "width: the paper's for D = 2 x n_kv_head x head_dim >= 1024, scaled down below (as the "
               "desktop app does).");
    return f;
}

void apply_model_codec_defaults(const CodecFlags& given, const std::filesystem::path& model_dir,
                                CodecSettings& s) {
    // The same defaults the desktop app starts from: recorded beside the model, else width-based.
    const ModelConfig cfg = ModelConfig::load(model_dir);
    const std::optional<CodecSettings> recorded =
        read_codec_defaults(model_dir, width_codec_defaults(joint_dim(cfg)));
    const CodecSettings d = default_codec_settings(cfg, recorded);
    auto take = [](const CLI::Option* o) { return o == nullptr || o->count() == 0; };
    if (take(given.budget)) s.budget = d.budget;
    if (given.budgets) {
        // A budget list: every entry checked here, so that a bad one is named before any prefill.
        if (take(given.budget)) *given.budgets = {s.budget};
        if (given.budgets->empty()) throw Error("--budget: no budget given");
        for (double b : *given.budgets)
            if (!(b > 0.0 && b <= 1.0))
                throw Error(
                    fmt::format("--budget {}: kappa is the fraction of the cache kept, in (0, 1]", b));
        s.budget = given.budgets->front();
    }
    if (take(given.r_min)) s.r_min = d.r_min;
    if (take(given.rank)) s.rank = d.rank;
    if (take(given.stride)) s.stride = d.stride;
    if (take(given.anchors)) s.anchors = d.anchors;
    if (take(given.window)) s.window = d.window;
    if (take(given.obs_window)) s.obs_window = d.obs_window;
    spdlog::info(
        "codec settings (flags over {}): budget {} r_min {} rank {} stride {} anchors {} window {} "
        "obs-window {}",
        recorded ? (model_dir / kCodecDefaultsFile).string()
                 : fmt::format("the width-based defaults for D = {}", joint_dim(cfg)),
        given.budgets ? fmt::format("{}", fmt::join(*given.budgets, ",")) : fmt::format("{}", s.budget),
        s.r_min, s.rank, s.stride, s.anchors, s.window, s.obs_window);
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

std::string join_method_names() {
    return fmt::format("{}", fmt::join(default_method_names(), ","));
}

bool check_methods_feasible(const std::vector<std::string>& methods, const CodecSettings& settings,
                            int64_t n_tokens, const LlamaModel& model) {
    const ModelConfig& cfg = model.config();
    const int64_t dim = 2 * cfg.n_kv_head * cfg.head_dim;
    bool needs_basis = false;
    for (const std::string& name : methods) {
        needs_basis = needs_basis || method_needs_basis(name);  // also rejects unknown names
        check_budget_feasible(name, settings, n_tokens, cfg.n_layer, dim,
                              element_size(model.options().dtype));
    }
    return needs_basis;
}

std::vector<std::string> split_comma_list(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) {
        const auto b = item.find_first_not_of(" \t");
        if (b == std::string::npos) continue;
        const auto e = item.find_last_not_of(" \t");
        out.push_back(item.substr(b, e - b + 1));
    }
    return out;
}

std::vector<std::string> parse_methods(const std::string& list) {
    const std::vector<std::string> out = split_comma_list(list);
    for (const std::string& name : out)
        method_needs_basis(name);  // throws for an unknown name, listing the known ones
    if (out.empty()) throw Error("--methods: no method named");
    return out;
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

namespace {
std::atomic<bool> g_interrupted{false};
}  // namespace

extern "C" void varrate_on_sigint(int) {
    g_interrupted.store(true);  // lock-free: safe in a signal handler
}

std::atomic<bool>& sigint_flag() {
    return g_interrupted;
}

SigintGuard::SigintGuard() {
    g_interrupted.store(false);
    struct sigaction sa {};
    sa.sa_handler = varrate_on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &sa, &old_);
}

SigintGuard::~SigintGuard() {
    sigaction(SIGINT, &old_, nullptr);
}

std::string format_duration(double s) {
    if (s < 0) return "?";
    const long long t = static_cast<long long>(s + 0.5);
    if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60);
    if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
    return fmt::format("{}s", t);
}

void clear_progress_line() {
    if (isatty(fileno(stderr))) {
        std::fprintf(stderr, "\r\033[K");
        std::fflush(stderr);
    }
}

SweepProgressFn sweep_progress_printer(const std::string& name) {
    const bool tty = isatty(fileno(stderr));
    auto last = std::make_shared<std::chrono::steady_clock::time_point>();
    auto last_done = std::make_shared<int64_t>(-1);
    return [tty, last, last_done, name](const SweepProgress& p) {
        const std::string head =
            fmt::format("{} {}/{} records ({} reused)", name, p.done, p.total, p.skipped);
        const std::string eta =
            fmt::format("{} elapsed, ETA {}", format_duration(p.elapsed_s), format_duration(p.eta_s));
        if (!tty) {
            if (p.done != *last_done && p.stage.empty()) spdlog::info("{} | {}", head, eta);
            *last_done = p.done;
            return;
        }
        const auto now = std::chrono::steady_clock::now();
        if (!p.stage.empty() && now - *last < std::chrono::milliseconds(100)) return;
        *last = now;
        std::string line = head;
        if (!p.cell.empty()) line += " | " + p.cell;
        if (!p.stage.empty())
            line += p.stage_total > 0 ? fmt::format(" | {} {}/{}", p.stage, p.stage_done, p.stage_total)
                                      : " | " + p.stage;
        line += " | " + eta;
        std::fprintf(stderr, "\r\033[K%s", line.c_str());
        std::fflush(stderr);
    };
}

}  // namespace varrate::cli
