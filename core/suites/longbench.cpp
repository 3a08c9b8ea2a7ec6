#include "core/suites/longbench.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_io.h"
#include "base/json_field.h"
#include "core/data_paths.h"
#include "models/tokenizer/chat_template.h"
#include "models/tokenizer/tokenizer.h"

namespace varrate {

namespace {

// Never produced by a tokenizer's text; marks the end of the compressed part inside the rendered chat prompt.
const std::string kSplitMark = "\x01\x02varrate-longbench-split\x02\x01";

// LongBench's Chinese datasets: their prompts are not shipped, and two of their metrics need jieba.
const char* const kChineseDatasets[] = {"multifieldqa_zh", "dureader", "vcsum", "lsht",
                                        "passage_retrieval_zh"};

// A JSON value in a message, cut short (a context can be megabytes).
std::string brief(const nlohmann::json& v) {
    std::string s = v.dump();
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    return s;
}

std::vector<std::string> string_list(const nlohmann::json& v, const std::string& where, const char* field) {
    if (!v.is_array())
        throw Error(fmt::format("{}: \"{}\" must be a list of strings, got {}", where, field, brief(v)));
    std::vector<std::string> out;
    for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_string())
            throw Error(fmt::format("{}: \"{}\"[{}] must be a string, got {}", where, field, i, brief(v[i])));
        out.push_back(v[i].get<std::string>());
    }
    return out;
}

const nlohmann::json& required(const nlohmann::json& j, const char* field, const std::string& where) {
    const auto it = j.find(field);
    if (it == j.end()) throw Error(fmt::format("{}: no \"{}\" field", where, field));
    return *it;
}

std::string required_string(const nlohmann::json& j, const char* field, const std::string& where) {
    const auto& v = required(j, field, where);
    if (!v.is_string())
        throw Error(fmt::format("{}: \"{}\" must be a string, got {}", where, field, brief(v)));
    return v.get<std::string>();
}

LongBenchSample parse_sample(const nlohmann::json& j, const std::string& where, int64_t line) {
    if (!j.is_object()) throw Error(fmt::format("{}: expected a JSON object, got {}", where, brief(j)));
    LongBenchSample s;
    s.line = line;
    s.id = required_string(j, "_id", where);
    s.dataset = required_string(j, "dataset", where);
    if (s.dataset.empty()) throw Error(where + ": \"dataset\" is empty");
    s.input = required_string(j, "input", where);
    s.context = required_string(j, "context", where);
    s.answers = string_list(required(j, "answers", where), where, "answers");
    if (s.answers.empty()) throw Error(where + ": \"answers\" is empty (a sample needs a gold answer)");
    const auto& length = required(j, "length", where);
    if (!length.is_number_integer() || length.get<int64_t>() < 0)
        throw Error(
            fmt::format("{}: \"length\" must be a non-negative integer, got {}", where, brief(length)));
    s.length = length.get<int64_t>();
    const auto& classes = required(j, "all_classes", where);
    if (!classes.is_null()) s.all_classes = string_list(classes, where, "all_classes");
    return s;
}

// A template as literal text and its two fields, in order; Error on anything str.format would read
// differently (other fields, conversions, format specs, a lone brace).
struct TemplatePiece {
    bool field = false;
    std::string text;  // the literal, or the field's name
};

std::vector<TemplatePiece> parse_template(const std::string& t, const std::string& where) {
    std::vector<TemplatePiece> out;
    std::string lit;
    int n_context = 0, n_input = 0;
    for (size_t i = 0; i < t.size(); ++i) {
        if (t[i] == '{' && i + 1 < t.size() && t[i + 1] == '{') {
            lit += '{';
            ++i;
        } else if (t[i] == '}' && i + 1 < t.size() && t[i + 1] == '}') {
            lit += '}';
            ++i;
        } else if (t[i] == '{') {
            const size_t end = t.find('}', i);
            if (end == std::string::npos) throw Error(where + ": the prompt has a '{' without its '}'");
            const std::string name = t.substr(i + 1, end - i - 1);
            if (name != "context" && name != "input")
                throw Error(where + ": the prompt has the placeholder {" + name +
                            "}; only {context} and {input} are filled (write {{ and }} for braces)");
            (name == "context" ? n_context : n_input) += 1;
            if (!lit.empty()) out.push_back({false, lit});
            lit.clear();
            out.push_back({true, name});
            i = end;
        } else if (t[i] == '}') {
            throw Error(where + ": the prompt has a '}' without its '{' (write }} for a brace)");
        } else {
            lit += t[i];
        }
    }
    if (!lit.empty()) out.push_back({false, lit});
    if (n_context != 1)
        throw Error(fmt::format("{}: the prompt must have {{context}} exactly once (it has it {} times)",
                                where, n_context));
    if (n_input > 1)
        throw Error(fmt::format("{}: the prompt may have {{input}} at most once (it has it {} times)", where,
                                n_input));
    return out;
}

