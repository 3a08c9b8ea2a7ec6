#include "models/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_io.h"
#include "base/hash.h"
#include "models/tokenizer/tokenizer_added.h"
#include "models/tokenizer/tokenizer_bpe.h"
#include "models/tokenizer/tokenizer_decode.h"
#include "models/tokenizer/tokenizer_json.h"
#include "models/tokenizer/tokenizer_normalize.h"
#include "models/tokenizer/tokenizer_pretokenize.h"
#include "models/tokenizer/tokenizer_unicode.h"

namespace varrate {

struct Tokenizer::Impl {
    std::string where;
    TokenizerNormalizer normalizer;
    TokenizerPreTokenizer pre_tokenizer;
    BpeModel model;
    TokenizerDecoder decoder;

    std::vector<AddedToken> added;
    std::unordered_map<int32_t, size_t> added_by_id;
    std::unordered_map<std::string, int32_t> added_by_content;
    AddedTokenMatcher raw_matcher;         // normalized == false: matched on the input text
    AddedTokenMatcher normalized_matcher;  // normalized == true: matched on each normalised segment

    // What add_special_tokens puts around the sequence (the post_processor's single template).
    std::vector<int32_t> prefix_ids, suffix_ids;

    std::string bos_token, eos_token, chat_template;
    bool clean_up_spaces = false;
    std::string fingerprint;

    Impl(const nlohmann::json& tok, const std::string& where_)
        : where(where_),
          normalizer(tok.value("normalizer", nlohmann::json()), where_),
          pre_tokenizer(tok.value("pre_tokenizer", nlohmann::json()), where_),
          model(tok.contains("model") ? tok["model"] : nlohmann::json(), where_),
          decoder(tok.value("decoder", nlohmann::json()), where_) {}

    std::optional<int32_t> id_of(const std::string& piece) const {
        if (auto it = added_by_content.find(piece); it != added_by_content.end()) return it->second;
        return model.token_id(piece);
    }
    const std::string* piece_of(int64_t id) const {
        if (id < 0 || id > INT32_MAX) return nullptr;
        if (auto it = added_by_id.find(static_cast<int32_t>(id)); it != added_by_id.end())
            return &added[it->second].content;
        return model.token_string(static_cast<int32_t>(id));
    }

