#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include <ATen/ATen.h>

#include "base/error.h"
#include "base/file_io.h"

namespace varrate {

namespace {

using json = nlohmann::json;

// The header is JSON text; anything near this size is not a real checkpoint header.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

struct DtypeInfo {
    const char* name;
    c10::ScalarType type;
    uint64_t size;
};

const DtypeInfo kDtypes[] = {
    {"F32", c10::kFloat, 4}, {"F16", c10::kHalf, 2}, {"BF16", c10::kBFloat16, 2},
    {"I64", c10::kLong, 8},  {"I32", c10::kInt, 4},  {"I16", c10::kShort, 2},
    {"I8", c10::kChar, 1},   {"U8", c10::kByte, 1},  // packed codes of quantized stores
};

const DtypeInfo* dtype_by_name(const std::string& name) {
    for (const auto& d : kDtypes)
        if (name == d.name) return &d;
    return nullptr;
}

const DtypeInfo* dtype_by_type(c10::ScalarType t) {
    for (const auto& d : kDtypes)
        if (t == d.type) return &d;
    return nullptr;
}

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

std::string offsets_str(uint64_t b, uint64_t e) {
    return "[" + std::to_string(b) + ", " + std::to_string(e) + "]";
}

bool is_little_endian() {
    const uint16_t probe = 1;
    uint8_t first = 0;
    std::memcpy(&first, &probe, 1);
    return first == 1;
}

}  // namespace

// One memory-mapped .safetensors file, validated on open.
class SafetensorsFile {
  public:
    explicit SafetensorsFile(const std::filesystem::path& path) : path_(path) {
        const std::string where = path.string();
        std::error_code ec;
        if (!std::filesystem::exists(path, ec)) throw Error(where + ": file not found");
        if (std::filesystem::is_directory(path, ec)) throw Error(where + ": is a directory, expected a file");
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) throw Error(where + ": cannot open: " + std::strerror(errno));
        struct stat st {};
        if (::fstat(fd, &st) != 0) {
            const int err = errno;
            ::close(fd);
            throw Error(where + ": cannot stat: " + std::strerror(err));
        }
        size_ = static_cast<uint64_t>(st.st_size);
        if (size_ < 8) {
            ::close(fd);
            throw Error(where + ": not a safetensors file: " + std::to_string(size_) +
                        " bytes, shorter than the 8-byte header length");
        }
        void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
        const int err = errno;
        ::close(fd);  // the mapping keeps the file alive
        if (p == MAP_FAILED) throw Error(where + ": cannot memory-map: " + std::strerror(err));
        base_ = static_cast<const uint8_t*>(p);
        try {
            parse_header();
        } catch (...) {
            ::munmap(const_cast<uint8_t*>(base_), size_);
            throw;
        }
    }
    ~SafetensorsFile() { ::munmap(const_cast<uint8_t*>(base_), size_); }
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::filesystem::path& path() const { return path_; }
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    const uint8_t* data(const TensorInfo& t) const { return base_ + data_start_ + t.begin; }

  private:
    void parse_header() {
        const std::string where = path_.string();
        if (!is_little_endian()) throw Error(where + ": safetensors needs a little-endian host");
        uint64_t n = 0;
        std::memcpy(&n, base_, 8);
        if (n > kMaxHeaderBytes)
            throw Error(where + ": header length " + std::to_string(n) +
                        " is absurd (over 100 MB); not a safetensors file?");
        if (n > size_ - 8) {
            throw Error(where + ": header length " + std::to_string(n) +
                        " extends beyond the end of the file (" + std::to_string(size_) +
                        " bytes): the file is truncated (or not a safetensors file)");
        }
        data_start_ = 8 + n;
        const uint64_t data_size = size_ - data_start_;

        json header;
        try {
            header = json::parse(reinterpret_cast<const char*>(base_ + 8),
                                 reinterpret_cast<const char*>(base_ + 8 + n));
        } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
            throw Error(where + ": invalid JSON header: " + e.what());
        }
        if (!header.is_object()) throw Error(where + ": header is not a JSON object");