void check_allowed_fields(const nlohmann::json& j, std::initializer_list<const char*> allowed,
                          const std::string& where) {
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return it.key() == a; })) {
            std::string list;
            for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
            throw Error(where + ": unknown field '" + it.key() + "' (known: " + list + ")");
        }
    }
}

LongBenchDataset parse_dataset(const std::string& name, const nlohmann::json& e, const std::string& where) {
    if (!e.is_object()) throw Error(where + ": expected a JSON object, got " + brief(e));
    check_allowed_fields(
        e, {"prompt", "max_new_tokens", "metric", "chat_template", "first_line_only", "stop_at_newline"},
        where);
    LongBenchDataset d;
    d.name = name;
    d.prompt = required_string(e, "prompt", where);
    parse_template(d.prompt, where);
    const auto& max_new = required(e, "max_new_tokens", where);
    if (!max_new.is_number_integer() || max_new.get<int64_t>() < 1)
        throw Error(where + ": \"max_new_tokens\" must be an integer >= 1, got " + brief(max_new));
    d.max_new_tokens = max_new.get<int64_t>();
    try {
        d.metric = parse_longbench_metric(required_string(e, "metric", where));
    } catch (const Error& err) {
        if (std::string(err.what()).rfind(where, 0) == 0) throw;
        throw Error(where + ": " + err.what());
    }
    d.chat_template = json_field<bool>(e, "chat_template", where, true);
    d.first_line_only = json_field<bool>(e, "first_line_only", where, false);
    d.stop_at_newline = json_field<bool>(e, "stop_at_newline", where, false);
    return d;
}

std::string sample_where(const LongBenchDataset& d, const LongBenchSample& s) {
    return fmt::format("LongBench {} sample {} (line {})", d.name, s.id, s.line);
}

void check_scoring_inputs(const LongBenchDataset& d, const std::vector<LongBenchSample>& samples,
                          const std::vector<std::string>& predictions) {
    if (samples.size() != predictions.size())
        throw Error(fmt::format("LongBench {}: {} predictions for {} samples", d.name, predictions.size(),
                                samples.size()));
    if (samples.empty()) throw Error("LongBench " + d.name + ": no sample to score");
    for (const auto& s : samples)
        if (s.dataset != d.name && s.dataset != d.name + "_e")
            throw Error(sample_where(d, s) + " is of dataset '" + s.dataset + "'");
}

double sample_score(const LongBenchDataset& d, const LongBenchSample& s, const std::string& prediction,
                    FuzzRatio fuzz) {
    try {
        return longbench_sample_score(d.metric, d.first_line_only, prediction, s.answers, s.all_classes,
                                      fuzz);
    } catch (const Error& e) {
        throw Error(sample_where(d, s) + ": " + e.what());
    }
}

// numpy's sum of a float64 array (pairwise: blocks of up to 128 summed with 8 accumulators), so that the
// means below are numpy's to the last bit.
double numpy_sum(const double* a, size_t n) {
    if (n < 8) {
        double r = 0.0;  // numpy starts from -0.0 and adds; the same for these non-negative scores
        for (size_t i = 0; i < n; ++i) r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        for (size_t k = 0; k < 8; ++k) r[k] = a[k];
        size_t i = 8;
        for (; i < n - n % 8; i += 8)
            for (size_t k = 0; k < 8; ++k) r[k] += a[i + k];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; ++i) res += a[i];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return numpy_sum(a, n2) + numpy_sum(a + n2, n - n2);
}

}  // namespace

