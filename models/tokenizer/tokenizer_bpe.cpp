#include "models/tokenizer/tokenizer_bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "models/tokenizer/tokenizer_json.h"
#include "models/tokenizer/tokenizer_unicode.h"

namespace varrate {

namespace {

std::optional<std::string> optional_string(const nlohmann::json& model, const char* key,
                                           const std::string& ctx) {
    const auto it = model.find(key);
    if (it == model.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) throw Error(ctx + ": \"" + key + "\" must be a string or null");
    return it->get<std::string>();
}

// One symbol of the word being merged; removed symbols have len 0.
struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t len;
};

struct QueuedMerge {
    int32_t rank, pos, new_id;
    bool operator<(const QueuedMerge& o) const {  // std::priority_queue pops the largest: invert
        return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
};

}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, const std::string& where) : where_(where) {
    const std::string ctx = where + ": model";
    if (!model.is_object()) throw Error(where + ": \"model\" is missing or not an object");
    const auto type_it = model.find("type");
    // Older files omit "type" for BPE; anything else that is named must be BPE.
    if (type_it != model.end() && !type_it->is_null()) {
        if (!type_it->is_string()) throw Error(ctx + ": \"type\" must be a string");
        const auto type = type_it->get<std::string>();
        if (type != "BPE")
            throw Error(ctx + " type '" + type + "' is not supported (only BPE: Llama, Mistral, Qwen)");
    }
    const auto vocab_it = model.find("vocab");
    if (vocab_it == model.end() || !vocab_it->is_object())
        throw Error(ctx + ": \"vocab\" is missing or not an object {piece: id}");
    const auto merges_it = model.find("merges");
    if (merges_it == model.end() || !merges_it->is_array())
        throw Error(ctx + ": \"merges\" is missing or not an array");
    if (auto d = model.find("dropout"); d != model.end() && d->is_number() && d->get<double>() > 0.0)
        throw Error(ctx + ": BPE dropout is a training-time option and is not supported");

    vocab_.reserve(vocab_it->size());
    int64_t max_id = -1;
    for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
        const auto& v = it.value();
        const int64_t id = v.is_number_integer() ? v.get<int64_t>() : -1;
        if (id < 0 || id >= (int64_t{1} << 26))
            throw Error(ctx + ": vocab entry '" + it.key() +
                        "' must map to a non-negative integer id below 2^26");
        vocab_.emplace(it.key(), static_cast<int32_t>(id));
        max_id = std::max(max_id, id);
    }
    id_to_token_.resize(static_cast<size_t>(max_id + 1));
    has_id_.assign(static_cast<size_t>(max_id + 1), false);
    for (const auto& [piece, id] : vocab_) {
        id_to_token_[id] = piece;
        has_id_[id] = true;
    }

    merges_.reserve(merges_it->size());
    std::string left, right, merged;
    int32_t rank = 0;
    auto merge_ctx = [&] { return ctx + ": merges[" + std::to_string(rank) + "]"; };  // built only on error
    for (const auto& m : *merges_it) {
        if (m.is_string()) {
            const auto& s = m.get_ref<const std::string&>();
            const size_t space = s.find(' ');
            if (space == std::string::npos || space == 0 || space + 1 >= s.size())
                throw Error(merge_ctx() + " '" + s + "' must be two pieces separated by one space");
            left.assign(s, 0, space);
            right.assign(s, space + 1, std::string::npos);
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            left = m[0].get_ref<const std::string&>();
            right = m[1].get_ref<const std::string&>();
        } else {
            throw Error(merge_ctx() +
                        " must be a \"left right\" string or a [\"left\", \"right\"] array, got " + m.dump());
        }
        merged.assign(left).append(right);
        const auto a = vocab_.find(left), b = vocab_.find(right), c = vocab_.find(merged);
        if (a == vocab_.end()) throw Error(merge_ctx() + ": piece '" + left + "' is not in the vocab");
        if (b == vocab_.end()) throw Error(merge_ctx() + ": piece '" + right + "' is not in the vocab");
        if (c == vocab_.end())
            throw Error(merge_ctx() + ": merged piece '" + merged + "' is not in the vocab");
        merges_[pair_key(a->second, b->second)] = Merge{rank, c->second};  // a later duplicate wins
        ++rank;
    }

    unk_token_ = optional_string(model, "unk_token", ctx);
    if (unk_token_) {
        if (auto it = vocab_.find(*unk_token_); it != vocab_.end()) unk_id_ = it->second;
    }
    prefix_ = optional_string(model, "continuing_subword_prefix", ctx);
    suffix_ = optional_string(model, "end_of_word_suffix", ctx);
    byte_fallback_ = tokjson::bool_field(model, "byte_fallback", false, ctx);
    fuse_unk_ = tokjson::bool_field(model, "fuse_unk", false, ctx);
    ignore_merges_ = tokjson::bool_field(model, "ignore_merges", false, ctx);
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        const auto it = vocab_.find(name);
        byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
    }
}

