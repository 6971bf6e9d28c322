// safetensors reader (mmap + header validation) and atomic writer.
#include "runtime/checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/base/file_util.h"
#include "runtime/base/path_sandbox.h"
#include "runtime/base/status_macros.h"

namespace deltatune {

namespace {

// Reasonable bound: real headers are well under 10 MB (the 27B's shards hold ~100 tensors each).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

absl::Status corrupt(const std::string& path, const std::string& what) {
    return absl::DataLossError(absl::StrCat(path, ": corrupt safetensors file: ", what));
}

absl::StatusOr<SafetensorsEntry> parse_entry(const std::string& path, const std::string& name,
                                             const nlohmann::json& j, size_t data_bytes) {
    const std::string where = absl::StrCat("tensor '", name, "'");
    if (!j.is_object()) return corrupt(path, where + " is not an object");
    if (!j.contains("dtype") || !j["dtype"].is_string())
        return corrupt(path, where + " has no dtype");
    const std::string dtype = j["dtype"].get<std::string>();
    const auto dt = dtype_from_name(dtype);
    if (!dt) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": ", where,
                                                       " has unsupported dtype '", dtype,
                                                       "' (supported: BF16 F16 F32 I32 I64)"));
    }
    if (!j.contains("shape") || !j["shape"].is_array())
        return corrupt(path, where + " has no shape");
    if (!j.contains("data_offsets") || !j["data_offsets"].is_array() ||
        j["data_offsets"].size() != 2) {
        return corrupt(path, where + " has no data_offsets pair");
    }
    SafetensorsEntry e;
    e.dtype = *dt;
    uint64_t count = 1;
    for (const auto& d : j["shape"]) {
        if (!d.is_number_unsigned()) return corrupt(path, where + " has a non-integer dimension");
        const uint64_t v = d.get<uint64_t>();
        if (v > (1ull << 40) || (v != 0 && count > (1ull << 50) / v)) {
            return corrupt(path, where + " has an absurd shape");
        }
        count *= v;
        e.shape.push_back(static_cast<int64_t>(v));
    }
    const auto& off = j["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
        return corrupt(path, where + " has non-integer data_offsets");
    }
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_bytes) {
        return corrupt(path, absl::StrCat(where, " data_offsets [", e.begin, ", ", e.end,
                                          ") exceed the data region of ", data_bytes,
                                          " bytes (file truncated?)"));
    }
    if (e.end - e.begin != count * dtype_size(e.dtype)) {
        return corrupt(
            path, absl::StrCat(where, " holds ", e.end - e.begin, " bytes but shape and ", dtype,
                               " need ", count * dtype_size(e.dtype)));
    }
    return e;
}

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
    DT_ASSIGN_OR_RETURN(MappedFile file, map_file(path));
    const size_t size = file.size;
    if (size < 8) {
        return corrupt(
            path, absl::StrCat("only ", size, " bytes, shorter than the 8-byte header length"));
    }
    SafetensorsFile f;
    f.path_ = path;
    // The Storage keeps the mapping alive through its deleter.
    f.mapping_ = std::make_shared<Storage>(const_cast<unsigned char*>(file.data), size,
                                           Device::cpu(), [keep = file.keep](void*) {});
    const auto* bytes = file.data;
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
    if (header_len > kMaxHeaderBytes || header_len > size - 8) {
        return corrupt(path, absl::StrCat("header length ", header_len, " exceeds the file size ",
                                          size, " (truncated or not a safetensors file)"));
    }
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len);
    } catch (const nlohmann::json::exception& e) {
        return corrupt(path, absl::StrCat("header is not valid JSON: ", e.what()));
    }
    if (!header.is_object()) return corrupt(path, "header is not a JSON object");
    f.data_start_ = 8 + header_len;
    const size_t data_bytes = size - f.data_start_;
    std::vector<std::pair<size_t, std::string>> order;
    for (const auto& [name, value] : header.items()) {
        if (name == "__metadata__") {
            if (!value.is_object()) return corrupt(path, "__metadata__ is not an object");
            for (const auto& [k, v] : value.items()) {
                if (v.is_string()) f.metadata_[k] = v.get<std::string>();
            }
            continue;
        }
        DT_ASSIGN_OR_RETURN(SafetensorsEntry e, parse_entry(path, name, value, data_bytes));
        order.emplace_back(e.begin, name);
        f.entries_.emplace(name, std::move(e));
    }
    std::sort(order.begin(), order.end());
    for (size_t i = 0; i < order.size(); ++i) {
        if (i > 0) {
            const auto& prev = f.entries_.at(order[i - 1].second);
            if (prev.end > order[i].first) {
                return corrupt(path, absl::StrCat("tensors '", order[i - 1].second, "' and '",
                                                  order[i].second, "' overlap"));
            }
        }
        f.names_.push_back(order[i].second);
    }
    return f;
}

const SafetensorsEntry* SafetensorsFile::entry(const std::string& name) const {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
}