std::vector<LongBenchSample> parse_longbench_jsonl(const std::string& text, const std::string& where) {
    std::vector<LongBenchSample> out;
    int64_t line_no = 0;
    for (size_t start = 0; start < text.size();) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(start, end - start);
        start = end + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        const std::string at = where + ":" + std::to_string(line_no);
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range (1e999)
            std::string msg = e.what();  // "[json.exception.parse_error.101] parse error at line 1, ..."
            const size_t cut = msg.find("] ");
            if (cut != std::string::npos) msg = msg.substr(cut + 2);
            throw Error(at + ": not a JSON line (" + msg + ")");
        }
        out.push_back(parse_sample(j, at, line_no));
    }
    if (out.empty()) throw Error(where + ": no LongBench sample (the file is empty)");
    return out;
}

std::vector<LongBenchSample> read_longbench_jsonl(const std::filesystem::path& path) {
    return parse_longbench_jsonl(read_text_file(path), path.string());
}

const LongBenchDataset& LongBenchConfig::dataset(const std::string& name) const {
    auto find = [&](const std::string& n) {
        return std::find_if(datasets.begin(), datasets.end(), [&](const auto& d) { return d.name == n; });
    };
    auto it = find(name);
    if (it == datasets.end() && name.size() > 2 && name.compare(name.size() - 2, 2, "_e") == 0)
        it = find(name.substr(0, name.size() - 2));
    if (it != datasets.end()) return *it;
    for (const char* zh : kChineseDatasets)
        if (name == zh)
            throw Error(
                where + ": no prompt for '" + name +
                "': LongBench's Chinese datasets are not supported (qa_f1_zh_score and rouge_zh_score need "
                "jieba's word segmentation, which is not implemented)");
    std::string known;
    for (const auto& d : datasets) known += (known.empty() ? "" : ", ") + d.name;
    throw Error(where + ": no LongBench dataset '" + name + "' (known: " + known + ")");
}

LongBenchConfig parse_longbench_config(const nlohmann::json& j, const std::string& where) {
    if (!j.is_object()) throw Error(where + ": expected a JSON object");
    check_allowed_fields(j, {"source", "datasets"}, where);
    LongBenchConfig c;
    c.where = where;
    c.source = json_field<std::string>(j, "source", where, "");
    const auto& datasets = required(j, "datasets", where);
    if (!datasets.is_object() || datasets.empty())
        throw Error(where + ": \"datasets\" must be an object with one entry per dataset");
    for (auto it = datasets.begin(); it != datasets.end(); ++it)  // nlohmann's object: sorted by name
        c.datasets.push_back(parse_dataset(it.key(), it.value(), where + ": dataset '" + it.key() + "'"));
    return c;
}

LongBenchConfig load_longbench_config(const std::filesystem::path& path) {
    return parse_longbench_config(read_json_file(path), path.string());
}

std::string find_longbench_config() {
    std::error_code ec;
    for (const auto& root : data_roots()) {
        const auto p = std::filesystem::path(root) / "eval" / "longbench.json";
        if (std::filesystem::is_regular_file(p, ec)) return p.string();
    }
    return "";
}

LongBenchPromptText split_longbench_prompt(const LongBenchDataset& d, const LongBenchSample& s) {
    LongBenchPromptText out;
    bool after_context = false;
    for (const auto& p : parse_template(d.prompt, "LongBench dataset '" + d.name + "'")) {
        const std::string& text = !p.field ? p.text : p.text == "context" ? s.context : s.input;
        (after_context ? out.question : out.compressed) += text;
        if (p.field && p.text == "context") after_context = true;
    }
    return out;
}

std::string longbench_prompt(const LongBenchDataset& d, const LongBenchSample& s) {
    const auto parts = split_longbench_prompt(d, s);
    return parts.compressed + parts.question;
}

namespace {

// pred.py's cut; nullopt when the text fits.
std::optional<std::string> truncated(const Tokenizer& tok, const std::string& text, int64_t max_tokens) {
    if (max_tokens < 2)
        throw Error(
            fmt::format("a prompt limit of {} tokens leaves nothing of the prompt (at least 2)", max_tokens));
    const auto ids = tok.encode(text, true);
    if (static_cast<int64_t>(ids.size()) <= max_tokens) return std::nullopt;
    const auto half = static_cast<ptrdiff_t>(max_tokens / 2);
    const std::vector<int64_t> head(ids.begin(), ids.begin() + half), tail(ids.end() - half, ids.end());
    return longbench_decode(tok, head) + longbench_decode(tok, tail);
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
    std::string out;
    size_t at = 0;
    for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size())
        out.append(s, at, hit - at).append(to);
    s = out.append(s, at, std::string::npos);
}

}  // namespace