    void encode_segment(std::string_view text, bool at_start, std::vector<int64_t>& out) const;
};

namespace {

// A special token named in tokenizer_config.json: a string, null, or an AddedToken object {"content": ...}.
std::string config_token(const nlohmann::json& config, const char* key) {
    if (!config.is_object()) return "";
    const auto it = config.find(key);
    if (it == config.end()) return "";
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
        return (*it)["content"].get<std::string>();
    return "";
}

std::vector<AddedToken> parse_added_tokens(const nlohmann::json& tok, const std::string& where) {
    std::vector<AddedToken> out;
    const auto it = tok.find("added_tokens");
    if (it == tok.end() || it->is_null()) return out;
    if (!it->is_array()) throw Error(where + ": \"added_tokens\" must be an array");
    for (size_t i = 0; i < it->size(); ++i) {
        const auto& e = (*it)[i];
        const std::string ctx = where + ": added_tokens[" + std::to_string(i) + "]";
        if (!e.is_object()) throw Error(ctx + " must be an object");
        const auto id = e.find("id");
        if (id == e.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
            id->get<int64_t>() >= (1 << 26))
            throw Error(ctx + ": \"id\" must be a non-negative integer below 2^26");
        AddedToken t;
        t.id = static_cast<int32_t>(id->get<int64_t>());
        t.content = tokjson::string_field(e, "content", ctx);
        if (t.content.empty() || unicode::find_invalid_utf8(t.content) != std::string::npos)
            throw Error(ctx + ": \"content\" must be non-empty UTF-8");
        t.special = tokjson::bool_field(e, "special", false, ctx);
        t.single_word = tokjson::bool_field(e, "single_word", false, ctx);
        t.lstrip = tokjson::bool_field(e, "lstrip", false, ctx);
        t.rstrip = tokjson::bool_field(e, "rstrip", false, ctx);
        t.normalized = tokjson::bool_field(e, "normalized", !t.special, ctx);
        out.push_back(std::move(t));
    }
    return out;
}

// Parses one post_processor into the ids placed before and after the sequence.
void parse_post_processor(const nlohmann::json& spec, const std::string& where, std::vector<int32_t>& prefix,
                          std::vector<int32_t>& suffix) {
    if (spec.is_null()) return;
    const std::string ctx = where + ": post_processor";
    const std::string type = tokjson::type_of(spec, ctx);
    if (type == "Sequence") {
        for (const auto& p : tokjson::array_field(spec, "processors", ctx + " Sequence"))
            parse_post_processor(p, where, prefix, suffix);
    } else if (type == "ByteLevel") {
        // Only adjusts offsets; the ids are unchanged.
    } else if (type == "TemplateProcessing") {
        const std::string tctx = ctx + " TemplateProcessing";
        const auto& single = tokjson::array_field(spec, "single", tctx);
        const auto specials = spec.find("special_tokens");
        prefix.clear();
        suffix.clear();
        bool seen_sequence = false;
        for (const auto& item : single) {
            if (item.is_object() && item.contains("Sequence")) {
                if (seen_sequence) throw Error(tctx + ": \"single\" holds more than one Sequence");
                seen_sequence = true;
                continue;
            }
            if (!item.is_object() || !item.contains("SpecialToken") || !item["SpecialToken"].is_object() ||
                !item["SpecialToken"].contains("id") || !item["SpecialToken"]["id"].is_string())
                throw Error(
                    tctx +
                    ": \"single\" items must be {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}");
            const std::string name = item["SpecialToken"]["id"].get<std::string>();
            if (specials == spec.end() || !specials->is_object() || !specials->contains(name) ||
                !(*specials)[name].contains("ids") || !(*specials)[name]["ids"].is_array())
                throw Error(tctx + ": special token '" + name +
                            "' has no entry with \"ids\" in \"special_tokens\"");
            for (const auto& id : (*specials)[name]["ids"]) {
                if (!id.is_number_integer() || id.get<int64_t>() < 0)
                    throw Error(tctx + ": special token '" + name + "' has an invalid id");
                (seen_sequence ? suffix : prefix).push_back(static_cast<int32_t>(id.get<int64_t>()));
            }
        }
        if (!seen_sequence) throw Error(tctx + ": \"single\" has no {\"Sequence\": {\"id\": \"A\"}} item");
    } else if (type == "BertProcessing" || type == "RobertaProcessing") {
        auto pair_id = [&](const char* key) {
            const auto it = spec.find(key);
            if (it == spec.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer())
                throw Error(ctx + " " + type + ": \"" + key + "\" must be [token, id]");
            return static_cast<int32_t>((*it)[1].get<int64_t>());
        };
        prefix = {pair_id("cls")};
        suffix = {pair_id("sep")};
    } else {
        throw Error(ctx + " type '" + type +
                    "' is not supported (supported: TemplateProcessing, ByteLevel, BertProcessing, "
                    "RobertaProcessing, Sequence)");
    }
}

std::string config_chat_template(const nlohmann::json& config) {
    if (!config.is_object()) return "";
    const auto it = config.find("chat_template");
    if (it == config.end()) return "";
    if (it->is_string()) return it->get<std::string>();
    if (it->is_array()) {  // [{"name": "default", "template": ...}, ...]
        for (const auto& t : *it) {
            if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
                t["template"].is_string())
                return t["template"].get<std::string>();
        }
    }
    return "";
}

}  // namespace

