#include "app/cli/cli_common.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/error.h"
#include "base/file_io.h"
#include "codec/footprint.h"
#include "codec/registry.h"
#include "codec/settings_table.h"
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
    const CodecSettingSpec& budget = *find_codec_setting("budget");
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
        if (item.empty() || used != item.size() || !setting_violation(budget, v).empty())
            throw Error("--budget: '" + item + "' in '" + text +
                        "' is not a fraction of the cache in (0, 1]");
        out.push_back(v);
    }
    if (out.empty()) throw Error("--budget: no budget given");
    return out;
}

namespace {

// The table's check of one setting, as CLI11 runs it on the argument before converting it.
CLI::Validator setting_validator(const CodecSettingSpec& spec) {
    return CLI::Validator(
        [&spec](std::string& text) -> std::string {
            size_t used = 0;
            double v = 0;
            try {
                v = std::stod(text, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            const std::string allowed =
                used == text.size() && used > 0 ? setting_violation(spec, v) : setting_violation(spec, NAN);
            return allowed.empty() ? "" : fmt::format("{} must be {}, got '{}'", spec.flag, allowed, text);
        },
        "", spec.key);
}

}  // namespace

bool CodecFlags::given(const CodecSettingSpec& spec) const {
    for (const auto& [row, option] : options)
        if (row == &spec) return option != nullptr && option->count() > 0;
    return false;
}

CodecFlags add_codec_options(CLI::App& sub, CodecSettings& s, BudgetOption budget,
                             std::vector<double>* budget_list) {
    CodecFlags f;
    f.budgets = budget_list;
    for (const CodecSettingSpec& spec : codec_setting_specs()) {
        CLI::Option* o = nullptr;
        if (spec.real == &CodecSettings::budget) {
            if (budget == BudgetOption::None) continue;  // the command sweeps its own grid
            if (budget_list) {
                // A string option: CLI11 would split a double list itself but not name the bad entry.
                o = sub.add_option_function<std::string>(
                           spec.flag,
                           [&s, budget_list](const std::string& text) {
                               try {
                                   *budget_list = parse_budget_list(text);
                               } catch (const Error& e) {
                                   throw CLI::ValidationError(e.what());  // reported like any bad argument
                               }
                               s.budget = budget_list->front();
                           },
                           std::string(spec.help) + ", comma-separated (one run per budget)")
                        ->default_str(format_setting(spec, s));
            } else {
                o = sub.add_option(spec.flag, s.*(spec.real), spec.help)
                        ->capture_default_str()
                        ->check(setting_validator(spec));
            }
            f.budget = o;
        } else if (spec.kind == SettingKind::List) {
            o = sub.add_option_function<std::string>(
                       spec.flag,
                       [&s, &spec](const std::string& text) {
                           try {
                               s.*(spec.list) = parse_setting_list(spec, text, spec.flag);
                           } catch (const Error& e) {
                               throw CLI::ValidationError(e.what());  // reported like any bad argument
                           }
                       },
                       spec.help)
                    ->default_str(format_setting(spec, s));
        } else if (spec.kind == SettingKind::Flag) {
            o = sub.add_flag(spec.flag, s.*(spec.boolean), spec.help);
        } else if (spec.real) {
            o = sub.add_option(spec.flag, s.*(spec.real), spec.help)
                    ->capture_default_str()
                    ->check(setting_validator(spec));
        } else {
            o = sub.add_option(spec.flag, s.*(spec.integer), spec.help)
                    ->capture_default_str()
                    ->check(setting_validator(spec));
        }
        f.options.emplace_back(&spec, o);
    }
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
    for (const CodecSettingSpec& spec : codec_setting_specs())
        if (spec.model_default && !given.given(spec)) set_setting_value(spec, s, setting_value(spec, d));
    if (given.budgets) {
        // A budget list: every entry checked here, so that a bad one is named before any prefill.
        if (!given.budget || given.budget->count() == 0) *given.budgets = {s.budget};
        if (given.budgets->empty()) throw Error("--budget: no budget given");
        for (double b : *given.budgets) check_setting(*find_codec_setting("budget"), b, "--budget");
        s.budget = given.budgets->front();
    }
    std::string values;
    for (const CodecSettingSpec& spec : codec_setting_specs())
        values += fmt::format(" {} {}", spec.key,
                              spec.real == &CodecSettings::budget && given.budgets
                                  ? fmt::format("{}", fmt::join(*given.budgets, ","))
                                  : format_setting(spec, s));
    spdlog::info("codec settings (flags over {}):{}",
                 recorded ? (model_dir / kCodecDefaultsFile).string()
                          : fmt::format("the width-based defaults for D = {}", joint_dim(cfg)),
                 values);
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

std::string read_filler_file(const std::string& path, const std::string& what, std::string& name) {
    std::string text = read_document_file(path);
    if (text.find_first_not_of(" \t\r\n") == std::string::npos)
        throw Error(path + ": the " + what + " file is empty");
    name = std::filesystem::path(path).filename().string();
    return text;
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

bool run_sweep_command(const std::string& name, const std::string& out_dir, const Shard& shard,
                       const JobControl& job,
                       const std::function<SweepStats(const JobControl&, const SweepProgressFn&)>& run,
                       SweepStats& stats, const std::function<void()>& on_interrupt) {
    try {
        stats = run(job, sweep_progress_printer(name));
    } catch (const Cancelled&) {
        clear_progress_line();
        if (on_interrupt) on_interrupt();
        std::fprintf(
            stderr,
            "varrate %s: interrupted; finished records are kept in %s, run the same command again to "
            "resume\n",
            name.c_str(), out_dir.c_str());
        throw;
    }
    clear_progress_line();
    if (shard.whole()) return true;
    // The other shards may still be running: the summary is made once, from the shared folder.
    std::cout << fmt::format(
        "shard {}: {} records: {} computed, {} reused ({} documents); when every shard has finished: varrate "
        "summarize {}\n",
        shard.label(), stats.total, stats.computed, stats.skipped, stats.documents, out_dir);
    return false;
}

}  // namespace varrate::cli