std::string clean_up_tokenization(std::string text) {
    // transformers' fixed list, applied one after the other as its chained str.replace calls
    static const std::pair<const char*, const char*> kSteps[] = {
        {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
        {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : kSteps) replace_all(text, from, to);
    return text;
}

std::string longbench_decode(const Tokenizer& tokenizer, const std::vector<int64_t>& ids) {
    std::string text = tokenizer.decode(ids, true);
    return tokenizer.clean_up_tokenization_spaces() ? clean_up_tokenization(std::move(text)) : text;
}

std::string truncate_middle(const Tokenizer& tokenizer, const std::string& text, int64_t max_tokens) {
    auto cut = truncated(tokenizer, text, max_tokens);
    return cut ? *cut : text;
}

LongBenchPrompt build_longbench_prompt(const Tokenizer& tokenizer, const LongBenchDataset& d,
                                       const LongBenchSample& s, int64_t max_prompt_tokens, bool chat) {
    auto text = split_longbench_prompt(d, s);
    LongBenchPrompt out;
    if (max_prompt_tokens > 0) {
        if (auto cut = truncated(tokenizer, text.compressed + text.question, max_prompt_tokens)) {
            // The cut is in the middle; the kept end must still hold the whole question part to split there
            // (as the decode left it: transformers' clean-up may have joined " ," or " n't" in it).
            const std::string q = tokenizer.clean_up_tokenization_spaces()
                                      ? clean_up_tokenization(text.question)
                                      : text.question;
            if (cut->size() < q.size() || cut->compare(cut->size() - q.size(), q.size(), q) != 0)
                throw Error(fmt::format(
                    "{}: truncating the prompt to {} tokens cuts into the question part ({} tokens; the end "
                    "keeps {}); raise the limit",
                    sample_where(d, s), max_prompt_tokens, tokenizer.encode(q, false).size(),
                    max_prompt_tokens / 2));
            text.compressed = cut->substr(0, cut->size() - q.size());
            text.question = q;
            out.truncated = true;
        }
    }
    out.chat = chat && d.chat_template && !tokenizer.chat_template().empty();
    if (!out.chat) {
        out.parts.context_ids = tokenizer.encode(text.compressed, true);
        if (!text.question.empty()) out.parts.question_ids = tokenizer.encode(text.question, false);
        return out;
    }
    const std::string rendered =
        render_chat(tokenizer, {{"user", text.compressed + kSplitMark + text.question}}, true);
    const size_t at = rendered.find(kSplitMark);
    if (at == std::string::npos)
        throw Error(sample_where(d, s) + ": the chat template dropped the message; cannot split the prompt");
    out.parts.context_ids = tokenizer.encode(rendered.substr(0, at), false);
    out.parts.question_ids = tokenizer.encode(rendered.substr(at + kSplitMark.size()), false);
    return out;
}

double longbench_dataset_score(const LongBenchDataset& d, const std::vector<LongBenchSample>& samples,
                               const std::vector<std::string>& predictions, FuzzRatio fuzz) {
    check_scoring_inputs(d, samples, predictions);
    double total = 0.0;  // eval.py: a running sum, then 100 * total / n
    for (size_t i = 0; i < samples.size(); ++i) total += sample_score(d, samples[i], predictions[i], fuzz);
    return 100 * total / static_cast<double>(samples.size());
}

LongBenchEScores longbench_e_scores(const LongBenchDataset& d, const std::vector<LongBenchSample>& samples,
                                    const std::vector<std::string>& predictions, FuzzRatio fuzz) {
    check_scoring_inputs(d, samples, predictions);
    std::vector<double> buckets[3];
    for (size_t i = 0; i < samples.size(); ++i) {
        const int64_t len = samples[i].length;
        const size_t bucket = len < 4000 ? 0 : (len < 8000 ? 1 : 2);
        buckets[bucket].push_back(sample_score(d, samples[i], predictions[i], fuzz));
    }
    auto mean100 = [](const std::vector<double>& v) {
        if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
        return 100 * (numpy_sum(v.data(), v.size()) / static_cast<double>(v.size()));
    };
    return {mean100(buckets[0]), mean100(buckets[1]), mean100(buckets[2])};
}

}  // namespace varrate
