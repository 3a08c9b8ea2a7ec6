#include "core/compare.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <sstream>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "codec/codec_json.h"
#include "codec/registry.h"
#include "core/base/error.h"
#include "core/base/json_field.h"
#include "core/prompt.h"
#include "core/token_text.h"
#include "models/generate.h"

namespace varrate {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::vector<int64_t> stop_ids(const Session& s) {
    std::vector<int64_t> ids = s.model().config().eos_token_ids;
    if (auto e = s.tokenizer().eos_id()) ids.push_back(*e);
    return ids;
}

// Greedy continuation from the logits of the last forward (models/generate.h's loop).
std::vector<int64_t> greedy_from(const Session& s, KVCache& cache, at::Tensor logits, int64_t max_new,
                                 const JobControl& job) {
    GenerateOptions opt;
    opt.max_new_tokens = max_new;
    opt.stop_ids = stop_ids(s);
    opt.cancel = job.cancel;
    return decode_greedy(s.model(), cache, logits.select(0, logits.size(0) - 1), opt).generated;
}

// Compresses through the method while the prefill runs; collects diagnostics and codec time.
struct CompressingPrefill {
    CompressionMethod* method = nullptr;
    std::vector<LayerDiagnostics> layers;
    double compress_ms = 0, prefill_ms = 0;

    at::Tensor run(const Session& s, const std::vector<int64_t>& ids, KVCache& cache,
                   const CodecSettings& settings, const JobControl& job) {
        layers.clear();
        compress_ms = 0;
        ForwardOptions fo;
        fo.cancel = job.cancel;
        fo.observer_window = settings.obs_window;
        fo.progress = job.progress;
        fo.observer = [this](const LayerCapture& cap) -> std::optional<LayerKV> {
            const auto t0 = Clock::now();
            LayerResult r = method->compress(cap);
            compress_ms += ms_since(t0);
            layers.push_back(std::move(r.diagnostics));
            return std::move(r.kv);
        };
        const auto t0 = Clock::now();
        at::Tensor logits = s.model().forward(ids, cache, fo);
        prefill_ms = ms_since(t0) - compress_ms;
        return logits;
    }
};

void add_footprint(MethodRun& run) {
    run.stored_bytes = run.full_bytes = run.basis_bytes = 0;
    for (const auto& d : run.layers) {
        run.stored_bytes += d.stored_bytes;
        run.full_bytes += d.full_bytes;
        run.basis_bytes += d.basis_bytes;
    }
    run.footprint_fraction = run.full_bytes > 0
                                 ? static_cast<double>(run.stored_bytes) / static_cast<double>(run.full_bytes)
                                 : 1.0;
}

std::string escape_csv_text(const std::string& text) {
    std::string e;
    for (char c : text) {
        switch (c) {
            case '\\':
                e += "\\\\";
                break;
            case '\n':
                e += "\\n";
                break;
            case '\r':
                e += "\\r";
                break;
            case '\t':
                e += "\\t";
                break;
            case '"':
                e += "\"\"";
                break;
            default:
                e += c;
        }
    }
    return "\"" + e + "\"";
}

std::string lower_trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return "";
    const auto e = s.find_last_not_of(" \t\r\n");
    std::string out = s.substr(b, e - b + 1);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

}  // namespace

std::string to_string(CompressionMode m) {
    return m == CompressionMode::QueryAware ? "query-aware" : "query-agnostic";
}

CompressionMode parse_mode(const std::string& s) {
    if (s == "query-aware") return CompressionMode::QueryAware;
    if (s == "query-agnostic") return CompressionMode::QueryAgnostic;
    throw Error("unknown mode '" + s + "' (use query-aware or query-agnostic)");
}

std::string basis_accounting(const std::string& method, bool self_calibrated, const CodecSettings& s) {
    if (!method_needs_basis(method)) return "no basis";
    if (!self_calibrated) return "basis file";
    return s.paper_accounting ? "basis not charged" : "basis charged";
}

bool answer_matches(const std::string& response, const std::string& expected) {
    const std::string want = lower_trim(expected);
    return !want.empty() && lower_trim(response).find(want) != std::string::npos;
}

