#include "app/train/train_data.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <future>

#include "base/error.h"
#include "core/prompt.h"
#include "core/suites/ruler_words.h"

namespace varrate::train {

int64_t Curriculum::pick_length(uint64_t seed, int64_t step, int64_t total_steps) const {
    const double progress =
        total_steps > 0 ? static_cast<double>(step) / static_cast<double>(total_steps) : 1.0;
    size_t unlocked = 0;
    for (size_t i = 0; i < lengths.size(); ++i)
        if (i < unlock_at.size() && progress >= unlock_at[i]) unlocked = i + 1;
    if (unlocked == 0)
        throw Error("curriculum: no document length is unlocked at step " + std::to_string(step));
    DemoTextGenerator gen(mix_seed(seed, mix_seed(0x4C454E, static_cast<uint64_t>(step))));
    // The newest length gets half of the steps, so that the model spends time at the longest distances.
    if (unlocked > 1 && gen.below(2) == 0) return lengths[unlocked - 1];
    return lengths[gen.below(unlocked)];
}

DemoData::DemoData(const Tokenizer& tok, int64_t pad_id) : tok_(tok), pad_id_(pad_id) {
    if (!tok.bos_id() || !tok.eos_id()) throw Error("demo data: the tokenizer needs BOS and EOS tokens");
}

namespace {

void append_scored(Sequence& s, const std::vector<int64_t>& ids) {
    for (int64_t id : ids) {
        s.score_pos.push_back(static_cast<int64_t>(s.ids.size()) - 1);
        s.ids.push_back(id);
    }
}

}  // namespace

// The prompt ends with the answer prefix "... for <key> is"; the reply's tokens (the digits, then the full
// stop) are the tokens after "<key> is" in the asked needle (keys are unique within a document, so the first
// match is the needle). Each position that predicts a reply token gets that token's needle position as its
// target.
void DemoData::add_copy_targets(Sequence& s, size_t doc_end, const std::vector<int64_t>& reply,
                                int copy_heads) const {
    const size_t reply_start = s.ids.size();
    if (reply_start < 2) return;
    const int64_t key_id = s.ids[reply_start - 2];
    const int64_t is_id = s.ids[reply_start - 1];
    for (size_t p = 0; p + 2 < doc_end; ++p) {
        if (s.ids[p] != key_id || s.ids[p + 1] != is_id) continue;
        // reply = digits + full stop; the needle's "is" and digits gather its key, and so do the reply's.
        if (reply.size() > 1) {
            add_gather_targets(s, static_cast<int64_t>(p), reply.size() - 1);
            add_gather_targets(s, static_cast<int64_t>(reply_start) - 2, reply.size() - 1);
        }
        for (size_t j = 0; j < reply.size() && p + 2 + j < doc_end; ++j) {
            const size_t source = p + 2 + j;
            if (s.ids[source] != reply[j]) break;  // the end of the number (the full stop matches too)
            for (int h = 0; h < copy_heads; ++h) {
                s.copy_query.push_back(static_cast<int64_t>(reply_start + j) - 1);
                s.copy_source.push_back(static_cast<int64_t>(source));
                s.copy_head.push_back(h);
            }
        }
        return;
    }
}

void DemoData::add_gather_targets(Sequence& s, int64_t key_pos, size_t n_digits) {
    for (int64_t q = key_pos + 1; q <= key_pos + 1 + static_cast<int64_t>(n_digits); ++q) {
        s.gather_query.push_back(q);
        s.gather_source.push_back(key_pos);
    }
}

Sequence DemoData::training_sequence(uint64_t doc_seed, int64_t doc_tokens, int n_distractors, double depth,
                                     int n_questions, double repeat_share, int copy_heads) const {
    const DemoDocument doc = make_document(doc_seed, doc_tokens, n_distractors, depth, repeat_share);
    Sequence s;
    s.doc_tokens = doc.n_tokens;
    s.n_distractors = n_distractors;
    s.depth = depth;
    // Questions: the target first, then other needles of the document in a seeded order.
    std::vector<const Needle*> asked = {&doc.needle};
    std::vector<const Needle*> others;
    for (const auto& d : doc.distractors) others.push_back(&d);
    DemoTextGenerator gen(mix_seed(doc_seed, 0x5155));
    while (!others.empty() && static_cast<int>(asked.size()) < n_questions) {
        const size_t i = gen.below(others.size());
        asked.push_back(others[i]);
        others.erase(others.begin() + static_cast<std::ptrdiff_t>(i));
    }
    // The plain prompt of core/prompt.h (context, then "Question: ...\nAnswer: <answer prefix>"), encoded in
    // the same two parts as compare and niah encode it; further questions follow the first answer the same
    // way.
    s.ids = tok_.encode(doc.text, true);
    const size_t doc_end = s.ids.size();
    for (size_t q = 0; q < asked.size(); ++q) {
        const std::string& key = asked[q]->key;
        const auto question = tok_.encode(
            plain_question_suffix(DemoTextGenerator::question(key), DemoTextGenerator::answer_prefix(key)),
            false);
        s.ids.insert(s.ids.end(), question.begin(), question.end());
        const auto reply = tok_.encode(" " + asked[q]->value + ".", false);
        add_copy_targets(s, doc_end, reply, copy_heads);
        append_scored(s, reply);
        if (q == 0) s.first_answer_end = static_cast<int64_t>(s.score_pos.size());
    }
    append_scored(s, {*tok_.eos_id()});
    return s;
}

Sequence DemoData::eval_sequence(const DemoDocument& doc) const {
    Sequence s;
    s.doc_tokens = doc.n_tokens;
    s.n_distractors = static_cast<int>(doc.distractors.size());
    const PromptParts parts = build_prompt(tok_, doc.text, doc.question, false, doc.answer_prefix);
    s.ids = parts.context_ids;
    s.ids.insert(s.ids.end(), parts.question_ids.begin(), parts.question_ids.end());
    s.ids.insert(s.ids.end(), parts.prefix_ids.begin(), parts.prefix_ids.end());
    append_scored(s, tok_.encode(doc.answer, false));
    s.first_answer_end = static_cast<int64_t>(s.score_pos.size());
    return s;
}

std::string ruler_reply(const RulerSample& sample, std::vector<std::pair<size_t, size_t>>* spans) {
    if (sample.outputs.empty()) throw Error("RULER " + sample.task + " sample has no references");
    std::vector<std::string> refs = sample.outputs;
    std::string reply;
    auto add = [&](const std::string& before, const std::string& ref) {
        reply += before;
        if (spans) spans->emplace_back(reply.size(), reply.size() + ref.size());
        reply += ref;
    };
    // Position of a reference in the context: where the model can read it (words: as a whole list entry).
    auto first_at = [&](const std::string& ref, const std::string& lead) {
        const size_t at = sample.context.find(lead + ref);
        return at == std::string::npos ? sample.context.size() : at;
    };
    auto by_position = [&](const std::string& lead) {
        std::stable_sort(refs.begin(), refs.end(), [&](const std::string& a, const std::string& b) {
            return first_at(a, lead) < first_at(b, lead);
        });
    };
    if (sample.task == "vt") {
        for (size_t i = 0; i < refs.size(); ++i) add(i ? " " : "", refs[i]);
    } else if (sample.task == "cwe") {
        by_position(". ");
        for (size_t i = 0; i < refs.size(); ++i) add(" " + std::to_string(i + 1) + ". ", refs[i]);
    } else if (sample.task == "fwe") {
        for (const auto& r : refs) add(" ", r);
    } else {
        if (sample.task == "niah_multivalue") by_position(" ");
        for (size_t i = 0; i < refs.size(); ++i) add(i ? ", " : " ", refs[i]);
        reply += ".";
    }
    return reply;
}

std::vector<std::string> ruler_tokenizer_texts(const Tokenizer& base_tokenizer) {
    std::vector<std::string> texts;
    const RulerWordLists words = load_ruler_word_lists();
    for (const auto* list : {&words.nouns, &words.adjectives, &words.verbs})
        for (const auto& w : *list) texts.push_back(" " + w);
    for (const auto& w : words.nouns) texts.push_back(w);
    RulerOptions options;
    options.seed = 0x52554C4552544F4Bull & ~kEvalSeedBit;
    RulerGenerator gen(base_tokenizer, options);
    for (const auto& task : ruler_task_names()) {
        const RulerSample s = gen.generate(task, 2048, 0);
        texts.push_back(s.context + plain_question_suffix(s.question, s.answer_prefix) + ruler_reply(s));
    }
    return texts;
}

Sequence DemoData::ruler_sequence(const RulerSample& sample, int copy_heads) const {
    Sequence s;
    const PromptParts parts =
        build_prompt(tok_, sample.context, sample.question, false, sample.answer_prefix);
    s.ids = parts.context_ids;
    const size_t context_end = s.ids.size();
    s.doc_tokens = static_cast<int64_t>(context_end);
    s.ids.insert(s.ids.end(), parts.question_ids.begin(), parts.question_ids.end());
    s.ids.insert(s.ids.end(), parts.prefix_ids.begin(), parts.prefix_ids.end());
    std::vector<std::pair<size_t, size_t>> spans;
    const std::string reply = ruler_reply(sample, &spans);
    // The reply is encoded piece by piece (text between references, then each reference with the character
    // before it when that is a space, as the context has it), so that every reference's tokens are known.
    size_t done = 0;
    for (const auto& [b, e] : spans) {
        const size_t start = b > done && reply[b - 1] == ' ' ? b - 1 : b;
        if (start > done) append_scored(s, tok_.encode(reply.substr(done, start - done), false));
        const std::vector<int64_t> ref = tok_.encode(reply.substr(start, e - start), false);
        // Copy targets when the reference occurs exactly once in the context.
        std::vector<size_t> found;
        for (size_t p = 0; p + ref.size() <= context_end && found.size() < 2; ++p)
            if (std::equal(ref.begin(), ref.end(), s.ids.begin() + static_cast<std::ptrdiff_t>(p)))
                found.push_back(p);
        if (found.size() == 1)
            for (size_t j = 0; j < ref.size(); ++j)
                for (int h = 0; h < copy_heads; ++h) {
                    s.copy_query.push_back(static_cast<int64_t>(s.ids.size() + j) - 1);
                    s.copy_source.push_back(static_cast<int64_t>(found[0] + j));
                    s.copy_head.push_back(h);
                }
        append_scored(s, ref);
        done = e;
    }
    if (done < reply.size()) append_scored(s, tok_.encode(reply.substr(done), false));
    s.first_answer_end = static_cast<int64_t>(s.score_pos.size());
    append_scored(s, {*tok_.eos_id()});
    return s;
}

namespace {

// Runs make(begin, stride) on min(n, threads) threads, worker w taking items w, w + stride, ...: the items
// are independent, so the result does not depend on the thread count.
void run_strided(size_t n, int threads, const std::function<void(size_t, size_t)>& make) {
    const size_t workers = std::min<size_t>(n, static_cast<size_t>(std::max(1, threads)));
    std::vector<std::future<void>> jobs;
    for (size_t w = 1; w < workers; ++w) jobs.push_back(std::async(std::launch::async, make, w, workers));
    make(0, workers);
    for (auto& j : jobs) j.get();
}

// One generator per thread (it caches the word lists and is not thread-safe), remade when the tokenizer or
// the seed changes.
RulerGenerator& thread_generator(const Tokenizer& tok, uint64_t seed) {
    thread_local std::unique_ptr<RulerGenerator> gen;
    thread_local const Tokenizer* gen_tok = nullptr;
    thread_local uint64_t gen_seed = 0;
    if (!gen || gen_tok != &tok || gen_seed != seed) {
        RulerOptions options;
        options.seed = seed;
        gen = std::make_unique<RulerGenerator>(tok, options);
        gen_tok = &tok;
        gen_seed = seed;
    }
    return *gen;
}

}  // namespace

std::vector<Sequence> DemoData::ruler_step(uint64_t seed, int64_t step, int64_t tokens_per_step,
                                           const Curriculum& c, int threads) const {
    DemoTextGenerator gen(mix_seed(seed, mix_seed(0x52554C, static_cast<uint64_t>(step))));
    if (c.ruler_lengths.empty()) throw Error("curriculum: RULER steps need at least one length");
    const std::vector<std::string>& tasks = c.ruler_tasks.empty() ? ruler_task_names() : c.ruler_tasks;
    const int64_t length = c.ruler_lengths[gen.below(c.ruler_lengths.size())];
    const int64_t n = std::max<int64_t>(1, tokens_per_step / length);
    std::vector<std::pair<std::string, int64_t>> specs;  // task, sample index
    for (int64_t i = 0; i < n; ++i)
        specs.emplace_back(tasks[gen.below(tasks.size())], static_cast<int64_t>(gen.rng()() >> 2));
    const uint64_t ruler_seed = mix_seed(seed, 0x52554C4552) & ~kEvalSeedBit;
    std::vector<Sequence> out(specs.size());
    auto make = [&](size_t begin, size_t stride) {
        RulerGenerator& g = thread_generator(tok_, ruler_seed);
        for (size_t i = begin; i < specs.size(); i += stride)
            out[i] = ruler_sequence(g.generate(specs[i].first, length, specs[i].second), c.copy_heads);
    };
    run_strided(specs.size(), threads, make);
    return out;
}

std::vector<Sequence> DemoData::training_step(uint64_t seed, int64_t step, int64_t total_steps,
                                              int64_t tokens_per_step, const Curriculum& c,
                                              int threads) const {
    if (c.ruler_share > 0) {
        DemoTextGenerator pick(mix_seed(seed, mix_seed(0x4D4958, static_cast<uint64_t>(step))));
        if (static_cast<double>(pick.below(1000000)) < c.ruler_share * 1e6)
            return ruler_step(seed, step, tokens_per_step, c, threads);
    }
    const int64_t length = c.pick_length(seed, step, total_steps);
    const int64_t n = std::max<int64_t>(1, tokens_per_step / length);
    DemoTextGenerator gen(mix_seed(seed, static_cast<uint64_t>(step)));
    struct Spec {
        uint64_t doc_seed;
        int distractors;
        double depth;
    };
    std::vector<Spec> specs;
    for (int64_t i = 0; i < n; ++i) {
        const uint64_t doc_seed = gen.rng()() & ~kEvalSeedBit;
        const int distractors = static_cast<int>(gen.below(static_cast<uint64_t>(c.max_distractors) + 1));
        const double depth = static_cast<double>(gen.below(10001)) / 100.0;
        specs.push_back({doc_seed, distractors, depth});
    }
    // Documents are independent functions of their specs, so generating them on several threads gives the
    // same batch as one thread (it keeps a GPU fed; on 2 CPU cores it stays at one).
    std::vector<Sequence> out(specs.size());
    auto make = [&](size_t begin, size_t stride) {
        for (size_t i = begin; i < specs.size(); i += stride)
            out[i] = training_sequence(specs[i].doc_seed, length, specs[i].distractors, specs[i].depth,
                                       c.max_questions, c.repeat_share, c.copy_heads);
    };
    run_strided(specs.size(), threads, make);
    return out;
}

Batch DemoData::collate(const std::vector<Sequence>& seqs, bool first_answer_only) const {
    if (seqs.empty()) throw Error("demo data: empty batch");
    int64_t T = 0;
    for (const auto& s : seqs) T = std::max<int64_t>(T, static_cast<int64_t>(s.ids.size()));
    const int64_t B = static_cast<int64_t>(seqs.size());
    Batch b;
    b.ids = at::full({B, T}, pad_id_, at::kLong);
    std::vector<int64_t> rows, targets, lm_rows, lm_targets, copy_index, gather_index;
    auto ids = b.ids.accessor<int64_t, 2>();
    for (int64_t i = 0; i < B; ++i) {
        const Sequence& s = seqs[static_cast<size_t>(i)];
        for (size_t p = 0; p < s.ids.size(); ++p) ids[i][static_cast<int64_t>(p)] = s.ids[p];
        b.n_tokens += static_cast<int64_t>(s.ids.size());
        for (size_t p = 0; p + 1 < s.ids.size(); ++p) {
            lm_rows.push_back(i * T + static_cast<int64_t>(p));
            lm_targets.push_back(s.ids[p + 1]);
        }
        for (size_t k = 0; k < s.copy_query.size(); ++k)
            copy_index.push_back(((i * 2 + s.copy_head[k]) * T + s.copy_query[k]) * T + s.copy_source[k]);
        for (size_t k = 0; k < s.gather_query.size(); ++k)
            gather_index.push_back((i * 2 * T + s.gather_query[k]) * T + s.gather_source[k]);
        const size_t n_scored =
            first_answer_only ? static_cast<size_t>(s.first_answer_end) : s.score_pos.size();
        for (size_t k = 0; k < n_scored; ++k) {
            rows.push_back(i * T + s.score_pos[k]);
            targets.push_back(s.ids[static_cast<size_t>(s.score_pos[k] + 1)]);
        }
    }
    b.rows = at::tensor(rows, at::kLong);
    b.targets = at::tensor(targets, at::kLong);
    b.lm_rows = at::tensor(lm_rows, at::kLong);
    b.lm_targets = at::tensor(lm_targets, at::kLong);
    b.copy_index = at::tensor(copy_index, at::kLong);
    b.gather_index = at::tensor(gather_index, at::kLong);
    return b;
}

}  // namespace varrate::train
