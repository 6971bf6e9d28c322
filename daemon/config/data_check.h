// What a job's data files hold, read at submission (submit --validate-only included) rather than
// discovered when a rank starts: a file in a format deltatune does not read (Parquet, Arrow,
// compressed, zip) is refused by name with how to convert it, and the first non-blank line must be
// a JSON object of the spec's format.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "deltatune/v1/job.pb.h"
#include "runtime/data/dataset.h"

namespace deltatune::daemon {

// Blank lines read past the longest first line allowed before the check gives up looking (and
// accepts): submission reads a bounded prefix of each file.
inline constexpr size_t kBlankPrefixBytes = size_t{1} << 20;

// What a data file's first line says it holds (never kOther: such a line is refused).
using DataKind = DataLineKind;
// Chat data: text a chat template renders (conversations and plain text alike).
inline bool is_chat(DataKind k) {
    return k == DataKind::kText || k == DataKind::kConversation;
}

// `field` names the spec entry ("data.train_files[0]"); `path` is the confined file. Errors are
// InvalidArgument "INVALID_CONFIG: ...". With bad_lines: skip a malformed first line is allowed
// (the job counts it, and the kind follows the spec's format), an unreadable format never is.
absl::StatusOr<DataKind> check_data_file(const std::string& field, const std::string& path,
                                         const v1::DataSpec& data);

// The over-long policy a spec that names none gets: truncate when the train files hold
// conversations (a reply is never split from its prompt), else split.
v1::OverlongPolicy default_overlong(const std::vector<DataKind>& train_kinds);
// The same from `data`'s train files, each's first line read with check_data_file (for callers
// that have not read them already, as submission has).
absl::StatusOr<v1::OverlongPolicy> default_overlong_of(const v1::DataSpec& data);

}  // namespace deltatune::daemon