CompareResult run_compare(const Session& s, const CompareRequest& req, const JobControl& job) {
    if (req.methods.empty()) throw Error("no methods to compare");
    if (!req.answers.empty() && req.answers.size() != req.questions.size())
        throw Error(fmt::format("{} expected answers for {} questions: give one --answer per --question",
                                req.answers.size(), req.questions.size()));
    if (!req.answer_prefixes.empty() && req.answer_prefixes.size() != req.questions.size())
        throw Error(
            fmt::format("{} answer prefixes for {} questions: give one --answer-prefix per --question",
                        req.answer_prefixes.size(), req.questions.size()));
    if (req.max_new_tokens < 1) throw Error("--max-new-tokens must be at least 1");
    const Tokenizer& tok = s.tokenizer();

    // Token ids: the context part is shared by all questions; each question adds its own part.
    std::vector<std::string> questions = req.questions;
    if (questions.empty()) questions.emplace_back();  // compress only, diagnostics without answers
    std::vector<PromptParts> parts;
    for (size_t qi = 0; qi < questions.size(); ++qi)
        parts.push_back(build_prompt(tok, req.context, questions[qi], req.chat,
                                     req.answer_prefixes.empty() ? std::string() : req.answer_prefixes[qi]));
    const std::vector<int64_t>& context_ids = parts[0].context_ids;

    std::shared_ptr<const Basis> basis;
    CompareResult result;
    size_t longest = 0;
    for (const PromptParts& p : parts)
        longest = std::max(longest, p.context_ids.size() + p.question_ids.size() + p.prefix_ids.size());
    const std::string beyond =
        positions_warning(s.model().config(), static_cast<int64_t>(longest) + req.max_new_tokens,
                          fmt::format("the longest prompt ({} tokens) plus up to {} generated tokens",
                                      longest, req.max_new_tokens));
    if (!beyond.empty()) result.warnings.push_back(beyond);
    for (const auto& name : req.methods) {
        if (method_needs_basis(name) && !basis) basis = s.basis_for(context_ids, req.settings, job);
    }
    result.basis_source = basis ? (basis->info().self_calibrated ? "self-calibrated" : s.basis_source()) : "";

    // One run per (method, budget), method-major; `full` keeps everything whatever the budget: once.
    const std::vector<double> budgets =
        req.budgets.empty() ? std::vector<double>{req.settings.budget} : req.budgets;
    std::vector<std::pair<std::string, double>> plan;
    for (const std::string& name : req.methods)
        for (size_t bi = 0; bi < budgets.size() && (bi == 0 || name != "full"); ++bi)
            plan.emplace_back(name, budgets[bi]);
    const int64_t n_methods = static_cast<int64_t>(plan.size());
    for (int64_t mi = 0; mi < n_methods; ++mi) {
        const std::string& name = plan[mi].first;
        CodecSettings settings = req.settings;
        settings.budget = plan[mi].second;
        check_cancel(job);
        if (job.progress) job.progress("compress " + name, mi, n_methods);
        auto method = make_method(name, settings, method_needs_basis(name) ? basis : nullptr);
        CompressingPrefill prefill;
        prefill.method = method.get();
        MethodRun run;
        run.method = name;
        run.budget = name == "full" ? 1.0 : settings.budget;
        run.self_calibrated = method_needs_basis(name) && basis->info().self_calibrated;
        run.basis_accounting = basis_accounting(name, run.self_calibrated, settings);

        try {
            if (req.mode == CompressionMode::QueryAgnostic) {
                // Compress the context once; every question decodes after it and the cache is restored in
                // between.
                KVCache cache = s.model().new_cache();
                prefill.run(s, context_ids, cache, settings, job);
                run.prefill_ms += prefill.prefill_ms;
                run.compress_ms += prefill.compress_ms;
                run.context_ids = context_ids;
                run.layers = prefill.layers;
                const KVCache::Snapshot compressed = cache.snapshot();
                for (size_t qi = 0; qi < req.questions.size(); ++qi) {
                    if (parts[qi].question_ids.empty())
                        throw Error("question " + std::to_string(qi + 1) + " is empty");
                    std::vector<int64_t> ids = parts[qi].question_ids;
                    ids.insert(ids.end(), parts[qi].prefix_ids.begin(), parts[qi].prefix_ids.end());
                    at::Tensor logits = s.model().forward(ids, cache);
                    run.answer_ids.push_back(greedy_from(s, cache, logits, req.max_new_tokens, job));
                    cache.restore(compressed);
                }
            } else {
                // The question is inside the compressed context: one compression per question.
                for (size_t qi = 0; qi < questions.size(); ++qi) {
                    std::vector<int64_t> ids = parts[qi].context_ids;
                    ids.insert(ids.end(), parts[qi].question_ids.begin(), parts[qi].question_ids.end());
                    KVCache cache = s.model().new_cache();
                    at::Tensor logits = prefill.run(s, ids, cache, settings, job);
                    run.prefill_ms += prefill.prefill_ms;
                    run.compress_ms += prefill.compress_ms;
                    if (qi == 0) {
                        run.context_ids = ids;
                        run.layers = prefill.layers;
                    }
                    if (!parts[qi].prefix_ids.empty())
                        logits = s.model().forward(parts[qi].prefix_ids, cache);
                    if (!req.questions.empty())
                        run.answer_ids.push_back(greedy_from(s, cache, logits, req.max_new_tokens, job));
                }
            }
            for (size_t qi = 0; qi < run.answer_ids.size(); ++qi) {
                run.answers.push_back(tok.decode(run.answer_ids[qi], true));
                if (!req.answers.empty())
                    run.correct.push_back(answer_matches(run.answers.back(), req.answers[qi]) ? 1 : 0);
            }
            add_footprint(run);
        } catch (const InfeasibleBudget& e) {
            // A sweep over lengths records the cell and goes on; a single run reports it.
            if (!req.skip_infeasible) throw;
            const std::string why = e.what();
            run = MethodRun{};
            run.method = name;
            run.budget = settings.budget;
            run.self_calibrated = method_needs_basis(name) && basis->info().self_calibrated;
            run.basis_accounting = basis_accounting(name, run.self_calibrated, settings);
            run.infeasible = why;
        }
        result.runs.push_back(std::move(run));
    }
    if (job.progress) job.progress("done", n_methods, n_methods);
    return result;
}