        for (auto it = header.begin(); it != header.end(); ++it) {
            const std::string& name = it.key();
            const json& v = it.value();
            if (name == "__metadata__") {
                if (!v.is_object()) throw Error(where + ": __metadata__ is not an object");
                for (auto m = v.begin(); m != v.end(); ++m) {
                    if (!m.value().is_string())
                        throw Error(where + ": __metadata__ value '" + m.key() + "' is not a string");
                    metadata_[m.key()] = m.value().get<std::string>();
                }
                continue;
            }
            const std::string tw = where + ": tensor '" + name + "'";
            if (!v.is_object()) throw Error(tw + ": header entry is not an object");
            if (!v.contains("dtype") || !v["dtype"].is_string())
                throw Error(tw + ": missing or non-string 'dtype'");
            if (!v.contains("shape") || !v["shape"].is_array())
                throw Error(tw + ": missing or non-list 'shape'");
            if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
                throw Error(tw + ": 'data_offsets' must be a list of two offsets");
            TensorInfo t;
            t.name = name;
            t.file = path_;
            t.dtype = v["dtype"].get<std::string>();
            const DtypeInfo* dt = dtype_by_name(t.dtype);
            if (!dt)
                throw Error(tw + ": unsupported dtype '" + t.dtype +
                            "' (supported: F32, F16, BF16, I64, I32, I16, I8, U8)");
            uint64_t bytes = dt->size;
            for (const auto& d : v["shape"]) {
                if (!d.is_number_unsigned()) throw Error(tw + ": shape must hold non-negative integers");
                const uint64_t dim = d.get<uint64_t>();
                if (dim > uint64_t(INT64_MAX) || __builtin_mul_overflow(bytes, dim, &bytes))
                    throw Error(tw + ": shape is too large");
                t.shape.push_back(static_cast<int64_t>(dim));
            }
            for (const auto& o : v["data_offsets"])
                if (!o.is_number_unsigned()) throw Error(tw + ": data_offsets must be non-negative integers");
            t.begin = v["data_offsets"][0].get<uint64_t>();
            t.end = v["data_offsets"][1].get<uint64_t>();
            if (t.end < t.begin)
                throw Error(tw + ": data_offsets " + offsets_str(t.begin, t.end) + " end before they begin");
            if (t.end > data_size) {
                // Offsets past the end of a well-formed header mean the bytes are missing: a cut-off copy.
                throw Error(tw + ": data_offsets " + offsets_str(t.begin, t.end) +
                            " lie outside the data section (" + std::to_string(data_size) +
                            " bytes): the file is truncated (or its header is corrupt)");
            }
            if (t.end - t.begin != bytes) {
                throw Error(tw + ": shape " + shape_str(t.shape) + " of " + t.dtype + " needs " +
                            std::to_string(bytes) + " bytes but data_offsets " + offsets_str(t.begin, t.end) +
                            " span " + std::to_string(t.end - t.begin));
            }
            tensors_.push_back(std::move(t));
        }

