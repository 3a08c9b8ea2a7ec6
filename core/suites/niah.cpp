#include "core/suites/niah.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_io.h"
#include "base/hash.h"
#include "base/json_field.h"
#include "codec/codec_json.h"
#include "codec/registry.h"
#include "codec/settings_table.h"
#include "core/prompt.h"
#include "core/suites/budget_list.h"
#include "core/suites/demo_corpus.h"
#include "core/suites/needle_probe.h"
#include "core/suites/stats.h"
#include "core/suites/sweep_files.h"
#include "core/suites/sweep_runner.h"
#include "models/tokenizer/tokenizer.h"

namespace varrate {

// ---- sweep ------------------------------------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;

void validate(const NiahSweepOptions& o) {
    if (o.lengths.empty()) throw Error("--lengths: no context length given");
    for (int64_t l : o.lengths)
        if (l < 1) throw Error(fmt::format("--lengths: {} is not a positive token count", l));
    if (o.depths.empty()) throw Error("--depths: no depth given");
    for (double d : o.depths)
        if (!(d >= 0 && d <= 100)) throw Error(fmt::format("--depths: {} is not between 0 and 100", d));
    if (o.samples < 1) throw Error("--samples must be at least 1");
    if (o.methods.empty()) throw Error("--methods: no method named");
    for (const auto& m : o.methods) method_needs_basis(m);  // throws for an unknown name
    check_budget_list(niah_budgets(o));
    if (o.out_dir.empty()) throw Error("--out: no output directory given");
    if (o.max_new_tokens < 1) throw Error("--max-new-tokens must be at least 1");
}

// What makes two records comparable: a record written under a different identity is not reused.
nlohmann::json sweep_identity(const Session& s, const NiahSweepOptions& o) {
    return {{"model_fingerprint", s.fingerprint()},
            {"mode", to_string(o.mode)},
            {"settings", identity_settings(to_json(o.settings))},
            {"basis", s.basis() ? s.basis_source() : "self-calibrated"},
            {"seed", o.doc.seed},
            {"needles", to_string(o.doc.needles)},
            {"haystack", o.haystack_name},
            {"haystack_hash", fmt::format("{:016x}", fnv1a(o.doc.haystack_text, kFingerprintSeed))},
            {"distractors", o.doc.distractors},
            {"chat", o.doc.chat},
            {"max_new_tokens", o.max_new_tokens}};
}

void check_same_sweep(const NiahRecord& record, const nlohmann::json& identity,
                      const std::filesystem::path& where) {
    nlohmann::json theirs = record.sweep;
    // Records of single-budget sweeps carry their budget in the settings; records from before the needle
    // protocols were made with today's "fixed".
    if (theirs.contains("settings") && theirs["settings"].is_object())
        theirs["settings"] = identity_settings(theirs["settings"]);
    if (!theirs.contains("needles")) theirs["needles"] = to_string(NeedleProtocol::Fixed);
    if (theirs["needles"] != identity["needles"])
        throw Error(fmt::format(
            "{}: written with --needles {}, this sweep asks for --needles {}; the two protocols' records "
            "are not comparable: use another --out, or --needles {} to resume this one",
            where.string(), theirs["needles"].is_string() ? theirs["needles"].get<std::string>() : "?",
            identity["needles"].get<std::string>(),
            theirs["needles"].is_string() ? theirs["needles"].get<std::string>() : "?"));
    for (const auto& [key, value] : identity.items()) {
        if (!theirs.contains(key) || theirs[key] != value)
            throw Error(fmt::format(
                "{}: written by a different sweep ({} was {}, now {}); use another --out or "
                "remove the old records",
                where.string(), key, theirs.contains(key) ? theirs[key].dump() : "absent", value.dump()));
    }
}

// The asked needle's value tokens and, together, the distractors' ones: what the method kept of each.
nlohmann::json retention_json(const Tokenizer& tok, const MethodRun& run, const NiahDocument& doc) {
    auto measure = [&](const std::vector<std::string>& sentences) -> nlohmann::json {
        std::vector<int64_t> positions;
        for (const std::string& sentence : sentences) {
            const auto found = find_needle_value_tokens(tok, run.context_ids, sentence);
            if (!found) return nullptr;
            positions.insert(positions.end(), found->begin(), found->end());
        }
        const auto r = needle_retention(run.layers, positions);
        return r ? to_json(*r) : nlohmann::json();
    };
    nlohmann::json j = {{"needle", measure({doc.needle})}};
    if (!doc.distractor_needles.empty()) j["distractors"] = measure(doc.distractor_needles);
    return j;
}

nlohmann::json grid_json(const NiahSweepOptions& o) {
    return {{"kind", "niah"},
            {"methods", o.methods},
            {"budgets", niah_budgets(o)},
            {"lengths", o.lengths},
            {"depths", o.depths},
            {"samples", o.samples},
            {"mode", to_string(o.mode)},
            {"needles", to_string(o.doc.needles)}};
}

}  // namespace