std::optional<int32_t> BpeModel::token_id(const std::string& piece) const {
    const auto it = vocab_.find(piece);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
}

const std::string* BpeModel::token_string(int32_t id) const {
    if (id < 0 || id >= id_end() || !has_id_[id]) return nullptr;
    return &id_to_token_[id];
}

void BpeModel::encode(const std::string& word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    if (ignore_merges_) {
        if (auto it = vocab_.find(word); it != vocab_.end()) {
            out.push_back(it->second);
            return;
        }
    }

    // 1. One symbol per character (or per byte through byte_fallback, or unk), as the reference does.
    std::vector<Symbol> symbols;
    symbols.reserve(word.size());
    auto add = [&](int32_t id, uint32_t len) {
        const auto n = static_cast<int32_t>(symbols.size());
        symbols.push_back({id, n - 1, n + 1, len});
    };
    int32_t unk_pending = -1;  // an unk symbol not yet added (kept open so fuse_unk can extend it)
    uint32_t unk_pending_len = 0;
    auto unk_id = [&]() {
        if (!unk_id_) throw Error(where_ + ": unk_token '" + *unk_token_ + "' is not in the vocab");
        return *unk_id_;
    };
    std::string piece;
    for (size_t i = 0; i < word.size();) {
        const size_t begin = i;
        unicode::next_code_point(word, i);
        const auto byte_len = static_cast<uint32_t>(i - begin);
        piece.clear();
        if (begin > 0 && prefix_) piece += *prefix_;
        piece.append(word, begin, byte_len);
        if (i == word.size() && suffix_) piece += *suffix_;

        if (auto it = vocab_.find(piece); it != vocab_.end()) {
            if (unk_pending >= 0) {
                add(unk_pending, unk_pending_len);
                unk_pending = -1;
            }
            add(it->second, byte_len);
            continue;
        }
        if (byte_fallback_) {
            bool all = true;
            for (unsigned char c : piece) all = all && byte_ids_[c] >= 0;
            if (all) {
                for (unsigned char c : piece) add(byte_ids_[c], 1);
                continue;
            }
        }
        if (unk_token_) {
            if (unk_pending >= 0 && fuse_unk_) {
                unk_pending_len += byte_len;
            } else {
                if (unk_pending >= 0) add(unk_pending, unk_pending_len);
                unk_pending = unk_id();
                unk_pending_len = byte_len;
            }
        }
        // Without unk_token and byte_fallback the character is dropped, as the reference does.
    }
    if (unk_pending >= 0) add(unk_pending, unk_pending_len);
    if (symbols.empty()) return;
    symbols.back().next = -1;

    // 2. Merge the lowest-ranked adjacent pair until none is left. Stale queue entries are skipped.
    std::priority_queue<QueuedMerge> queue;
    auto push_pair = [&](int32_t pos) {
        const int32_t next = symbols[pos].next;
        if (next < 0) return;
        const auto it = merges_.find(pair_key(symbols[pos].id, symbols[next].id));
        if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
    };
    for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos) push_pair(pos);
    while (!queue.empty()) {
        const QueuedMerge top = queue.top();
        queue.pop();
        Symbol& cur = symbols[top.pos];
        if (cur.len == 0 || cur.next < 0) continue;
        const int32_t next_pos = cur.next;
        Symbol& right = symbols[next_pos];
        const auto it = merges_.find(pair_key(cur.id, right.id));
        if (it == merges_.end() || it->second.new_id != top.new_id) continue;

        cur.id = top.new_id;
        cur.len += right.len;
        cur.next = right.next;
        right.len = 0;
        if (cur.next >= 0) symbols[cur.next].prev = top.pos;
        if (cur.prev >= 0) push_pair(cur.prev);
        push_pair(top.pos);
    }
    for (const auto& s : symbols) {
        if (s.len != 0) out.push_back(s.id);
    }
}

}  // namespace varrate