        // Overlap check: sorted by start, each non-empty tensor must begin at or after the previous one's
        // end.
        std::vector<const TensorInfo*> by_offset;
        for (const auto& t : tensors_)
            if (t.end > t.begin) by_offset.push_back(&t);
        std::sort(by_offset.begin(), by_offset.end(),
                  [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
        for (size_t i = 1; i < by_offset.size(); ++i) {
            const TensorInfo* a = by_offset[i - 1];
            const TensorInfo* b = by_offset[i];
            if (b->begin < a->end) {
                throw Error(where + ": tensors '" + a->name + "' " + offsets_str(a->begin, a->end) +
                            " and '" + b->name + "' " + offsets_str(b->begin, b->end) + " overlap");
            }
        }
        std::sort(tensors_.begin(), tensors_.end(),
                  [](const auto& a, const auto& b) { return a.name < b.name; });
    }

    std::filesystem::path path_;
    const uint8_t* base_ = nullptr;
    uint64_t size_ = 0;
    uint64_t data_start_ = 0;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, std::string> metadata_;
};

namespace {

// A shard name from an index must stay inside the model directory.
void check_shard_name(const std::string& shard, const std::string& where) {
    const std::filesystem::path p(shard);
    bool bad = shard.empty() || p.is_absolute();
    for (const auto& part : p)
        if (part == "..") bad = true;
    if (bad) throw Error(where + ": shard file name '" + shard + "' must be a plain relative name");
}

}  // namespace

SafetensorsArchive SafetensorsArchive::open(const std::filesystem::path& path) {
    std::error_code ec;
    std::filesystem::path target = path;
    if (std::filesystem::is_directory(path, ec)) {
        if (std::filesystem::exists(path / "model.safetensors.index.json", ec)) {
            target = path / "model.safetensors.index.json";
        } else if (std::filesystem::exists(path / "model.safetensors", ec)) {
            target = path / "model.safetensors";
        } else {
            throw Error(path.string() +
                        ": no model.safetensors or model.safetensors.index.json in this directory");
        }
    } else if (!std::filesystem::exists(path, ec)) {
        throw Error(path.string() + ": file not found");
    }

    SafetensorsArchive archive;
    auto add_file = [&](const std::filesystem::path& file) {
        auto f = std::make_shared<SafetensorsFile>(file);
        const size_t idx = archive.files_.size();
        archive.files_.push_back(f);
        for (const auto& t : f->tensors()) {
            auto [it, inserted] = archive.index_.emplace(t.name, std::make_pair(idx, t));
            if (!inserted) {
                throw Error(file.string() + ": tensor '" + t.name + "' is also in " +
                            it->second.second.file.string());
            }
        }
    };

    const std::string ext = target.extension().string();
    if (ext == ".json") {
        const std::string where = target.string();
        const json index = read_json_file(target);
        if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
            throw Error(where + ": not a safetensors index (no 'weight_map' object)");
        const json& wm = index["weight_map"];
        std::set<std::string> shards;
        for (auto it = wm.begin(); it != wm.end(); ++it) {
            if (!it.value().is_string())
                throw Error(where + ": weight_map entry for tensor '" + it.key() + "' is not a file name");
            check_shard_name(it.value().get<std::string>(), where);
            shards.insert(it.value().get<std::string>());
        }
        if (shards.empty()) throw Error(where + ": weight_map is empty");
        const auto dir = target.parent_path();
        for (const auto& s : shards) add_file(dir / s);
        for (auto it = wm.begin(); it != wm.end(); ++it) {
            auto found = archive.index_.find(it.key());
            const auto shard = dir / it.value().get<std::string>();
            if (found == archive.index_.end() || found->second.second.file != shard) {
                throw Error(where + ": tensor '" + it.key() + "' is mapped to " +
                            it.value().get<std::string>() + " but that file does not contain it");
            }
        }
    } else {
        add_file(target);
    }
    archive.metadata_ = archive.files_.front()->metadata();
    return archive;
}

std::vector<std::string> SafetensorsArchive::names() const {
    std::vector<std::string> out;
    out.reserve(index_.size());
    for (const auto& [name, entry] : index_) out.push_back(name);
    return out;
}

bool SafetensorsArchive::contains(const std::string& name) const {
    return index_.count(name) != 0;
}

const TensorInfo& SafetensorsArchive::info(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) {
        const std::string where = files_.empty() ? std::string("safetensors archive")
                                                 : files_.front()->path().parent_path().string();
        throw Error(where + ": tensor '" + name + "' not found in the checkpoint");
    }
    return it->second.second;
}

at::Tensor SafetensorsArchive::tensor(const std::string& name) const {
    const TensorInfo& t = info(name);
    const auto& file = files_[index_.at(name).first];
    const DtypeInfo* dt = dtype_by_name(t.dtype);
    const auto options = at::TensorOptions().dtype(dt->type).device(at::kCPU);
    void* ptr = const_cast<uint8_t*>(file->data(t));
    if (t.end == t.begin) return at::empty(t.shape, options);
    // Offsets need not be aligned to the element size; kernels expect aligned data, so copy in that rare
    // case.
    if (reinterpret_cast<uintptr_t>(ptr) % dt->size != 0) {
        at::Tensor out = at::empty(t.shape, options);
        std::memcpy(out.data_ptr(), ptr, t.end - t.begin);
        return out;
    }
    std::shared_ptr<SafetensorsFile> keep = file;
    return at::from_blob(
        ptr, t.shape, [keep](void*) mutable { keep.reset(); }, options);
}

const std::map<std::string, std::string>& SafetensorsArchive::metadata() const {
    return metadata_;
}

// ---------------------------------------------------------------------------------------------------------
// Writer

