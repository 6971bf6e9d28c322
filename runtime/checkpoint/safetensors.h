// safetensors files: memory-mapped reading with full header validation, and atomic writing.
// Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}},
// then the data region. Every error names the file (and the tensor where there is one).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/tensor/tensor.h"

namespace deltatune {

struct SafetensorsEntry {
    DType dtype;
    std::vector<int64_t> shape;
    size_t begin = 0;  // byte offsets into the data region
    size_t end = 0;
};

class SafetensorsFile {
  public:
    // Maps `path` read-only and validates the header: known dtypes, offsets inside the file,
    // byte counts that match the shapes. Missing file: NotFound; malformed: DataLoss.
    static absl::StatusOr<SafetensorsFile> open(const std::string& path);

    const std::string& path() const { return path_; }
    // Tensor names in file order of their data offsets.
    const std::vector<std::string>& names() const { return names_; }
    bool contains(const std::string& name) const { return entries_.count(name) != 0; }
    const SafetensorsEntry* entry(const std::string& name) const;
    // A zero-copy CPU view of the tensor; the mapping lives as long as any view of it.
    absl::StatusOr<Tensor> get(const std::string& name) const;
    // Copies bytes [begin, end) of a tensor's stored data into `dst` and gives the mapped pages
    // it read back to the page cache, so streaming a whole checkpoint through this process
    // leaves its resident memory where it was. OutOfRange past the tensor's end.
    absl::Status copy_bytes(const std::string& name, size_t begin, size_t end, void* dst) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

  private:
    std::string path_;
    std::shared_ptr<Storage> mapping_;  // the whole file
    size_t data_start_ = 0;
    std::map<std::string, SafetensorsEntry> entries_;
    std::vector<std::string> names_;
    std::map<std::string, std::string> metadata_;
};

// Elements [first, last) of a flat fp32 segment saved as tensor `name` cut into equal shards of
// `shard` elements over `files` (file r holds elements [r, r + 1) * shard: a sharded checkpoint's
// rank files), copied into `out` with the pages read given back. The caller has checked the
// tensors' sizes; OutOfRange past a file's tensor.
absl::Status copy_sharded_f32(const std::vector<SafetensorsFile>& files, const std::string& name,
                              int64_t shard, int64_t first, int64_t last, float* out);

// A tensor whose bytes are produced while its file is written.
struct SafetensorsSpec {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    size_t nbytes() const;
};
// Writes `specs`' header, then calls fill(i, write) for each tensor in order, which must pass
// exactly that tensor's bytes to `write`, in as many pieces as it likes: host memory stays at what
// `fill` holds, whatever the file's size. Atomic like write_safetensors, and the same bytes for
// the same tensors.
using SafetensorsWrite = std::function<absl::Status(const void* data, size_t size)>;
absl::Status write_safetensors_streamed(
    const std::string& path, const std::vector<SafetensorsSpec>& specs,
    const std::map<std::string, std::string>& metadata,
    const std::function<absl::Status(size_t, const SafetensorsWrite&)>& fill);

// Writes tensors (any device; copied to host) to `path` atomically: a temporary file in the same
// directory, fsync, rename. Names must be unique.
absl::Status write_safetensors(const std::string& path,
                               const std::vector<std::pair<std::string, Tensor>>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace deltatune