nlohmann::json niah_grid_json(const NiahSweepOptions& o) {
    return grid_json(o);
}

NiahSweepOptions read_niah_grid(const std::filesystem::path& out_dir) {
    const nlohmann::json grid = read_sweep_file(out_dir)["grid"];
    const std::string where = (out_dir / kSweepFile).string();
    if (grid["kind"] != "niah")
        throw Error(where + ": the sweep file of a " + grid["kind"].dump() + " sweep, not NIAH");
    NiahSweepOptions o;
    try {
        o.methods = json_required<std::vector<std::string>>(grid, "methods", where + ": grid");
        o.budgets = json_required<std::vector<double>>(grid, "budgets", where + ": grid");
        o.lengths = json_required<std::vector<int64_t>>(grid, "lengths", where + ": grid");
        o.depths = json_required<std::vector<double>>(grid, "depths", where + ": grid");
        o.samples = json_required<int64_t>(grid, "samples", where + ": grid");
        o.mode = parse_mode(json_required<std::string>(grid, "mode", where + ": grid"));
        o.doc.needles = parse_needle_protocol(json_required<std::string>(grid, "needles", where + ": grid"));
    } catch (const nlohmann::json::exception& e) {
        throw Error(where + ": grid: " + e.what());
    }
    o.out_dir = out_dir;
    validate(o);
    return o;
}

namespace {

// One NIAH document: a haystack with its needle, asked once.
class NiahSweepDocument : public SweepDocument {
  public:
    NiahSweepDocument(const Session& session, const NiahSweepOptions& o, const nlohmann::json& identity,
                      NiahDocument doc, int64_t length, double depth, int64_t sample)
        : session_(session),
          o_(o),
          identity_(identity),
          doc_(std::move(doc)),
          length_(length),
          depth_(depth),
          sample_(sample) {}

    CompareRequest request() override {
        CompareRequest req;
        req.context = doc_.context;
        req.questions = {doc_.question};
        req.answers = {doc_.expected};
        req.answer_prefixes = {doc_.answer_prefix};
        req.max_new_tokens = o_.max_new_tokens;
        req.chat = o_.doc.chat;
        return req;
    }

    nlohmann::json record(const MethodRun& run, const CompareResult& result, double document_ms) override {
        NiahRecord r;
        fill_run_fields(r, session_, run, o_.mode, document_ms, identity_);
        r.context_length = length_;
        r.depth_percent = depth_;
        r.sample = sample_;
        r.needle = doc_.needle;
        r.question = doc_.question;
        r.answer_prefix = doc_.answer_prefix;
        r.expected = doc_.expected;
        r.response = run.answers.empty() ? "" : run.answers[0];
        if (run.infeasible.empty())
            r.correct = !run.correct.empty() && run.correct[0] != 0;
        else
            r.infeasible = run.infeasible;
        r.distractor_needles = doc_.distractor_needles;
        r.context_tokens = doc_.context_tokens;
        r.haystack_tokens = doc_.haystack_tokens;
        r.needle_token_offset = doc_.needle_token_offset;
        if (run.infeasible.empty()) r.needle_retention = retention_json(session_.tokenizer(), run, doc_);
        r.self_calibrated = run.self_calibrated;
        r.methods_in_document = static_cast<int64_t>(result.runs.size());
        return to_json(r);
    }

