#include "core/suites/rate_distortion.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/codec_json.h"
#include "codec/registry.h"
#include "codec/settings_table.h"
#include "core/capture.h"
#include "core/probe.h"
#include "core/prompt.h"
#include "core/suites/niah_record.h"
#include "models/tokenizer/tokenizer.h"

namespace varrate {

namespace {

using Clock = SteadyClock;

// Grid points are compared with a tolerance: "0.1" parsed twice is the same double, but a grid built by
// arithmetic need not be.
bool same_kappa(double a, double b) {
    return std::abs(a - b) <= 1e-12;
}

std::vector<double> checked_kappas(const RdRequest& req) {
    if (req.kappas.empty()) throw Error("--kappas: no budget given");
    std::vector<double> k = req.kappas;
    for (double b : k) check_budget(b, "--kappas");
    std::sort(k.begin(), k.end());
    for (size_t i = 1; i < k.size(); ++i)
        if (same_kappa(k[i], k[i - 1])) throw Error(fmt::format("--kappas: {} is given twice", k[i]));
    for (double a : req.answer_at)
        if (std::none_of(k.begin(), k.end(), [&](double b) { return same_kappa(a, b); }))
            throw Error(fmt::format("--answer-at: {} is not one of the --kappas ({})", a, fmt::join(k, ",")));
    return k;
}

void validate(const RdRequest& req) {
    if (req.methods.empty()) throw Error("--methods: no method named");
    for (const auto& m : req.methods) method_needs_basis(m);  // throws for an unknown name
    for (size_t i = 0; i < req.methods.size(); ++i)
        for (size_t j = 0; j < i; ++j)
            if (req.methods[i] == req.methods[j])
                throw Error("--methods: " + req.methods[i] + " is given twice");
    if (req.documents.empty()) throw Error("rate-distortion: no documents to measure");
    if (req.max_new_tokens < 1) throw Error("--max-new-tokens must be at least 1");
    for (const RdDocument& d : req.documents) {
        if (!d.answers.empty() && d.answers.size() != d.questions.size())
            throw Error(
                fmt::format("document {}: {} expected answers for {} questions: give one --answer per "
                            "--question",
                            d.id, d.answers.size(), d.questions.size()));
        if (!d.answer_prefixes.empty() && d.answer_prefixes.size() != d.questions.size())
            throw Error(fmt::format("document {}: {} answer prefixes for {} questions", d.id,
                                    d.answer_prefixes.size(), d.questions.size()));
        if (req.mode == CompressionMode::QueryAgnostic)
            for (size_t q = 0; q < d.questions.size(); ++q)
                if (d.questions[q].find_first_not_of(" \t\r\n") == std::string::npos)
                    throw Error(fmt::format("document {}: question {} is empty", d.id, q + 1));
    }
}

// The prompt parts of a document's questions (one empty question when it has none: distortion only).
std::vector<PromptParts> document_parts(const Tokenizer& tok, const RdDocument& d, bool chat) {
    std::vector<PromptParts> parts;
    const size_t n = std::max<size_t>(1, d.questions.size());
    for (size_t q = 0; q < n; ++q)
        parts.push_back(build_prompt(tok, d.context, d.questions.empty() ? std::string() : d.questions[q],
                                     chat, d.answer_prefixes.empty() ? std::string() : d.answer_prefixes[q]));
    return parts;
}

// A point's distortion from one allocation: per layer, and the whole cache's accounted footprint.
void measure(RdSample& s, const std::vector<LayerAllocation>& alloc) {
    int64_t stored = 0, full = 0;
    for (const LayerAllocation& a : alloc) {
        const LayerDiagnostics& d = a.diagnostics;
        s.layers.push_back(
            {d.footprint, d.mean_rel_error, d.weighted_rel_error, d.attn_output_error, d.mean_rank});
        stored += d.stored_bytes;
        full += d.full_bytes;
        s.basis_bytes += d.basis_bytes;
    }
    s.footprint = full > 0 ? static_cast<double>(stored) / static_cast<double>(full) : 1.0;
}

// Means over the measured samples (and their layers); Wilson interval of the scored answers.
void aggregate(RdPoint& p) {
    p.documents = p.infeasible = p.answered = p.correct = 0;
    p.layers.clear();
    double fp = 0;
    for (const RdSample& s : p.samples) {
        if (!s.infeasible.empty()) {
            ++p.infeasible;
            continue;
        }
        if (p.layers.empty()) p.layers.resize(s.layers.size());
        if (s.layers.size() != p.layers.size())
            throw Error(fmt::format("{} at kappa {}: samples with {} and {} layers", p.method, p.kappa,
                                    s.layers.size(), p.layers.size()));
        ++p.documents;
        fp += s.footprint;
        for (size_t l = 0; l < s.layers.size(); ++l) {
            RdLayer& m = p.layers[l];
            const RdLayer& x = s.layers[l];
            m.footprint += x.footprint;
            m.mean_rel_error += x.mean_rel_error;
            m.weighted_rel_error += x.weighted_rel_error;
            m.attn_output_error += x.attn_output_error;
            m.mean_rank += x.mean_rank;
        }
        p.answered += static_cast<int64_t>(s.correct.size());
        for (int c : s.correct) p.correct += c != 0 ? 1 : 0;
    }
    p.ci = wilson_interval(p.correct, p.answered);
    if (p.documents == 0) return;
    const double n = static_cast<double>(p.documents);
    p.footprint = fp / n;
    p.mean_rel_error = p.weighted_rel_error = p.attn_output_error = 0;
    for (RdLayer& m : p.layers) {
        m.footprint /= n;
        m.mean_rel_error /= n;
        m.weighted_rel_error /= n;
        m.attn_output_error /= n;
        m.mean_rank /= n;
        p.mean_rel_error += m.mean_rel_error;
        p.weighted_rel_error += m.weighted_rel_error;
        p.attn_output_error += m.attn_output_error;
    }
    const double n_layer = static_cast<double>(std::max<size_t>(1, p.layers.size()));
    p.mean_rel_error /= n_layer;
    p.weighted_rel_error /= n_layer;
    p.attn_output_error /= n_layer;
}

}  // namespace

std::vector<double> default_rd_answer_at() {
    return {0.05, 0.1, 0.2};
}

std::vector<RdDocument> niah_rd_documents(const Tokenizer& tokenizer, const NiahDocOptions& options,
                                          const std::vector<int64_t>& lengths,
                                          const std::vector<double>& depths, int64_t samples) {
    if (lengths.empty()) throw Error("--lengths: no context length given");
    if (depths.empty()) throw Error("--depths: no depth given");
    if (samples < 1) throw Error("--samples must be at least 1");
    NiahGenerator gen(tokenizer, options);
    std::vector<RdDocument> docs;
    for (int64_t length : lengths)
        for (double depth : depths)
            for (int64_t sample = 0; sample < samples; ++sample) {
                const NiahDocument n = gen.generate(length, depth, sample);
                RdDocument d;
                d.id = fmt::format("L{}-d{}-s{}", length, niah_depth_label(depth), sample);
                d.context = n.context;
                d.questions = {n.question};
                d.answers = {n.expected};
                d.answer_prefixes = {n.answer_prefix};
                d.context_length = length;
                d.depth_percent = depth;
                d.sample = sample;
                docs.push_back(std::move(d));
            }
    return docs;
}

const RdPoint* RdResult::find(const std::string& method, double kappa) const {
    for (const RdPoint& p : points)
        if (p.method == method && same_kappa(p.kappa, kappa)) return &p;
    return nullptr;
}

RdResult run_rate_distortion(const Session& s, const RdRequest& req, const JobControl& job) {
    validate(req);
    const std::vector<double> kappas = checked_kappas(req);
    const auto t_start = Clock::now();
    const Tokenizer& tok = s.tokenizer();
    RdResult result;

    // The points, method-major: `full` once at kappa 1 (answered whenever any point is), the others at
    // every kappa. first[m] .. first[m + 1] are method m's points.
    std::vector<size_t> first;
    for (const std::string& name : req.methods) {
        first.push_back(result.points.size());
        for (double k : kappas) {
            RdPoint p;
            p.method = name;
            p.kappa = method_takes_budget(name) ? k : 1.0;
            p.answer_point = !method_takes_budget(name)
                                 ? !req.answer_at.empty()
                                 : std::any_of(req.answer_at.begin(), req.answer_at.end(),
                                               [&](double a) { return same_kappa(a, k); });
            result.points.push_back(std::move(p));
            if (!method_takes_budget(name)) break;
        }
    }
    first.push_back(result.points.size());

    // Tokenise every document first, so that the positions warning names the longest one before any prefill.
    std::vector<std::vector<PromptParts>> parts;
    int64_t longest = 0;
    for (const RdDocument& d : req.documents) {
        parts.push_back(document_parts(tok, d, req.chat));
        result.document_tokens.push_back(static_cast<int64_t>(parts.back()[0].context_ids.size()));
        for (const PromptParts& p : parts.back())
            longest = std::max<int64_t>(
                longest,
                static_cast<int64_t>(p.context_ids.size() + p.question_ids.size() + p.prefix_ids.size()));
    }
    const std::string beyond =
        positions_warning(s.model().config(), longest + req.max_new_tokens,
                          fmt::format("the longest prompt ({} tokens) plus up to {} generated tokens",
                                      longest, req.max_new_tokens));
    if (!beyond.empty()) result.warnings.push_back(beyond);
    const bool needs_basis = std::any_of(req.methods.begin(), req.methods.end(), method_needs_basis);

    int64_t n_steps = 0;
    for (size_t di = 0; di < req.documents.size(); ++di)
        n_steps += static_cast<int64_t>(result.points.size()) *
                   (req.mode == CompressionMode::QueryAware ? static_cast<int64_t>(parts[di].size()) : 1);
    int64_t step = 0;
    // Inner stages report nothing of their own (the point's line says where the run is); they still cancel.
    JobControl quiet;
    quiet.cancel = job.cancel;

    for (size_t di = 0; di < req.documents.size(); ++di) {
        const RdDocument& doc = req.documents[di];
        const std::vector<PromptParts>& dp = parts[di];
        const std::string where = fmt::format("{} ({}/{})", doc.id, di + 1, req.documents.size());
        check_cancel(job);
        std::shared_ptr<const Basis> basis;
        if (needs_basis) {
            const auto t0 = Clock::now();
            job.report("basis " + where, step, n_steps);
            basis = s.basis_for(dp[0].context_ids, req.settings, quiet);
            result.timing.basis += ms_since(t0);
            if (result.basis_source.empty())
                result.basis_source = basis->info().self_calibrated ? "self-calibrated" : s.basis_source();
        }
        // Query-agnostic: one capture of the context answers every question; query-aware: one per question.
        const size_t n_capture = req.mode == CompressionMode::QueryAware ? dp.size() : 1;
        for (size_t ci = 0; ci < n_capture; ++ci) {
            std::vector<int64_t> ids = dp[ci].context_ids;
            if (req.mode == CompressionMode::QueryAware)
                ids.insert(ids.end(), dp[ci].question_ids.begin(), dp[ci].question_ids.end());
            job.report("prefill " + where, step, n_steps);
            const int64_t question_in_prefix = req.mode == CompressionMode::QueryAware
                                                   ? static_cast<int64_t>(dp[ci].question_ids.size())
                                                   : 0;
            PrefillCapture capture = capture_prefill(s.model(), ids, req.settings, quiet,
                                                     ForwardOptions().chunk_size, true, question_in_prefix);
            result.timing.prefill += capture.prefill_ms;
            // The extra passes the methods read (the question's attention, KVzip's reconstruction), once per
            // capture as compare runs them: the question is this capture's (the first one's when one
            // query-agnostic capture answers them all).
            ProbeRequest probes;
            probes.needs = probe_needs(req.methods);
            probes.chat = req.chat;
            probes.question_in_prefix = question_in_prefix;
            if (probes.needs.question) {
                probes.question_ids = dp[ci].question_ids;
                probes.question_ids.insert(probes.question_ids.end(), dp[ci].prefix_ids.begin(),
                                           dp[ci].prefix_ids.end());
            }
            if (probes.needs.any() || probes.question_in_prefix > 0) {
                const auto t0 = Clock::now();
                add_probes(s, capture, probes, quiet);
                result.timing.prefill += ms_since(t0);
            }
            std::vector<size_t> asked;  // the questions answered from this capture
            if (!doc.questions.empty()) {
                if (req.mode == CompressionMode::QueryAware)
                    asked = {ci};
                else
                    for (size_t q = 0; q < dp.size(); ++q) asked.push_back(q);
            }

            std::vector<std::unique_ptr<CompressionMethod>> methods;  // alive as long as their analyses
            std::vector<std::unique_ptr<MethodAnalysis>> analyses;    // VarRate and flat share one
            for (size_t mi = 0; mi < req.methods.size(); ++mi) {
                const std::string& name = req.methods[mi];
                methods.push_back(
                    make_method(name, req.settings, method_needs_basis(name) ? basis : nullptr));
                MethodAnalysis* analysis = nullptr;
                std::string why_not;
                try {
                    const auto t0 = Clock::now();
                    std::vector<const MethodAnalysis*> others;
                    for (const auto& a : analyses) others.push_back(a.get());
                    analyses.push_back(
                        std::make_unique<MethodAnalysis>(*methods.back(), capture, quiet, others));
                    analysis = analyses.back().get();
                    result.timing.analyse += ms_since(t0);
                } catch (const InfeasibleBudget& e) {
                    why_not = e.what();  // no budget of this grid can be met by this capture
                }
                for (size_t pi = first[mi]; pi < first[mi + 1]; ++pi) {
                    RdPoint& point = result.points[pi];
                    check_cancel(job);
                    job.report(fmt::format("{} kappa {} {}", name, point.kappa, where), step++, n_steps);
                    RdSample sample;
                    sample.document = doc.id;
                    sample.tokens = static_cast<int64_t>(ids.size());
                    sample.infeasible = why_not;
                    if (analysis) {
                        CodecSettings budget = req.settings;
                        budget.budget = point.kappa;
                        try {
                            auto t0 = Clock::now();
                            std::vector<LayerAllocation> alloc = analysis->allocate(budget);
                            result.timing.allocate += ms_since(t0);
                            t0 = Clock::now();
                            const std::vector<LayerKV> layers = analysis->materialise(alloc);
                            result.timing.materialise += ms_since(t0);
                            measure(sample, alloc);
                            if (point.answer_point && !asked.empty()) {
                                t0 = Clock::now();
                                KVCache cache = cache_from_layers(s.model(), layers, capture.next_position,
                                                                  analysis->headwise_stores(alloc), name);
                                for (size_t q : asked) {
                                    const std::vector<int64_t> out =
                                        decode_answer(s, cache, capture.last_logits, dp[q], req.mode,
                                                      req.max_new_tokens, job);
                                    sample.answers.push_back(tok.decode(out, true));
                                    if (!doc.answers.empty())
                                        sample.correct.push_back(
                                            answer_matches(sample.answers.back(), doc.answers[q]) ? 1 : 0);
                                }
                                result.timing.decode += ms_since(t0);
                            }
                        } catch (const InfeasibleBudget& e) {
                            sample.infeasible = e.what();
                        }
                    }
                    point.samples.push_back(std::move(sample));
                }
            }
        }
    }
    for (RdPoint& p : result.points) aggregate(p);
    result.timing.total = ms_since(t_start);
    job.report("done", n_steps, n_steps);
    return result;
}

namespace {

nlohmann::json measured(double v) {
    return v >= 0 ? nlohmann::json(v) : nlohmann::json();
}

nlohmann::json layer_arrays(const std::vector<RdLayer>& layers) {
    nlohmann::json fp = nlohmann::json::array(), err = nlohmann::json::array(), w = nlohmann::json::array(),
                   attn = nlohmann::json::array(), rank = nlohmann::json::array();
    for (const RdLayer& l : layers) {
        fp.push_back(l.footprint);
        err.push_back(l.mean_rel_error);
        w.push_back(l.weighted_rel_error);
        attn.push_back(l.attn_output_error);
        rank.push_back(l.mean_rank);
    }
    return {{"footprint", fp},
            {"mean_rel_error", err},
            {"weighted_rel_error", w},
            {"attn_output_error", attn},
            {"mean_rank", rank}};
}

}  // namespace

nlohmann::json to_json(const RdResult& r, const RdRequest& req) {
    nlohmann::json j;
    j["mode"] = to_string(req.mode);
    nlohmann::json settings = to_json(req.settings);
    settings.erase("budget");  // every kappa of the grid instead
    j["settings"] = std::move(settings);
    j["kappas"] = checked_kappas(req);
    j["answer_at"] = req.answer_at;
    j["methods"] = req.methods;
    j["max_new_tokens"] = req.max_new_tokens;
    j["chat"] = req.chat;
    j["basis"] = r.basis_source;
    j["footprint"] = "accounted";  // stored bytes a compressed store would hold; the cache still holds L x D
    j["warnings"] = r.warnings;
    nlohmann::json docs = nlohmann::json::array();
    for (size_t i = 0; i < req.documents.size(); ++i) {
        const RdDocument& d = req.documents[i];
        nlohmann::json o = {{"id", d.id},
                            {"context_tokens", i < r.document_tokens.size() ? r.document_tokens[i] : 0},
                            {"questions", d.questions},
                            {"expected_answers", d.answers}};
        if (d.sample >= 0) {
            o["context_length"] = d.context_length;
            o["depth_percent"] = d.depth_percent;
            o["sample"] = d.sample;
        }
        docs.push_back(std::move(o));
    }
    j["documents"] = std::move(docs);
    nlohmann::json points = nlohmann::json::array();
    for (const RdPoint& p : r.points) {
        nlohmann::json o = {{"method", p.method},
                            {"kappa", p.kappa},
                            {"documents", p.documents},
                            {"infeasible", p.infeasible},
                            {"footprint", measured(p.footprint)},
                            {"mean_rel_error", measured(p.mean_rel_error)},
                            {"weighted_rel_error", measured(p.weighted_rel_error)},
                            {"attn_output_error", measured(p.attn_output_error)},
                            {"layers", layer_arrays(p.layers)},
                            {"answer_point", p.answer_point}};
        if (p.answer_point) {
            o["answered"] = p.answered;
            o["correct"] = p.correct;
            o["accuracy"] = measured(p.accuracy());
            o["ci95"] = {p.ci.low, p.ci.high};
        }
        nlohmann::json samples = nlohmann::json::array();
        for (const RdSample& s : p.samples) {
            nlohmann::json x = {{"document", s.document}, {"tokens", s.tokens}};
            if (!s.infeasible.empty()) {
                x["infeasible"] = s.infeasible;
            } else {
                x["footprint"] = s.footprint;
                x["basis_bytes"] = s.basis_bytes;
                x["layers"] = layer_arrays(s.layers);
                if (p.answer_point) {
                    x["answers"] = s.answers;
                    if (!s.correct.empty()) {
                        x["correct"] = nlohmann::json::array();
                        for (int c : s.correct) x["correct"].push_back(c != 0);
                    }
                }
            }
            samples.push_back(std::move(x));
        }
        o["samples"] = std::move(samples);
        points.push_back(std::move(o));
    }
    j["points"] = std::move(points);
    j["timing_ms"] = {{"prefill", r.timing.prefill},
                      {"basis", r.timing.basis},
                      {"analyse", r.timing.analyse},
                      {"allocate", r.timing.allocate},
                      {"materialise", r.timing.materialise},
                      {"decode", r.timing.decode},
                      {"total", r.timing.total}};
    return j;
}

std::string rd_csv(const RdResult& r) {
    std::ostringstream out;
    out << "method,kappa,footprint,mean_rel_error,weighted_rel_error,attn_output_error,documents,infeasible,"
           "answered,correct,accuracy,ci_low,ci_high\n";
    auto num = [](double v) { return v >= 0 ? fmt::format("{:.9g}", v) : std::string(); };
    for (const RdPoint& p : r.points) {
        out << p.method << ',' << fmt::format("{:g}", p.kappa) << ',' << num(p.footprint) << ','
            << num(p.mean_rel_error) << ',' << num(p.weighted_rel_error) << ',' << num(p.attn_output_error)
            << ',' << p.documents << ',' << p.infeasible << ',';
        if (p.answer_point)
            out << p.answered << ',' << p.correct << ',' << num(p.accuracy()) << ','
                << (p.answered > 0 ? num(p.ci.low) : "") << ',' << (p.answered > 0 ? num(p.ci.high) : "");
        else
            out << ",,,,";
        out << '\n';
    }
    return out.str();
}

}  // namespace varrate
