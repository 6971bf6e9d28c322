// Small file helpers for checkpoints: whole-file reads and crash-safe atomic writes.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace deltatune {

absl::StatusOr<std::string> read_file(const std::string& path);
// Writes the chunks to `path` through a temporary file in the same directory, fsyncs it, renames
// it into place and fsyncs the directory, so readers see the old file or the new one, never half.
absl::Status write_file_atomic(const std::string& path,
                               const std::vector<std::pair<const void*, size_t>>& chunks);
absl::Status write_file_atomic(const std::string& path, const std::string& contents);

}  // namespace deltatune