  private:
    const Session& session_;
    const NiahSweepOptions& o_;
    const nlohmann::json& identity_;
    NiahDocument doc_;
    int64_t length_;
    double depth_;
    int64_t sample_;
};

}  // namespace

NiahSweepStats run_niah_sweep(const Session& session, const NiahSweepOptions& o, const JobControl& job,
                              const NiahProgressFn& on_progress) {
    validate(o);
    const int64_t max_pos = session.model().config().max_position_embeddings;
    for (int64_t l : o.lengths)
        if (max_pos > 0 && l + o.max_new_tokens > max_pos)
            spdlog::warn("context length {} + {} answer tokens exceeds the model's {} positions", l,
                         o.max_new_tokens, max_pos);
    const nlohmann::json identity = sweep_identity(session, o);

    // Documents in the order lengths x depths x samples.
    const int64_t n_depths = static_cast<int64_t>(o.depths.size());
    struct Cell {
        int64_t length;
        double depth;
        int64_t sample;
    };
    const auto cell = [&](int64_t d) {
        return Cell{o.lengths[static_cast<size_t>(d / (n_depths * o.samples))],
                    o.depths[static_cast<size_t>((d / o.samples) % n_depths)], d % o.samples};
    };
    SweepSuite suite;
    suite.name = "niah";
    suite.out_dir = o.out_dir;
    suite.grid = grid_json(o);
    suite.identity = identity;
    suite.series = sweep_series(o.methods, niah_budgets(o));
    suite.documents = static_cast<int64_t>(o.lengths.size()) * n_depths * o.samples;
    suite.shard = o.shard;
    suite.settings = o.settings;
    suite.mode = o.mode;
    suite.label = [&](int64_t d) {
        const Cell c = cell(d);
        return fmt::format("L={} depth={}% sample={}", c.length, niah_depth_label(c.depth), c.sample);
    };
    suite.record_path = [&](int64_t d, const SweepSeries& s) {
        const Cell c = cell(d);
        return niah_record_path(o.out_dir, s.method, s.budget, c.length, c.depth, c.sample);
    };
    suite.find_record = [&](int64_t d, const SweepSeries& s) {
        const Cell c = cell(d);
        return find_niah_record(o.out_dir, s.method, s.budget, c.length, c.depth, c.sample);
    };
    suite.check_record = [&](const std::filesystem::path& path) {
        check_same_sweep(read_niah_record(path), identity, path);
    };
    NiahGenerator generator(session.tokenizer(), o.doc);
    suite.make_document = [&](int64_t d) -> std::unique_ptr<SweepDocument> {
        const Cell c = cell(d);
        return std::make_unique<NiahSweepDocument>(session, o, identity,
                                                   generator.generate(c.length, c.depth, c.sample), c.length,
                                                   c.depth, c.sample);
    };
    return run_sweep(session, suite, job, on_progress);
}

// ---- summary ----------------------------------------------------------------------------------------

std::vector<double> niah_budgets(const NiahSweepOptions& o) {
    return o.budgets.empty() ? std::vector<double>{o.settings.budget} : o.budgets;
}

std::string NiahSeries::label() const {
    return method_takes_budget(method) ? fmt::format("{}, budget {:g}", method, budget) : method;
}

std::vector<NiahSeries> niah_series(const std::vector<std::string>& methods,
                                    const std::vector<double>& budgets) {
    std::vector<NiahSeries> out;
    for (const std::string& m : methods) {
        if (!method_takes_budget(m)) {
            out.push_back({m, 1.0});
            continue;
        }
        for (double b : budgets) out.push_back({m, b});
    }
    return out;
}

