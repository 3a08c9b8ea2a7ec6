#include "core/compare.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <optional>
#include <sstream>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_field.h"
#include "base/stopwatch.h"
#include "codec/codec_json.h"
#include "codec/methods/pyramidkv_method.h"
#include "codec/registry.h"
#include "codec/settings_table.h"
#include "core/capture.h"
#include "core/compare_internal.h"
#include "core/exploration.h"
#include "core/prompt.h"
#include "core/token_text.h"
#include "models/generate.h"

namespace varrate {

using namespace compare_detail;

namespace {

using Clock = SteadyClock;

std::vector<int64_t> stop_ids(const Session& s) {
    std::vector<int64_t> ids = s.model().config().eos_token_ids;
    if (auto e = s.tokenizer().eos_id()) ids.push_back(*e);
    return ids;
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

bool MethodRun::schedule_fallback() const {
    return std::any_of(layers.begin(), layers.end(),
                       [](const LayerDiagnostics& d) { return d.schedule_fallback; });
}

bool answer_matches(const std::string& response, const std::string& expected) {
    const std::string want = lower_trim(expected);
    return !want.empty() && lower_trim(response).find(want) != std::string::npos;
}

std::vector<double> request_budgets(const std::vector<double>& budgets, const CodecSettings& settings) {
    check_codec_settings(settings, "codec settings");
    std::vector<double> out = budgets.empty() ? std::vector<double>{settings.budget} : budgets;
    for (double b : out) check_setting(*find_codec_setting("budget"), b, "budget list");
    return out;
}

namespace {

// The ids a question's answer is decoded after, given the compressed part.
std::vector<int64_t> decode_inputs(const PromptParts& p, CompressionMode mode) {
    std::vector<int64_t> ids;
    if (mode == CompressionMode::QueryAgnostic) ids = p.question_ids;
    ids.insert(ids.end(), p.prefix_ids.begin(), p.prefix_ids.end());
    return ids;
}

}  // namespace

namespace compare_detail {

void answer_pending(const Session& s, std::vector<PendingAnswers>& pending,
                    const std::vector<PromptParts>& parts, const CompareRequest& req, int64_t only_q,
                    const JobControl& job) {
    if (pending.empty()) return;
    std::vector<const KVCache*> caches;
    std::vector<at::Tensor> logits;
    for (const PendingAnswers& p : pending) {
        caches.push_back(&p.cache);
        logits.push_back(p.last_logits);
    }
    for (size_t qi = 0; qi < req.questions.size(); ++qi) {
        if (only_q >= 0 && static_cast<size_t>(only_q) != qi) continue;
        if (req.mode == CompressionMode::QueryAgnostic && parts[qi].question_ids.empty())
            throw Error("question " + std::to_string(qi + 1) + " is empty");
        std::vector<std::vector<int64_t>> answers =
            decode_answers(s, caches, logits, parts[qi], req.mode, req.max_new_tokens, job, req.stop_ids);
        for (size_t k = 0; k < pending.size(); ++k)
            pending[k].slot->run.answer_ids.push_back(std::move(answers[k]));
    }
    pending.clear();
}

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

void mark_infeasible(RunSlot& slot, const std::string& why) {
    MethodRun r;
    r.method = slot.run.method;
    r.budget = slot.run.budget;
    r.self_calibrated = slot.run.self_calibrated;
    r.basis_accounting = slot.run.basis_accounting;
    r.infeasible = why;
    slot.run = std::move(r);
}

}  // namespace compare_detail

std::vector<std::vector<int64_t>> decode_answers(const Session& s, const std::vector<const KVCache*>& caches,
                                                 const std::vector<at::Tensor>& last_logits,
                                                 const PromptParts& parts, CompressionMode mode,
                                                 int64_t max_new_tokens, const JobControl& job,
                                                 const std::vector<int64_t>& extra_stop_ids) {
    if (caches.size() != last_logits.size())
        throw Error(fmt::format("decode_answers: {} caches, {} logits", caches.size(), last_logits.size()));
    if (caches.empty()) return {};
    const std::vector<int64_t> ids = decode_inputs(parts, mode);
    GenerateOptions opt;
    opt.max_new_tokens = max_new_tokens;
    opt.stop_ids = stop_ids(s);
    opt.stop_ids.insert(opt.stop_ids.end(), extra_stop_ids.begin(), extra_stop_ids.end());
    opt.cancel = job.cancel;
    auto logits_of = [&](size_t first, size_t last) {
        if (!ids.empty()) return at::Tensor();  // the prompt's forward gives them
        std::vector<at::Tensor> rows;
        for (size_t k = first; k < last; ++k)
            rows.push_back(last_logits[k].select(0, last_logits[k].size(0) - 1));
        return at::stack(rows);  // [B, vocab]
    };
    // The first cache's answer is decoded alone and serves as the draft the others check in their prompt's
    // pass (generate_greedy_batch): when they agree with it, as compressed caches mostly do, that one pass
    // is all their decoding.
    std::vector<std::vector<int64_t>> out;
    auto t0 = Clock::now();
    out.push_back(
        generate_greedy_batch(s.model(), {caches.front()}, ids, logits_of(0, 1), {}, opt).front().generated);
    const double draft_ms = ms_since(t0);
    t0 = Clock::now();
    size_t first = 1;
    while (first < caches.size()) {
        // A batch pads every cache to the longest: keep the padded copy under kAnswerBatchBytes.
        size_t last = first + 1;
        int64_t longest = caches[first]->used_bytes();
        while (last < caches.size()) {
            const int64_t l = std::max(longest, caches[last]->used_bytes());
            if (l * static_cast<int64_t>(last + 1 - first) > kAnswerBatchBytes) break;
            longest = l;
            ++last;
        }
        const std::vector<const KVCache*> group(caches.begin() + first, caches.begin() + last);
        for (GenerateResult& r :
             generate_greedy_batch(s.model(), group, ids, logits_of(first, last), out.front(), opt))
            out.push_back(std::move(r.generated));
        first = last;
    }
    size_t agree = 0;
    for (size_t k = 1; k < out.size(); ++k) agree += out[k] == out.front() ? 1 : 0;
    spdlog::debug("decode_answers: first answer {:.1f} ms, {} more caches {:.1f} ms ({} agree with it)",
                  draft_ms, caches.size() - 1, ms_since(t0), agree);
    return out;
}

std::vector<int64_t> decode_answer(const Session& s, const KVCache& cache, const at::Tensor& last_logits,
                                   const PromptParts& parts, CompressionMode mode, int64_t max_new_tokens,
                                   const JobControl& job) {
    return decode_answers(s, {&cache}, {last_logits}, parts, mode, max_new_tokens, job).front();
}

namespace compare_detail {

ComparePlan plan_compare(const Session& s, const CompareRequest& req, const JobControl& job) {
    if (req.methods.empty()) throw Error("no methods to compare");
    if (!req.answers.empty() && req.answers.size() != req.questions.size())
        throw Error(fmt::format("{} expected answers for {} questions: give one --answer per --question",
                                req.answers.size(), req.questions.size()));
    if (!req.answer_prefixes.empty() && req.answer_prefixes.size() != req.questions.size())
        throw Error(
            fmt::format("{} answer prefixes for {} questions: give one --answer-prefix per --question",
                        req.answer_prefixes.size(), req.questions.size()));
    if (req.max_new_tokens < 1) throw Error("--max-new-tokens must be at least 1");
    ComparePlan plan;
    plan.budgets = request_budgets(req.budgets, req.settings);
    plan.questions = req.questions;
    if (plan.questions.empty()) plan.questions.emplace_back();  // compress only, diagnostics without answers
    if (!req.prompt_parts.empty()) {
        if (req.prompt_parts.size() != plan.questions.size())
            throw Error(fmt::format("{} prompts for {} questions: give one prompt per question",
                                    req.prompt_parts.size(), plan.questions.size()));
        for (const PromptParts& p : req.prompt_parts)
            if (p.context_ids.empty())
                throw Error("a prompt with an empty context part: nothing to compress");
        plan.parts = req.prompt_parts;
    }
    for (size_t qi = 0; req.prompt_parts.empty() && qi < plan.questions.size(); ++qi)
        plan.parts.push_back(
            build_prompt(s.tokenizer(), req.context, plan.questions[qi], req.chat,
                         req.answer_prefixes.empty() ? std::string() : req.answer_prefixes[qi]));
    size_t longest = 0;
    for (const PromptParts& p : plan.parts)
        longest = std::max(longest, p.context_ids.size() + p.question_ids.size() + p.prefix_ids.size());
    const std::string beyond =
        positions_warning(s.model().config(), static_cast<int64_t>(longest) + req.max_new_tokens,
                          fmt::format("the longest prompt ({} tokens) plus up to {} generated tokens",
                                      longest, req.max_new_tokens));
    if (!beyond.empty()) plan.skeleton.warnings.push_back(beyond);
    // Query-aware salience reads the prompt's last obs_window queries: a longer question is only partly seen.
    for (size_t qi = 0; req.mode == CompressionMode::QueryAware && qi < plan.parts.size(); ++qi) {
        const size_t q = plan.parts[qi].question_ids.size() + plan.parts[qi].prefix_ids.size();
        if (req.settings.obs_window > 0 && q > static_cast<size_t>(req.settings.obs_window))
            plan.skeleton.warnings.push_back(fmt::format(
                "question {} is {} tokens, longer than the observation window ({} tokens): the methods' "
                "salience sees only its last {} tokens; raise --obs-window to {} to cover it",
                qi + 1, q, req.settings.obs_window, req.settings.obs_window, q));
    }
    for (const auto& name : req.methods)
        if (method_needs_basis(name) && !plan.basis)
            plan.basis = s.basis_for(plan.parts[0].context_ids, req.settings, job);
    plan.skeleton.basis_source =
        plan.basis ? (plan.basis->info().self_calibrated ? "self-calibrated" : s.basis_source()) : "";
    return plan;
}

std::vector<RunSlot> make_slots(const CompareRequest& req, const ComparePlan& plan) {
    std::vector<RunSlot> slots;
    for (size_t mi = 0; mi < req.methods.size(); ++mi) {
        const std::string& name = req.methods[mi];
        for (double b : plan.budgets) {
            RunSlot slot;
            slot.method = mi;
            slot.budget = method_takes_budget(name) ? b : 1.0;
            slot.settings = req.settings;
            slot.settings.budget = b;
            slot.run.method = name;
            slot.run.budget = slot.budget;
            slot.run.self_calibrated = method_needs_basis(name) && plan.basis->info().self_calibrated;
            slot.run.basis_accounting = basis_accounting(name, slot.run.self_calibrated, slot.settings);
            slots.push_back(std::move(slot));
            if (!method_takes_budget(name)) break;  // one run whatever the budget list
        }
    }
    return slots;
}

CompareResult finish_result(const Session& s, const CompareRequest& req, const ComparePlan& plan,
                            std::vector<RunSlot> slots) {
    CompareResult result = plan.skeleton;
    for (RunSlot& slot : slots) {
        MethodRun& run = slot.run;
        if (run.infeasible.empty()) {
            for (size_t qi = 0; qi < run.answer_ids.size(); ++qi) {
                run.answers.push_back(s.tokenizer().decode(run.answer_ids[qi], true));
                if (!req.answers.empty())
                    run.correct.push_back(answer_matches(run.answers.back(), req.answers[qi]) ? 1 : 0);
            }
            add_footprint(run);
            if (run.schedule_fallback())
                result.warnings.push_back(fmt::format(
                    "{}, budget {:g}: the depth schedule is invalid at L={} (L x kappa below {} x the window "
                    "of "
                    "{}), so every layer keeps SnapKV's count, as kvpress does: this run is SnapKV's",
                    run.method, run.budget, run.layers.empty() ? 0 : run.layers.front().n_tokens,
                    PyramidKVMethod::kBeta, req.settings.obs_window));
        }
        result.runs.push_back(std::move(run));
    }
    return result;
}

ProbeRequest probe_request(const CompareRequest& req, const ComparePlan& plan, size_t ci) {
    ProbeRequest p;
    p.needs = probe_needs(req.methods);
    if (p.needs.question && !req.questions.empty())
        p.question_ids = decode_inputs(plan.parts[ci], CompressionMode::QueryAgnostic);
    p.chat = req.chat;
    if (req.mode == CompressionMode::QueryAware)
        p.question_in_prefix = static_cast<int64_t>(plan.parts[ci].question_ids.size());
    return p;
}

bool record_explored(RunSlot& slot, const ExploredRun& r, const PrefillCapture& capture, bool first_capture) {
    if (!r.infeasible.empty()) {
        mark_infeasible(slot, r.infeasible);
        return false;
    }
    // A method that reads an extra pass over the context pays for it in its analysis.
    const double probe_ms = probe_time_ms(capture, method_probe(r.method));
    slot.run.compress_ms += probe_ms + r.analyse_ms + r.allocate_ms + r.materialise_ms;
    slot.run.analyse_ms += probe_ms + r.analyse_ms;
    slot.run.prefill_ms += capture.prefill_ms;
    if (first_capture) {
        slot.run.context_ids = capture.ids;
        slot.run.layers = r.layers;
        slot.run.resident_bytes = r.resident_bytes;
    }
    return true;
}

}  // namespace compare_detail

CompareResult run_compare(const Session& s, const CompareRequest& req, const JobControl& job) {
    const ComparePlan plan = plan_compare(s, req, job);
    const std::vector<PromptParts>& parts = plan.parts;
    const std::shared_ptr<const Basis>& basis = plan.basis;
    std::vector<RunSlot> slots = make_slots(req, plan);
    int64_t capture_bytes = 0;
    auto make = [&](const RunSlot& slot) {
        const std::string& name = req.methods[slot.method];
        return make_method(name, slot.settings, method_needs_basis(name) ? basis : nullptr);
    };
    auto infeasible = [&](RunSlot& slot, const InfeasibleBudget& e) {
        // A sweep over lengths records the cell and goes on; a single run reports it.
        if (!req.skip_infeasible) throw e;
        mark_infeasible(slot, e.what());
    };
    const int64_t n_steps = static_cast<int64_t>(slots.size() * plan.questions.size());
    int64_t step = 0;
    auto progress = [&](const RunSlot& slot) {
        check_cancel(job);
        job.report("compress " + req.methods[slot.method], step++, n_steps);
    };

    for (size_t ci = 0; ci < plan.n_captures(req); ++ci) {
        const std::vector<int64_t> ids = plan.compressed_ids(req, ci);
        const int64_t only_q = req.mode == CompressionMode::QueryAware ? static_cast<int64_t>(ci) : -1;
        if (req.shared_capture) {
            CaptureExploration explored(s, ids, req.settings, basis, req.attention_output_error, job,
                                        probe_request(req, plan, ci));
            const PrefillCapture& capture = explored.capture();
            capture_bytes = std::max(capture_bytes, capture.bytes());
            std::vector<PendingAnswers> pending;
            for (RunSlot& slot : slots) {
                if (!slot.run.infeasible.empty()) continue;
                progress(slot);
                ExploredRun r =
                    explored.run(req.methods[slot.method], slot.settings, req.skip_infeasible, job);
                if (!record_explored(slot, r, capture, ci == 0)) continue;
                if (!req.questions.empty())
                    pending.push_back({&slot,
                                       cache_from_layers(s.model(), r.kv, capture.next_position, r.stores,
                                                         req.methods[slot.method]),
                                       capture.last_logits});
            }
            const auto t1 = Clock::now();
            const size_t n_answered = pending.size();
            answer_pending(s, pending, parts, req, only_q, job);
            spdlog::debug("answers of {} caches decoded together: {:.1f} ms", n_answered, ms_since(t1));
        } else {
            std::vector<PendingAnswers> pending;
            for (RunSlot& slot : slots) {
                if (!slot.run.infeasible.empty()) continue;
                progress(slot);
                try {
                    auto method = make(slot);
                    KVCache cache = s.model().new_cache();
                    InPrefillResult r =
                        compress_in_prefill(s.model(), *method, ids, cache, job, req.attention_output_error);
                    slot.run.prefill_ms += r.prefill_ms;
                    slot.run.compress_ms += r.compress_ms;
                    if (ci == 0) {
                        slot.run.context_ids = ids;
                        slot.run.layers = std::move(r.layers);
                    }
                    if (!req.questions.empty()) pending.push_back({&slot, std::move(cache), r.logits});
                } catch (const InfeasibleBudget& e) {
                    infeasible(slot, e);
                }
            }
            answer_pending(s, pending, parts, req, only_q, job);
        }
    }
    CompareResult result = finish_result(s, req, plan, std::move(slots));
    result.capture_bytes = capture_bytes;
    job.report("done", n_steps, n_steps);
    return result;
}

nlohmann::json to_json(const MethodRun& run, bool per_token) {
    nlohmann::json m;
    m["method"] = run.method;
    m["budget"] = run.budget;
    m["footprint_fraction"] = run.footprint_fraction;
    m["stored_bytes"] = run.stored_bytes;
    m["resident_bytes"] = run.resident_bytes;
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
    m["analyse_ms"] = run.analyse_ms;
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
    r.resident_bytes = json_field<int64_t>(j, "resident_bytes", where, 0);
    r.full_bytes = json_field<int64_t>(j, "full_bytes", where, 0);
    r.basis_bytes = json_field<int64_t>(j, "basis_bytes", where, 0);
    r.basis_accounting = json_field<std::string>(j, "basis_accounting", where, "");
    r.answers = json_field<std::vector<std::string>>(j, "answers", where, {});
    r.answer_ids = json_field<std::vector<std::vector<int64_t>>>(j, "answer_ids", where, {});
    r.correct = json_field<std::vector<int>>(j, "correct", where, {});  // booleans (older files: 0/1)
    r.prefill_ms = json_field<double>(j, "prefill_ms", where, 0);
    r.compress_ms = json_field<double>(j, "compress_ms", where, 0);
    r.analyse_ms = json_field<double>(j, "analyse_ms", where, 0);
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
    j["capture_bytes"] = r.capture_bytes;
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

    const std::vector<double> budgets = request_budgets(req.budgets, req.settings);
    std::shared_ptr<const Basis> basis;
    for (const auto& name : req.methods)
        if (method_needs_basis(name) && !basis) basis = s.basis_for(prefix, req.settings, job);

    // One capture of the prefix; each (method, budget) materialises its cache and scores the rest over it.
    PrefillCapture capture = capture_prefill(s.model(), prefix, req.settings, job);
    // The oracle's "question" here is the scored text itself: the queries that will read the cache.
    ProbeRequest probes;
    probes.needs = probe_needs(req.methods);
    if (probes.needs.question) probes.question_ids = rest;
    if (probes.needs.any()) add_probes(s, capture, probes, job);
    std::vector<PplRun> runs;
    std::vector<std::unique_ptr<CompressionMethod>> methods;  // alive as long as their analyses
    std::vector<std::unique_ptr<MethodAnalysis>> analyses;
    const int64_t n_methods = static_cast<int64_t>(req.methods.size());
    for (int64_t mi = 0; mi < n_methods; ++mi) {
        const std::string& name = req.methods[mi];
        check_cancel(job);
        job.report("ppl " + name, mi, n_methods);
        CodecSettings settings = req.settings;
        methods.push_back(make_method(name, settings, method_needs_basis(name) ? basis : nullptr));
        std::vector<const MethodAnalysis*> others;
        for (const auto& a : analyses) others.push_back(a.get());
        analyses.push_back(std::make_unique<MethodAnalysis>(*methods.back(), capture, job, others));
        const MethodAnalysis& analysis = *analyses.back();
        for (double b : budgets) {
            check_cancel(job);
            settings.budget = b;
            std::vector<LayerAllocation> alloc = analysis.allocate(settings);
            const std::vector<LayerKV> layers = analysis.materialise(alloc);
            KVCache cache = cache_from_layers(s.model(), layers, capture.next_position,
                                              analysis.headwise_stores(alloc), name);
            at::Tensor logits = capture.last_logits;  // [1, vocab]
            if (!rest.empty()) {
                ForwardOptions fo;
                fo.all_logits = true;
                fo.cancel = job.cancel;
                logits = at::cat({logits, s.model().forward(rest, cache, fo)}, 0);  // [n - prefix, vocab]
            }
            const at::Tensor logp = at::log_softmax(logits.to(at::kDouble), -1);
            const double nll = -logp.gather(1, targets.unsqueeze(1)).mean().item<double>();
            PplRun run;
            run.method = name;
            run.budget = method_takes_budget(name) ? b : 1.0;
            run.nll = nll;
            run.ppl = std::exp(nll);
            run.scored_tokens = targets.size(0);
            run.self_calibrated = method_needs_basis(name) && basis->info().self_calibrated;
            run.basis_accounting = basis_accounting(name, run.self_calibrated, settings);
            MethodRun tmp;
            for (LayerAllocation& a : alloc) tmp.layers.push_back(std::move(a.diagnostics));
            add_footprint(tmp);
            run.footprint_fraction = tmp.footprint_fraction;
            run.basis_bytes = tmp.basis_bytes;
            runs.push_back(run);
            if (!method_takes_budget(name)) break;
        }
    }
    return runs;
}

}  // namespace varrate
