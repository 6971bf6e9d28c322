// Small file helpers for the whole runtime: whole-file reads, mappings and crash-safe atomic
// writes, all through the process sandbox (path_sandbox.h).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace deltatune {

absl::StatusOr<std::string> read_file(const std::string& path);

// A whole file mapped read-only. `keep` owns the mapping (unmapped when the last copy goes); an
// empty file has data == nullptr and size 0. Missing file: NotFound; unreadable: PermissionDenied.
struct MappedFile {
    const unsigned char* data = nullptr;
    size_t size = 0;
    std::shared_ptr<const void> keep;
};
absl::StatusOr<MappedFile> map_file(const std::string& path);
// Gives the whole pages of [data, data + size) inside a read-only mapping (map_file's) back to
// the page cache: they leave this process's resident set, and the next access reads the cache
// again. What streams a file larger than memory through the process calls after each piece.
void release_mapped_pages(const void* data, size_t size);
// Anonymous memory (an allocation this code owns): the whole pages inside [data, data + size)
// go back to the kernel and read as zeros when touched again; the partial pages at either end
// keep their values.
void discard_pages(void* data, size_t size);
// Writes the chunks to `path` through a temporary file in the same directory, fsyncs it, renames
// it into place and fsyncs the directory, so readers see the old file or the new one, never half.
absl::Status write_file_atomic(const std::string& path,
                               const std::vector<std::pair<const void*, size_t>>& chunks);
absl::Status write_file_atomic(const std::string& path, const std::string& contents);

}  // namespace deltatune
