#include "tests/fuzz/fuzz_support.h"

#include <cstdlib>
#include <fstream>
#include <system_error>

namespace varrate::fuzz {

const std::filesystem::path& scratch_dir() {
    // Never destroyed: the atexit handler that removes it runs after static destructors registered later.
    static const std::filesystem::path* dir = [] {
        std::string tmpl = (std::filesystem::temp_directory_path() / "varrate-fuzz-XXXXXX").string();
        if (!::mkdtemp(tmpl.data())) std::abort();  // no scratch directory: nothing can run
        std::atexit([] {
            std::error_code ec;
            std::filesystem::remove_all(scratch_dir(), ec);
        });
        return new std::filesystem::path(tmpl);
    }();
    return *dir;
}

std::filesystem::path write_input(const std::string& name, const uint8_t* data, size_t size) {
    const std::filesystem::path path = scratch_dir() / name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) std::abort();
    return path;
}

std::filesystem::path write_input(const std::string& name, const std::string& bytes) {
    return write_input(name, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

std::filesystem::path source_dir() {
    return VARRATE_SOURCE_DIR;
}

}  // namespace varrate::fuzz
