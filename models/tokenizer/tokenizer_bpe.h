#pragma once
// The BPE model of tokenizer.json: vocabulary, ranked merges and the merge loop (lowest rank first, leftmost
// on ties, via a priority queue over a linked list of symbols), with byte_fallback (<0xNN> pieces), unk
// fusing, continuing_subword_prefix / end_of_word_suffix and ignore_merges (whole-word vocabulary hits).
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace varrate {

class BpeModel {
  public:
    // `model` is tokenizer.json's "model" object (type BPE). Throws varrate::Error naming `where`.
    BpeModel(const nlohmann::json& model, const std::string& where);

    // Appends the ids of one pre-token (already normalised, pre-tokenised and byte-mapped if needed).
    void encode(const std::string& word, std::vector<int32_t>& out) const;

    std::optional<int32_t> token_id(const std::string& piece) const;
    const std::string* token_string(int32_t id) const;  // null when the id has no vocabulary entry
    int32_t id_end() const { return static_cast<int32_t>(id_to_token_.size()); }  // max id + 1

  private:
    struct Merge {
        int32_t rank;
        int32_t new_id;
    };
    static uint64_t pair_key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }

    std::string where_;
    std::unordered_map<std::string, int32_t> vocab_;
    std::vector<std::string> id_to_token_;
    std::vector<bool> has_id_;
    std::unordered_map<uint64_t, Merge> merges_;
    std::optional<std::string> unk_token_;
    std::optional<int32_t> unk_id_;
    std::optional<std::string> prefix_;  // continuing_subword_prefix
    std::optional<std::string> suffix_;  // end_of_word_suffix
    bool byte_fallback_ = false;
    bool fuse_unk_ = false;
    bool ignore_merges_ = false;
    int32_t byte_ids_[256];  // <0xNN> ids for byte_fallback, -1 when absent
};

}  // namespace varrate