namespace {

// A temporary file beside the target, renamed over it when complete and removed on any failure.
class AtomicFile {
  public:
    explicit AtomicFile(const std::filesystem::path& path) : path_(path) {
        std::error_code ec;
        const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
        if (!std::filesystem::is_directory(dir, ec))
            throw Error(path.string() + ": directory does not exist");
        tmp_ = atomic_temporary_for(path);
        f_ = std::fopen(tmp_.c_str(), "wb");
        if (!f_) throw Error(path.string() + ": cannot open for writing: " + std::strerror(errno));
    }
    ~AtomicFile() {
        if (f_) std::fclose(f_);
        if (!committed_) {
            std::error_code ec;
            std::filesystem::remove(tmp_, ec);
        }
    }
    void write(const void* data, size_t n) {
        if (n && std::fwrite(data, 1, n, f_) != n)
            throw Error(path_.string() + ": write failed (disk full?): " + std::strerror(errno));
    }
    void commit() {
        const bool ok = std::fflush(f_) == 0 && std::fclose(f_) == 0;
        f_ = nullptr;
        if (!ok) throw Error(path_.string() + ": write failed (disk full?)");
        std::error_code ec;
        std::filesystem::rename(tmp_, path_, ec);
        if (ec) throw Error(path_.string() + ": cannot replace file: " + ec.message());
        committed_ = true;
    }

  private:
    std::filesystem::path path_, tmp_;
    std::FILE* f_ = nullptr;
    bool committed_ = false;
};

}  // namespace

void write_safetensors_streamed(const std::filesystem::path& path, const std::vector<TensorSpec>& specs,
                                const std::function<at::Tensor(size_t index)>& produce,
                                const std::map<std::string, std::string>& metadata) {
    const std::string where = path.string();
    std::vector<size_t> order(specs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return specs[a].name < specs[b].name; });

    // Header: __metadata__ first, then tensors in sorted name order, data laid out in the same order.
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        nlohmann::ordered_json m = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata) m[k] = v;
        header["__metadata__"] = m;
    }
    std::vector<uint64_t> nbytes(specs.size());
    uint64_t offset = 0;
    for (size_t k = 0; k < order.size(); ++k) {
        const TensorSpec& s = specs[order[k]];
        if (s.name.empty() || s.name == "__metadata__")
            throw Error(where + ": invalid tensor name '" + s.name + "'");
        if (k > 0 && specs[order[k - 1]].name == s.name)
            throw Error(where + ": tensor '" + s.name + "' given twice");
        const DtypeInfo* dt = dtype_by_type(s.dtype);
        if (!dt) {
            throw Error(where + ": tensor '" + s.name + "' has dtype " + std::string(c10::toString(s.dtype)) +
                        ", which safetensors writing does not support (float32, float16, bfloat16, int64, "
                        "int32, int16, int8, uint8)");
        }
        uint64_t n = dt->size;
        for (int64_t d : s.shape) {
            if (d < 0) throw Error(where + ": tensor '" + s.name + "' has a negative dimension");
            n *= static_cast<uint64_t>(d);
        }
        nbytes[order[k]] = n;
        header[s.name] = {{"dtype", dt->name}, {"shape", s.shape}, {"data_offsets", {offset, offset + n}}};
        offset += n;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
    const uint64_t header_len = text.size();

    AtomicFile out(path);
    out.write(&header_len, 8);
    out.write(text.data(), text.size());
    for (size_t i : order) {
        const TensorSpec& s = specs[i];
        at::Tensor t = produce(i);
        if (!t.defined() || t.scalar_type() != s.dtype || t.sizes().vec() != s.shape) {
            throw Error(where + ": tensor '" + s.name + "' does not match its declared dtype/shape " +
                        std::string(c10::toString(s.dtype)) + " " + shape_str(s.shape));
        }
        t = t.to(at::kCPU).contiguous();
        out.write(t.data_ptr(), nbytes[i]);
    }
    out.commit();
}

void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    std::vector<TensorSpec> specs;
    specs.reserve(tensors.size());
    for (const auto& [name, t] : tensors) {
        if (!t.defined()) throw Error(path.string() + ": tensor '" + name + "' is undefined");
        specs.push_back({name, t.scalar_type(), t.sizes().vec()});
    }
    write_safetensors_streamed(
        path, specs, [&](size_t i) { return tensors[i].second; }, metadata);
}

}  // namespace varrate