const NiahCell& NiahSummary::cell(size_t ser, size_t depth, size_t length) const {
    return cells.at((ser * depths.size() + depth) * lengths.size() + length);
}

NiahCell NiahSummary::overall(size_t ser) const {
    NiahCell all;
    all.method = series.at(ser).method;
    all.budget = series.at(ser).budget;
    all.context_length = 0;
    all.depth_percent = -1;  // every length and depth
    for (size_t d = 0; d < depths.size(); ++d)
        for (size_t l = 0; l < lengths.size(); ++l) {
            const NiahCell& c = cell(ser, d, l);
            all.n += c.n;
            all.correct += c.correct;
            all.infeasible += c.infeasible;
        }
    return all;
}

NiahSummary summarize_niah(const NiahSweepOptions& o) {
    NiahSummary s;
    s.mode = to_string(o.mode);
    s.needles = to_string(o.doc.needles);
    s.methods = o.methods;
    s.budgets = niah_budgets(o);
    s.series = niah_series(o.methods, s.budgets);
    s.lengths = o.lengths;
    s.depths = o.depths;
    s.samples = o.samples;
    s.footprint.assign(s.series.size(), 0.0);
    s.schedule_fallback.assign(s.series.size(), 0);
    for (size_t si = 0; si < s.series.size(); ++si) {
        const NiahSeries& ser = s.series[si];
        int64_t measured = 0;
        for (double depth : o.depths)
            for (int64_t length : o.lengths) {
                NiahCell c;
                c.method = ser.method;
                c.budget = ser.budget;
                c.context_length = length;
                c.depth_percent = depth;
                for (int64_t sample = 0; sample < o.samples; ++sample) {
                    const auto path =
                        find_niah_record(o.out_dir, ser.method, ser.budget, length, depth, sample);
                    if (!path) continue;
                    const NiahRecord r = read_niah_record(*path);
                    if (!r.infeasible.empty()) {
                        ++c.infeasible;
                        continue;
                    }
                    if (s.model.empty()) s.model = r.model;
                    s.footprint[si] += r.footprint_fraction;
                    s.schedule_fallback[si] += r.schedule_fallback ? 1 : 0;
                    ++measured;
                    ++c.n;
                    const bool correct = *r.correct;
                    c.correct += correct ? 1 : 0;
                    if (r.needle_retention.is_object()) {
                        const nlohmann::json& kept = r.needle_retention;
                        NiahRetention& t = s.retention[ser.key()];
                        (correct ? t.needle_correct : t.needle_wrong)
                            .add(kept.value("needle", nlohmann::json()));
                        t.distractors.add(kept.value("distractors", nlohmann::json()));
                    }
                }
                s.cells.push_back(c);
            }
        if (measured > 0) s.footprint[si] /= static_cast<double>(measured);
    }
    return s;
}

namespace {

// accuracy, ci_low and ci_high of a cell (null where it has no records).
void put_accuracy(nlohmann::json& j, const NiahCell& c) {
    if (c.n == 0) {
        j["accuracy"] = j["ci_low"] = j["ci_high"] = nullptr;
        return;
    }
    const Interval ci = c.interval();
    j["accuracy"] = c.accuracy();
    j["ci_low"] = ci.low;
    j["ci_high"] = ci.high;
}

}  // namespace