nlohmann::json to_json(const MethodRun& run, bool per_token) {
    nlohmann::json m;
    m["method"] = run.method;
    m["budget"] = run.budget;
    m["footprint_fraction"] = run.footprint_fraction;
    m["stored_bytes"] = run.stored_bytes;
    m["full_bytes"] = run.full_bytes;
    m["basis_bytes"] = run.basis_bytes;
    m["basis_accounting"] = run.basis_accounting;
    m["answers"] = run.answers;
    m["answer_ids"] = run.answer_ids;
    if (!run.correct.empty()) {
        m["correct"] = nlohmann::json::array();
        for (int c : run.correct) m["correct"].push_back(c != 0);
    }
    m["prefill_ms"] = run.prefill_ms;
    m["compress_ms"] = run.compress_ms;
    m["self_calibrated"] = run.self_calibrated;
    m["context_tokens"] = static_cast<int64_t>(run.context_ids.size());
    if (per_token) m["context_ids"] = run.context_ids;
    if (!run.infeasible.empty()) m["infeasible"] = run.infeasible;
    m["layers"] = nlohmann::json::array();
    for (const auto& d : run.layers) m["layers"].push_back(to_json(d, per_token));
    return m;
}

MethodRun method_run_from_json(const nlohmann::json& j, const std::string& where) {
    MethodRun r;
    r.method = json_field<std::string>(j, "method", where, "");
    if (r.method.empty()) throw Error(where + ": no method name");
    r.budget = json_field<double>(j, "budget", where, 0);
    r.footprint_fraction = json_field<double>(j, "footprint_fraction", where, 0);
    r.stored_bytes = json_field<int64_t>(j, "stored_bytes", where, 0);
    r.full_bytes = json_field<int64_t>(j, "full_bytes", where, 0);
    r.basis_bytes = json_field<int64_t>(j, "basis_bytes", where, 0);
    r.basis_accounting = json_field<std::string>(j, "basis_accounting", where, "");
    r.answers = json_field<std::vector<std::string>>(j, "answers", where, {});
    r.answer_ids = json_field<std::vector<std::vector<int64_t>>>(j, "answer_ids", where, {});
    r.correct = json_field<std::vector<int>>(j, "correct", where, {});  // booleans (older files: 0/1)
    r.prefill_ms = json_field<double>(j, "prefill_ms", where, 0);
    r.compress_ms = json_field<double>(j, "compress_ms", where, 0);
    r.self_calibrated = json_field<bool>(j, "self_calibrated", where, false);
    r.context_ids = json_field<std::vector<int64_t>>(j, "context_ids", where, {});
    r.infeasible = json_field<std::string>(j, "infeasible", where, "");
    if (j.contains("layers")) {
        if (!j["layers"].is_array()) throw Error(where + ": 'layers' is not an array");
        for (size_t l = 0; l < j["layers"].size(); ++l)
            r.layers.push_back(
                layer_diagnostics_from_json(j["layers"][l], where + " layers[" + std::to_string(l) + "]"));
    }
    return r;
}

nlohmann::json to_json(const CompareResult& r, const CompareRequest& req) {
    nlohmann::json methods = nlohmann::json::array();
    for (const MethodRun& run : r.runs) methods.push_back(to_json(run));
    nlohmann::json j;
    j["mode"] = to_string(req.mode);
    j["questions"] = req.questions;
    j["expected_answers"] = req.answers;
    if (!req.answer_prefixes.empty()) j["answer_prefixes"] = req.answer_prefixes;
    j["settings"] = to_json(req.settings);
    j["basis"] = r.basis_source;
    j["footprint"] = "accounted";  // stored bytes a compressed store would hold; the cache still holds L x D
    j["warnings"] = r.warnings;
    j["methods"] = std::move(methods);
    return j;
}

