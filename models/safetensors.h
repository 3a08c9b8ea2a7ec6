#pragma once
// safetensors reader (memory-mapped, single file or sharded via model.safetensors.index.json) and writer.
// Every header is validated before any tensor is touched: header length bounds, JSON, dtype names,
// shape/size agreement, data_offsets inside the file and non-overlapping. Errors name file and tensor.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

namespace varrate {

struct TensorInfo {
    std::string name;
    std::string dtype;  // "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8"
    std::vector<int64_t> shape;
    uint64_t begin = 0;  // byte offsets relative to the data section
    uint64_t end = 0;
    std::filesystem::path file;
};

class SafetensorsFile;

// All tensors of a checkpoint, whether in one file or in shards.
class SafetensorsArchive {
  public:
    // `path` is a .safetensors file, a model.safetensors.index.json, or a model directory holding either.
    static SafetensorsArchive open(const std::filesystem::path& path);

    std::vector<std::string> names() const;  // sorted
    bool contains(const std::string& name) const;
    const TensorInfo& info(const std::string& name) const;  // throws Error naming the missing tensor
    // A CPU tensor over the mapped bytes (zero-copy, read-only; keeps the mapping alive).
    at::Tensor tensor(const std::string& name) const;
    // __metadata__ of the first (or only) file.
    const std::map<std::string, std::string>& metadata() const;

  private:
    std::vector<std::shared_ptr<SafetensorsFile>> files_;
    std::map<std::string, std::pair<size_t, TensorInfo>> index_;  // name -> (file index, info)
    std::map<std::string, std::string> metadata_;
};

// Writes tensors (any device; converted to contiguous CPU) with optional metadata, atomically.
// Supported dtypes: float32, float16, bfloat16 (and int64/int32/int16 for codec indices, int8/uint8 for
// packed codes).
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A tensor whose name, dtype and shape are known before its values exist.
struct TensorSpec {
    std::string name;
    c10::ScalarType dtype = c10::kFloat;
    std::vector<int64_t> shape;
};

// Like write_safetensors, but memory stays at one tensor: produce(i) is called once per spec (in the file's
// sorted-name order) and must return a tensor of specs[i]'s dtype and shape, which is written and dropped.
void write_safetensors_streamed(const std::filesystem::path& path, const std::vector<TensorSpec>& specs,
                                const std::function<at::Tensor(size_t index)>& produce,
                                const std::map<std::string, std::string>& metadata = {});

}  // namespace varrate