void Tokenizer::Impl::encode_segment(std::string_view text, bool at_start, std::vector<int64_t>& out) const {
    const std::string normalized = normalizer.apply(std::string(text));
    std::vector<PreToken> pieces;
    std::vector<int32_t> ids;
    auto model_pieces = [&] {
        pre_tokenizer.apply(pieces);
        for (const auto& p : pieces) {
            ids.clear();
            model.encode(p.text, ids);
            out.insert(out.end(), ids.begin(), ids.end());
        }
        pieces.clear();
    };
    size_t pos = 0;
    for (const auto& m : normalized_matcher.find(normalized)) {
        if (m.begin > pos) {
            pieces.push_back({normalized.substr(pos, m.begin - pos), at_start && pos == 0});
            model_pieces();
        }
        out.push_back(m.id);
        pos = m.end;
    }
    if (pos < normalized.size()) {
        pieces.push_back({normalized.substr(pos), at_start && pos == 0});
        model_pieces();
    }
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
    std::error_code ec;
    const auto file = std::filesystem::is_directory(path, ec) ? path / "tokenizer.json" : path;
    if (!std::filesystem::exists(file, ec)) {
        if (file != path) throw Error(path.string() + ": directory has no tokenizer.json");
        throw Error(path.string() + ": tokenizer file not found");
    }
    const nlohmann::json tok = read_json_file(file);
    const auto dir = file.parent_path();
    nlohmann::json config;
    if (std::filesystem::exists(dir / "tokenizer_config.json", ec))
        config = read_json_file(dir / "tokenizer_config.json");
    // Newer checkpoints keep the template in its own file.
    if (std::filesystem::exists(dir / "chat_template.jinja", ec) && config_chat_template(config).empty()) {
        if (!config.is_object()) config = nlohmann::json::object();
        config["chat_template"] = read_text_file(dir / "chat_template.jinja");
    }
    return from_json(tok, config, file.string());
}

Tokenizer Tokenizer::from_json(const nlohmann::json& tok, const nlohmann::json& config,
                               const std::string& where) {
    if (!tok.is_object())
        throw Error(where + ": not a tokenizer.json (expected a JSON object at the top level)");
    if (!tok.contains("model")) throw Error(where + ": no \"model\" section (not a tokenizer.json?)");
    if (!config.is_null() && !config.is_object())
        throw Error(where + ": tokenizer_config.json must hold a JSON object");
    auto impl = std::make_unique<Impl>(tok, where);

    impl->added = parse_added_tokens(tok, where);
    for (size_t i = 0; i < impl->added.size(); ++i) {
        const AddedToken& t = impl->added[i];
        impl->added_by_id[t.id] = i;
        impl->added_by_content[t.content] = t.id;
        if (t.normalized)
            impl->normalized_matcher.add(impl->normalizer.apply(t.content), t);
        else
            impl->raw_matcher.add(t.content, t);
    }

    parse_post_processor(tok.value("post_processor", nlohmann::json()), where, impl->prefix_ids,
                         impl->suffix_ids);
    impl->bos_token = config_token(config, "bos_token");
    impl->eos_token = config_token(config, "eos_token");
    if (impl->bos_token.empty() && !(config.is_object() && config.contains("bos_token")) &&
        !impl->prefix_ids.empty()) {
        // No tokenizer_config.json: the template's leading special token is the BOS.
        if (const std::string* piece = impl->piece_of(impl->prefix_ids.front())) impl->bos_token = *piece;
    }
    // tokenizer_config.json's add_bos_token / add_eos_token decide BOS/EOS when given, as transformers' Llama
    // tokenizers rebuild their template from them; otherwise the post_processor's template stands.
    auto config_flag = [&](const char* key, const std::string& token, std::vector<int32_t>& ids, bool front) {
        const auto it = config.is_object() ? config.find(key) : config.end();
        if (!config.is_object() || it == config.end() || !it->is_boolean() || token.empty()) return;
        const auto id = impl->id_of(token);
        if (!id)
            throw Error(where + ": tokenizer_config " + key + " names '" + token +
                        "', which is not in the vocab");
        const bool present = !ids.empty() && (front ? ids.front() : ids.back()) == *id;
        if (it->get<bool>() && !present) ids.insert(front ? ids.begin() : ids.end(), *id);
        if (!it->get<bool>() && present) ids.erase(front ? ids.begin() : ids.end() - 1);
    };
    config_flag("add_bos_token", impl->bos_token, impl->prefix_ids, true);
    config_flag("add_eos_token", impl->eos_token, impl->suffix_ids, false);
    impl->chat_template = config_chat_template(config);
    if (config.is_object() && config.contains("clean_up_tokenization_spaces")) {
        const auto& flag = config["clean_up_tokenization_spaces"];
        if (!flag.is_boolean() && !flag.is_null())
            throw Error(where +
                        ": tokenizer_config clean_up_tokenization_spaces must be true or false, got " +
                        flag.dump());
        impl->clean_up_spaces = flag.is_boolean() && flag.get<bool>();
    }
    for (int32_t id : impl->prefix_ids)
        if (!impl->piece_of(id))
            throw Error(where + ": post_processor adds id " + std::to_string(id) +
                        ", which is not in the vocab");
    for (int32_t id : impl->suffix_ids)
        if (!impl->piece_of(id))
            throw Error(where + ": post_processor adds id " + std::to_string(id) +
                        ", which is not in the vocab");
    // Everything that decides ids and prompts: the whole tokenizer.json (vocabulary, merges, added tokens,
    // normaliser, pre-tokenizer; nlohmann's dump sorts keys, so the same content hashes the same whatever
    // its layout), then what tokenizer_config.json changes (BOS/EOS handling, the chat template).
    uint64_t h = fnv1a(tok.dump());
    for (const std::vector<int32_t>* ids : {&impl->prefix_ids, &impl->suffix_ids}) {
        const uint64_t n = ids->size();
        h = fnv1a(h, &n, sizeof n);
        h = fnv1a(h, ids->data(), ids->size() * sizeof(int32_t));
    }
    for (const std::string* text : {&impl->bos_token, &impl->eos_token, &impl->chat_template}) {
        const uint64_t n = text->size();
        h = fnv1a(h, &n, sizeof n);
        h = fnv1a(h, text->data(), text->size());
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    impl->fingerprint = hex;
    return Tokenizer(std::move(impl));
}

std::vector<int64_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
    if (const size_t bad = unicode::find_invalid_utf8(text); bad != std::string_view::npos)
        throw Error("tokenizer: input text is not valid UTF-8 (bad byte at offset " + std::to_string(bad) +
                    ")");
    std::vector<int64_t> ids;
    ids.reserve(text.size() / 3 + 4);
    if (add_special_tokens) ids.insert(ids.end(), impl_->prefix_ids.begin(), impl_->prefix_ids.end());
    size_t pos = 0;
    for (const auto& m : impl_->raw_matcher.find(text)) {
        if (m.begin > pos) impl_->encode_segment(text.substr(pos, m.begin - pos), pos == 0, ids);
        ids.push_back(m.id);
        pos = m.end;
    }
    if (pos < text.size()) impl_->encode_segment(text.substr(pos), pos == 0, ids);
    if (add_special_tokens) ids.insert(ids.end(), impl_->suffix_ids.begin(), impl_->suffix_ids.end());
    return ids;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
    std::vector<std::string> pieces;
    pieces.reserve(ids.size());
    for (int64_t id : ids) {
        // Ids without a piece (e.g. an embedding row past the vocabulary) are skipped, as the reference does.
        const std::string* piece = impl_->piece_of(id);
        if (!piece || (skip_special_tokens && is_special(id))) continue;
        pieces.push_back(*piece);
    }
    return impl_->decoder.decode(std::move(pieces));
}

