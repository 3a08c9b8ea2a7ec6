#pragma once
// One part of a sweep split over independent processes (a cluster job array): the documents of a sweep, in
// its fixed order, are dealt round-robin to `count` shards, so every shard gets a similar mix of lengths and
// depths, the parts are disjoint, and together they are the whole sweep. Records are written per document, so
// the shards can share one output folder and a summary of it equals the single-process one.
#include <cstdint>
#include <string>

namespace varrate {

struct Shard {
    int64_t index = 0;  // 0 .. count - 1
    int64_t count = 1;
    bool whole() const { return count == 1; }
    // Whether the document at position `item` of the sweep's order belongs to this shard.
    bool owns(int64_t item) const { return item % count == index; }
    std::string label() const;  // "I/N"
};

// "I/N" with 0 <= I < N (N >= 1). Throws Error naming `option` and what is wrong.
Shard parse_shard(const std::string& text, const std::string& option = "--shard");

}  // namespace varrate
