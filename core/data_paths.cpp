#include "core/data_paths.h"

#include <filesystem>
#include <system_error>

namespace fs = std::filesystem;

namespace varrate {

std::string executable_dir() {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (ec || exe.empty()) return {};
    return exe.parent_path().string();
}

std::vector<std::string> data_roots() {
    std::vector<fs::path> roots;
    std::error_code ec;
    // The working directory first: running from a checkout uses that checkout's resources.
    const fs::path cwd = fs::current_path(ec);
    if (!ec) roots.push_back(cwd / "resources");
    const std::string exe_dir = executable_dir();
    if (!exe_dir.empty()) {
        const fs::path exe(exe_dir);
        roots.push_back(exe / ".." / "share" / "varrate-studio");  // installed: <prefix>/bin/varrate
        roots.push_back(exe / ".." / "resources");                 // a build directory inside the checkout
        roots.push_back(exe / ".." / ".." / "resources");          // <checkout>/build/bin/varrate
    }
    std::vector<std::string> out;
    for (const fs::path& r : roots) out.push_back(r.lexically_normal().string());
    return out;
}

std::string find_demo_model() {
    for (const std::string& root : data_roots()) {
        const fs::path dir = fs::path(root) / "models" / kDemoModelName;
        std::error_code ec;
        if (fs::is_regular_file(dir / "model.safetensors", ec)) return dir.string();
    }
    return {};
}

}  // namespace varrate