nlohmann::json to_json(const NiahSummary& s) {
    nlohmann::json j;
    j["model"] = s.model;
    j["mode"] = s.mode;
    j["needles"] = s.needles;
    j["methods"] = s.methods;
    j["budgets"] = s.budgets;
    j["lengths"] = s.lengths;
    j["depths"] = s.depths;
    j["samples"] = s.samples;
    j["confidence"] = "Wilson score interval, 95 % (ci_low, ci_high)";
    // Every per-method object below is keyed by the series' key: "full", "varrate/k0.1" (the records
    // subdirectory).
    nlohmann::json series = nlohmann::json::array();
    for (const NiahSeries& ser : s.series)
        series.push_back({{"key", ser.key()},
                          {"method", ser.method},
                          {"budget", ser.budget},
                          {"takes_budget", method_takes_budget(ser.method)},
                          {"footprint", s.footprint.empty() ? 0.0 : s.footprint[&ser - s.series.data()]},
                          {"schedule_fallback",
                           s.schedule_fallback.empty() ? 0 : s.schedule_fallback[&ser - s.series.data()]}});
    j["series"] = std::move(series);
    // accuracy[series][length][depth], null where no record exists yet.
    nlohmann::json acc = nlohmann::json::object();
    nlohmann::json overall = nlohmann::json::object();
    for (size_t m = 0; m < s.series.size(); ++m) {
        nlohmann::json per_length = nlohmann::json::object();
        for (size_t l = 0; l < s.lengths.size(); ++l) {
            nlohmann::json per_depth = nlohmann::json::object();
            for (size_t d = 0; d < s.depths.size(); ++d) {
                const NiahCell& c = s.cell(m, d, l);
                per_depth[niah_depth_label(s.depths[d])] =
                    c.n > 0 ? nlohmann::json(c.accuracy()) : nlohmann::json();
            }
            per_length[std::to_string(s.lengths[l])] = std::move(per_depth);
        }
        acc[s.series[m].key()] = std::move(per_length);
        const NiahCell all = s.overall(m);
        nlohmann::json o = {{"method", all.method},
                            {"budget", all.budget},
                            {"n", all.n},
                            {"correct", all.correct},
                            {"infeasible", all.infeasible}};
        put_accuracy(o, all);
        overall[s.series[m].key()] = std::move(o);
    }
    j["accuracy"] = std::move(acc);
    j["overall"] = std::move(overall);
    nlohmann::json cells = nlohmann::json::array();
    for (const NiahCell& c : s.cells) {
        nlohmann::json cj = {{"method", c.method},
                             {"budget", c.budget},
                             {"context_length", c.context_length},
                             {"depth_percent", c.depth_percent},
                             {"n", c.n},
                             {"correct", c.correct},
                             {"infeasible", c.infeasible}};
        put_accuracy(cj, c);
        cells.push_back(std::move(cj));
    }
    j["cells"] = std::move(cells);
    nlohmann::json retention = nlohmann::json::object();
    for (const auto& [key, t] : s.retention) {
        RetentionTally all = t.needle_correct;
        all.merge(t.needle_wrong);
        retention[key] = {{"needle",
                           {{"all", all.to_json()},
                            {"correct", t.needle_correct.to_json()},
                            {"wrong", t.needle_wrong.to_json()}}},
                          {"distractors", t.distractors.to_json()}};
    }
    // Means over the records of what each method kept of the needle's value (core/needle_probe.h).
    j["needle_retention"] = std::move(retention);
    return j;
}

std::string summary_csv(const NiahSummary& s) {
    std::ostringstream out;
    out << "method,budget,context_length,depth_percent,n,correct,accuracy,ci_low,ci_high,infeasible\n";
    for (const NiahCell& c : s.cells) {
        out << c.method << ',' << fmt::format("{:g}", c.budget) << ',' << c.context_length << ','
            << niah_depth_label(c.depth_percent) << ',' << c.n << ',' << c.correct << ',';
        if (c.n > 0) {
            const Interval ci = c.interval();
            out << fmt::format("{:.6g},{:.6g},{:.6g}", c.accuracy(), ci.low, ci.high);
        } else {
            out << ",,";
        }
        out << ',' << c.infeasible << '\n';
    }
    return out.str();
}

void write_niah_summary(const NiahSummary& s, const std::filesystem::path& out_dir) {
    write_file_atomic(out_dir / "summary.json", to_json(s).dump(2) + "\n");
    write_file_atomic(out_dir / "summary.csv", summary_csv(s));
}

}  // namespace varrate