absl::StatusOr<Tensor> SafetensorsFile::get(const std::string& name) const {
    const SafetensorsEntry* e = entry(name);
    if (!e) return absl::NotFoundError(absl::StrCat(path_, ": no tensor '", name, "'"));
    return Tensor::wrap(mapping_, data_start_ + e->begin, e->shape, e->dtype);
}

absl::Status SafetensorsFile::copy_bytes(const std::string& name, size_t begin, size_t end,
                                         void* dst) const {
    const SafetensorsEntry* e = entry(name);
    if (!e) return absl::NotFoundError(absl::StrCat(path_, ": no tensor '", name, "'"));
    if (begin > end || end > e->end - e->begin) {
        return absl::OutOfRangeError(absl::StrCat(path_, ": bytes [", begin, ", ", end,
                                                  ") of tensor '", name, "' (", e->end - e->begin,
                                                  " bytes)"));
    }
    const auto* from =
        static_cast<const unsigned char*>(mapping_->data()) + data_start_ + e->begin + begin;
    std::memcpy(dst, from, end - begin);
    release_mapped_pages(from, end - begin);
    return absl::OkStatus();
}

absl::Status copy_sharded_f32(const std::vector<SafetensorsFile>& files, const std::string& name,
                              int64_t shard, int64_t first, int64_t last, float* out) {
    for (int64_t a = first; a < last;) {
        const int64_t r = a / shard;
        const int64_t b = std::min(last, (r + 1) * shard);
        if (static_cast<size_t>(r) >= files.size()) {
            return absl::OutOfRangeError(absl::StrCat("element ", a, " of '", name, "' is past ",
                                                      files.size(), " shards of ", shard));
        }
        DT_RETURN_IF_ERROR(files[static_cast<size_t>(r)].copy_bytes(
            name, sizeof(float) * static_cast<size_t>(a - r * shard),
            sizeof(float) * static_cast<size_t>(b - r * shard), out + (a - first)));
        a = b;
    }
    return absl::OkStatus();
}

size_t SafetensorsSpec::nbytes() const {
    size_t n = dtype_size(dtype);
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
}

namespace {

// The 8-byte length and the JSON header (padded to 8 bytes) for tensors laid out in order.
absl::StatusOr<std::string> safetensors_header(const std::string& path,
                                               const std::vector<SafetensorsSpec>& specs,
                                               const std::map<std::string, std::string>& metadata) {
    nlohmann::json header = nlohmann::json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::set<std::string> seen;
    size_t offset = 0;
    for (const SafetensorsSpec& t : specs) {
        if (!seen.insert(t.name).second) {
            return absl::InvalidArgumentError(
                absl::StrCat(path, ": duplicate tensor name '", t.name, "'"));
        }
        header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + t.nbytes()}}};
        offset += t.nbytes();
    }
    std::string text = header.dump();
    // Pad with spaces so the data region starts 8-byte aligned, as the reference writer does.
    while ((8 + text.size()) % 8 != 0) text.push_back(' ');
    std::string out(8, '\0');
    const uint64_t n = text.size();
    for (int i = 0; i < 8; ++i)
        out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
    return out + text;
}

}  // namespace

absl::Status write_safetensors_streamed(
    const std::string& path, const std::vector<SafetensorsSpec>& specs,
    const std::map<std::string, std::string>& metadata,
    const std::function<absl::Status(size_t, const SafetensorsWrite&)>& fill) {
    DT_ASSIGN_OR_RETURN(const std::string header, safetensors_header(path, specs, metadata));
    return process_sandbox().write_atomic_streamed(path, [&](const PathSandbox::WriteFn& write) {
        DT_RETURN_IF_ERROR(write(header.data(), header.size()));
        for (size_t i = 0; i < specs.size(); ++i) {
            size_t written = 0;
            DT_RETURN_IF_ERROR(fill(i, [&](const void* data, size_t size) {
                written += size;
                if (written > specs[i].nbytes()) return absl::OkStatus();  // reported below
                return write(data, size);
            }));
            if (written != specs[i].nbytes()) {
                return absl::InternalError(absl::StrCat(path, ": tensor '", specs[i].name,
                                                        "' was given ", written, " bytes, needs ",
                                                        specs[i].nbytes()));
            }
        }
        return absl::OkStatus();
    });
}

absl::Status write_safetensors(const std::string& path,
                               const std::vector<std::pair<std::string, Tensor>>& tensors,
                               const std::map<std::string, std::string>& metadata) {
    std::vector<SafetensorsSpec> specs;
    for (const auto& [name, t] : tensors) specs.push_back({name, t.dtype(), t.shape()});
    return write_safetensors_streamed(
        path, specs, metadata, [&](size_t i, const SafetensorsWrite& write) -> absl::Status {
            DT_ASSIGN_OR_RETURN(Tensor h, tensors[i].second.to_device(Device::cpu()));
            return write(h.raw_data(), h.nbytes());
        });
}

}  // namespace deltatune