int64_t Tokenizer::vocab_size() const {
    int64_t n = impl_->model.id_end();
    for (const auto& t : impl_->added) n = std::max<int64_t>(n, int64_t{t.id} + 1);
    return n;
}

std::string Tokenizer::token_string(int64_t id) const {
    const std::string* piece = impl_->piece_of(id);
    if (!piece) throw Error(impl_->where + ": token id " + std::to_string(id) + " is not in the vocabulary");
    return *piece;
}

std::optional<int64_t> Tokenizer::token_id(const std::string& piece) const {
    if (auto id = impl_->id_of(piece)) return *id;
    return std::nullopt;
}

bool Tokenizer::is_special(int64_t id) const {
    if (id < 0 || id > INT32_MAX) return false;
    const auto it = impl_->added_by_id.find(static_cast<int32_t>(id));
    return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

std::optional<int64_t> Tokenizer::bos_id() const {
    if (impl_->bos_token.empty()) return std::nullopt;
    return token_id(impl_->bos_token);
}

std::optional<int64_t> Tokenizer::eos_id() const {
    if (impl_->eos_token.empty()) return std::nullopt;
    return token_id(impl_->eos_token);
}

std::string Tokenizer::bos_token() const {
    return impl_->bos_token;
}
std::string Tokenizer::eos_token() const {
    return impl_->eos_token;
}
const std::string& Tokenizer::chat_template() const {
    return impl_->chat_template;
}

bool Tokenizer::clean_up_tokenization_spaces() const {
    return impl_->clean_up_spaces;
}

const std::string& Tokenizer::fingerprint() const {
    return impl_->fingerprint;
}

}  // namespace varrate
