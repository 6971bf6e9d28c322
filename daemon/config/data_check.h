// What a job's data files hold, read at submission (submit --validate-only included) rather than
// discovered when a rank starts: a file in a format deltatune does not read (Parquet, Arrow,
// compressed, zip) is refused by name with how to convert it, and the first non-blank line must be
// a JSON object of the spec's format.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "deltatune/v1/job.pb.h"

namespace deltatune::daemon {

// Blank lines read past the longest first line allowed before the check gives up looking (and
// accepts): submission reads a bounded prefix of each file.
inline constexpr size_t kBlankPrefixBytes = size_t{1} << 20;

// `field` names the spec entry ("data.train_files[0]"); `path` is the confined file. Errors are
// InvalidArgument "INVALID_CONFIG: ...". With bad_lines: skip a malformed first line is allowed
// (the job counts it), an unreadable format never is. True when the file is chat data (by its
// format, or by its first line under format: auto), which a chat template renders.
absl::StatusOr<bool> check_data_file(const std::string& field, const std::string& path,
                                     const v1::DataSpec& data);

}  // namespace deltatune::daemon
