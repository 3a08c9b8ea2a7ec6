#pragma once
// Deterministic hashing and seed derivation: the same numbers on every platform and run, so that generated
// documents, random checkpoints and basis fingerprints are reproducible.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace varrate {

inline constexpr uint64_t kFnv1aOffset = 0xcbf29ce484222325ull;  // the standard offset basis
// The start value the model fingerprints and NIAH sweep manifests have always used: basis files and sweep
// directories written earlier carry hashes made with it, so it stays.
inline constexpr uint64_t kFingerprintSeed = 1469598103934665603ull;

// FNV-1a over bytes, continuing from `h` (start from kFnv1aOffset).
inline uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}
inline uint64_t fnv1a(std::string_view s, uint64_t h = kFnv1aOffset) {
    return fnv1a(h, s.data(), s.size());
}

// splitmix64's finaliser: a well-mixed 64-bit value from any seed (consecutive seeds give unrelated outputs).
inline uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// A seed derived from two values (a run's seed and a step, say).
inline uint64_t mix_seed(uint64_t a, uint64_t b) {
    return splitmix64(a * 0x9e3779b97f4a7c15ull + b + 0x632be59bd9b4e019ull - 0x9e3779b97f4a7c15ull);
}

}  // namespace varrate
