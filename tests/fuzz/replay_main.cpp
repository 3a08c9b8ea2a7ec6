// Replays committed fuzz inputs without libFuzzer: `fuzz_replay TARGET DIR_OR_FILE...` runs every file
// (directories are walked, in name order) through TARGET's LLVMFuzzerTestOneInput, as libFuzzer would run
// one input; `fuzz_replay all CORPUS` runs every target over CORPUS/<target>/ in one process (what ctest
// does: LibTorch's start-up, most of a replay's time, is paid once). An exception other than varrate::Error
// escapes and fails the run; a crash fails it too. Each input is named before it runs, so a failing one is
// the last name printed.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#define VARRATE_FUZZ_TARGET(name) extern "C" int varrate_fuzz_##name(const uint8_t* data, size_t size);
#include "fuzz_targets.inc"
#undef VARRATE_FUZZ_TARGET

namespace {

struct Target {
    const char* name;
    int (*run)(const uint8_t*, size_t);
};

#define VARRATE_FUZZ_TARGET(name) {#name, varrate_fuzz_##name},
const Target kTargets[] = {
#include "fuzz_targets.inc"
};
#undef VARRATE_FUZZ_TARGET

std::vector<std::filesystem::path> inputs(const std::filesystem::path& arg) {
    std::vector<std::filesystem::path> out;
    if (std::filesystem::is_directory(arg)) {
        for (const auto& e : std::filesystem::recursive_directory_iterator(arg))
            if (e.is_regular_file()) out.push_back(e.path());
        std::sort(out.begin(), out.end());
    } else {
        out.push_back(arg);
    }
    return out;
}

size_t replay(const Target& target, const std::filesystem::path& arg) {
    size_t count = 0;
    for (const auto& path : inputs(arg)) {
        std::ifstream in(path, std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::printf("%s\n", path.string().c_str());
        std::fflush(stdout);
        target.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
        ++count;
    }
    return count;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 3 && std::strcmp(argv[1], "all") == 0) {
        for (const auto& t : kTargets) {
            const std::filesystem::path dir = std::filesystem::path(argv[2]) / t.name;
            if (!std::filesystem::is_directory(dir)) {
                std::fprintf(stderr, "%s: no corpus for target %s\n", dir.string().c_str(), t.name);
                return 1;
            }
            std::printf("%s: %zu inputs replayed\n", t.name, replay(t, dir));
        }
        return 0;
    }
    const Target* target = nullptr;
    for (const auto& t : kTargets)
        if (argc > 1 && std::strcmp(argv[1], t.name) == 0) target = &t;
    if (!target || argc < 3) {
        std::fprintf(stderr, "usage: fuzz_replay TARGET DIR_OR_FILE... | fuzz_replay all CORPUS\ntargets:");
        for (const auto& t : kTargets) std::fprintf(stderr, " %s", t.name);
        std::fprintf(stderr, "\n");
        return 2;
    }
    size_t count = 0;
    for (int i = 2; i < argc; ++i) {
        if (!std::filesystem::exists(argv[i])) {
            std::fprintf(stderr, "%s: not found\n", argv[i]);
            return 2;
        }
        count += replay(*target, argv[i]);
    }
    std::printf("%s: %zu inputs replayed\n", target->name, count);
    return count > 0 ? 0 : 1;
}
