#include "core/suites/sweep_runner.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/error.h"
#include "base/file_io.h"
#include "codec/registry.h"
#include "codec/settings_table.h"
#include "core/session.h"
#include "core/suites/budget_list.h"
#include "core/suites/niah_record.h"

namespace varrate {

std::vector<SweepSeries> sweep_series(const std::vector<std::string>& methods,
                                      const std::vector<double>& budgets) {
    std::vector<SweepSeries> out;
    for (const std::string& m : methods) {
        if (!method_takes_budget(m)) {
            out.push_back({m, 1.0});
            continue;
        }
        for (double b : budgets) out.push_back({m, b});
    }
    return out;
}

void check_budget_list(const std::vector<double>& budgets) {
    for (size_t i = 0; i < budgets.size(); ++i) {
        check_budget(budgets[i], "--budget");
        for (size_t j = 0; j < i; ++j)
            if (same_budget(budgets[j], budgets[i]))
                throw Error(fmt::format("--budget: {:g} is listed twice", budgets[i]));
    }
}

void check_record_identity(const nlohmann::json& record_sweep, const nlohmann::json& identity,
                           const std::filesystem::path& path) {
    for (const auto& [key, value] : identity.items())
        if (!record_sweep.contains(key) || record_sweep[key] != value)
            throw Error(
                fmt::format("{}: written by a different sweep ({} was {}, now {}); use another --out or "
                            "remove the old records",
                            path.string(), key,
                            record_sweep.contains(key) ? record_sweep[key].dump() : "absent", value.dump()));
}

SweepStats run_sweep(const Session& session, const SweepSuite& suite, const JobControl& job,
                     const SweepProgressFn& on_progress) {
    (void)session;
    using Clock = std::chrono::steady_clock;
    std::error_code ec;
    std::filesystem::create_directories(suite.out_dir / "records", ec);
    if (ec) throw Error(suite.out_dir.string() + ": cannot create the records directory: " + ec.message());
    // A run killed while writing left temporaries beside its records (write_file_atomic): never records.
    if (const int stale = remove_stale_temporaries(suite.out_dir))
        spdlog::info("removed {} temporary file(s) an interrupted run left in {}", stale,
                     suite.out_dir.string());

    // What is there already, and what each of this shard's documents still misses.
    struct Pending {
        int64_t document;
        std::vector<SweepSeries> missing;
    };
    SweepStats stats;
    std::vector<Pending> pending;
    int64_t index = -1;  // the order of the documents that exist, which the shards deal out
    for (int64_t d = 0; d < suite.documents; ++d) {
        if (suite.exists && !suite.exists(d)) continue;
        if (!suite.shard.owns(++index)) continue;
        Pending p{d, {}};
        for (const SweepSeries& s : suite.series) {
            ++stats.total;
            std::optional<std::filesystem::path> found;
            if (suite.find_record) {
                found = suite.find_record(d, s);
            } else {
                const std::filesystem::path path = suite.record_path(d, s);
                if (std::filesystem::exists(path)) found = path;
            }
            if (!found) {
                p.missing.push_back(s);
                continue;
            }
            suite.check_record(*found);
            ++stats.skipped;
        }
        if (!p.missing.empty()) pending.push_back(std::move(p));
    }
    write_sweep_file(suite.out_dir, suite.grid, suite.identity);  // after the records' checks, which name one

    SweepProgress progress;
    progress.total = stats.total;
    progress.skipped = progress.done = stats.skipped;
    const auto t_start = Clock::now();
    auto report = [&]() {
        progress.estimate(std::chrono::duration<double>(Clock::now() - t_start).count());
        if (on_progress) on_progress(progress);
    };
    report();

    for (const Pending& p : pending) {
        check_cancel(job);
        progress.cell = suite.label(p.document);
        progress.stage = "generate";
        progress.stage_done = progress.stage_total = 0;
        report();
        const std::unique_ptr<SweepDocument> doc = suite.make_document(p.document);

        // The methods and budgets with a missing record. Where only some pairs of them are missing (a grid
        // extended by a budget, say), the others run too but their records are not rewritten.
        CompareRequest req = doc->request();
        req.methods.clear();
        req.budgets.clear();
        for (const SweepSeries& s : p.missing) {
            if (std::find(req.methods.begin(), req.methods.end(), s.method) == req.methods.end())
                req.methods.push_back(s.method);
            if (method_takes_budget(s.method) &&
                std::none_of(req.budgets.begin(), req.budgets.end(),
                             [&](double b) { return same_budget(b, s.budget); }))
                req.budgets.push_back(s.budget);
        }
        req.settings = suite.settings;
        req.mode = suite.mode;
        req.skip_infeasible = true;
        req.attention_output_error = false;  // records keep answers and scores, not distortion
        JobControl inner;
        inner.cancel = job.cancel;
        inner.progress = [&](const std::string& stage, int64_t done, int64_t total) {
            progress.stage = stage;
            progress.stage_done = done;
            progress.stage_total = total;
            report();
        };
        const auto t0 = Clock::now();
        const CompareResult result = run_compare(session, req, inner);
        const double document_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        ++stats.documents;

        for (const MethodRun& run : result.runs) {
            const auto wanted = std::find_if(p.missing.begin(), p.missing.end(), [&](const SweepSeries& s) {
                return s.method == run.method && same_budget(s.budget, run.budget);
            });
            if (wanted == p.missing.end()) continue;
            // The series' directory is made with its first record: a budget that never ran leaves none.
            const std::filesystem::path path = suite.record_path(p.document, *wanted);
            std::filesystem::create_directories(path.parent_path(), ec);
            if (ec)
                throw Error(path.parent_path().string() +
                            ": cannot create the records directory: " + ec.message());
            write_file_atomic(path, doc->record(run, result, document_ms).dump(2) + "\n");
            ++stats.computed;
            ++progress.computed;
            ++progress.done;
        }
        progress.stage.clear();
        progress.stage_done = progress.stage_total = 0;
        report();
        if (job.progress) job.progress(suite.name, progress.done, progress.total);
    }
    return stats;
}

}  // namespace varrate
