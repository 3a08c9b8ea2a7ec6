#pragma once
// Whole-file reads with clear errors, and atomic writes (write a temporary beside the target, then rename),
// so that nothing is ever left half-written.
#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace varrate {

std::string read_text_file(const std::filesystem::path& path);
nlohmann::json read_json_file(const std::filesystem::path& path);
// A document to run a model on: read_text_file, refused with an Error naming the file when it is empty
// (0 bytes or only white space), binary (a NUL byte) or not UTF-8, with the byte offset of the first bad
// byte.
std::string read_document_file(const std::filesystem::path& path);
// Writes `bytes` to a temporary beside `path` (".<name>.tmp-<host>-<pid>-<n>"), then renames it over `path`:
// a reader, or a writer killed at any point, sees the old file or the new one, never part of one.
void write_file_atomic(const std::filesystem::path& path, const std::string& bytes);
// Removes the temporaries that writers killed before their rename left under `dir` (recursively): those of
// this host whose process is gone, and any older than an hour (another host's). Returns how many it removed.
// Sweeps call it when they start, so that a resumed run leaves no partial file behind.
int remove_stale_temporaries(const std::filesystem::path& dir);
// A fresh temporary name beside `path` for writers that stream (safetensors, trained checkpoints) and rename
// when done, in the form remove_stale_temporaries() knows.
std::filesystem::path atomic_temporary_for(const std::filesystem::path& path);
// Whether `path` names one of these temporaries (of any host or process).
bool is_atomic_temporary(const std::filesystem::path& path);

}  // namespace varrate