std::string rank_log_csv(const CompareResult& r, const Tokenizer& tok) {
    std::ostringstream out;
    out << "method,layer,position,token_id,token_text,salience,rank,exact,rel_error\n";
    for (const MethodRun& run : r.runs) {
        std::vector<std::string> texts;
        texts.reserve(run.context_ids.size());
        for (int64_t id : run.context_ids) texts.push_back(escape_csv_text(token_display_text(tok, id)));
        for (const LayerDiagnostics& d : run.layers) {
            const int64_t n = d.n_tokens;
            auto column = [&](const at::Tensor& t, at::ScalarType type) {
                return t.defined() ? t.to(at::kCPU, type).contiguous()
                                   : at::zeros({n}, at::TensorOptions(type));
            };
            const at::Tensor sal = column(d.salience, at::kFloat), rank = column(d.rank, at::kLong),
                             exact = column(d.exact, at::kBool), err = column(d.rel_error, at::kFloat);
            const float* ps = sal.data_ptr<float>();
            const int64_t* pr = rank.data_ptr<int64_t>();
            const bool* pe = exact.data_ptr<bool>();
            const float* pq = err.data_ptr<float>();
            for (int64_t t = 0; t < n && t < static_cast<int64_t>(texts.size()); ++t) {
                out << run.method << ',' << d.layer << ',' << t << ',' << run.context_ids[t] << ','
                    << texts[t] << ',' << fmt::format("{:.6g}", ps[t]) << ',' << pr[t] << ','
                    << (pe[t] ? 1 : 0) << ',' << fmt::format("{:.6g}", pq[t]) << '\n';
            }
        }
    }
    return out.str();
}

std::vector<PplRun> run_perplexity(const Session& s, const PplRequest& req, const JobControl& job) {
    const int64_t n = static_cast<int64_t>(req.ids.size());
    if (req.prefix_tokens < 1 || req.prefix_tokens >= n)
        throw Error(fmt::format("--prefix-tokens {} must be between 1 and the text length minus one ({})",
                                req.prefix_tokens, n - 1));
    const std::string beyond =
        positions_warning(s.model().config(), n, fmt::format("the scored text ({} tokens)", n));
    if (!beyond.empty() && !req.allow_beyond_positions)
        throw Error(beyond +
                    "; a perplexity over them is refused: shorten the text, or pass --allow-beyond-positions "
                    "to score it anyway");
    const std::vector<int64_t> prefix(req.ids.begin(), req.ids.begin() + req.prefix_tokens);
    const std::vector<int64_t> rest(req.ids.begin() + req.prefix_tokens, req.ids.end() - 1);
    const at::Tensor targets =
        at::tensor(std::vector<int64_t>(req.ids.begin() + req.prefix_tokens, req.ids.end()));

    std::shared_ptr<const Basis> basis;
    for (const auto& name : req.methods)
        if (method_needs_basis(name) && !basis) basis = s.basis_for(prefix, req.settings, job);

    std::vector<PplRun> runs;
    for (size_t mi = 0; mi < req.methods.size(); ++mi) {
        const std::string& name = req.methods[mi];
        check_cancel(job);
        if (job.progress)
            job.progress("ppl " + name, static_cast<int64_t>(mi), static_cast<int64_t>(req.methods.size()));
        auto method = make_method(name, req.settings, method_needs_basis(name) ? basis : nullptr);
        CompressingPrefill prefill;
        prefill.method = method.get();
        KVCache cache = s.model().new_cache();
        at::Tensor first = prefill.run(s, prefix, cache, req.settings, job);  // [1, vocab]
        at::Tensor logits = first;
        if (!rest.empty()) {
            ForwardOptions fo;
            fo.all_logits = true;
            fo.cancel = job.cancel;
            logits = at::cat({first, s.model().forward(rest, cache, fo)}, 0);  // [n - prefix, vocab]
        }
        const at::Tensor logp = at::log_softmax(logits.to(at::kDouble), -1);
        const double nll = -logp.gather(1, targets.unsqueeze(1)).mean().item<double>();
        PplRun run;
        run.method = name;
        run.nll = nll;
        run.ppl = std::exp(nll);
        run.scored_tokens = targets.size(0);
        run.self_calibrated = method_needs_basis(name) && basis->info().self_calibrated;
        run.basis_accounting = basis_accounting(name, run.self_calibrated, req.settings);
        MethodRun tmp;
        tmp.layers = prefill.layers;
        add_footprint(tmp);
        run.footprint_fraction = tmp.footprint_fraction;
        run.basis_bytes = tmp.basis_bytes;
        runs.push_back(run);
    }
    return runs;
}

}  // namespace varrate
