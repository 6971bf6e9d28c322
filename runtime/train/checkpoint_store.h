// Training checkpoints: one directory per step under a root,
// written into a temporary directory, a manifest with every file's size and SHA-256 written last,
// then renamed into place and the parent directory fsynced. A directory without a manifest was
// never committed and is ignored (and garbage-collected). Loading verifies sizes and checksums.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace deltatune {

struct CheckpointInfo {
    int64_t step = 0;
    std::string path;
    int64_t bytes = 0;
    std::string manifest_sha256;
};

class CheckpointWriter {
  public:
    // Starts checkpoint `step` under `root` (created if needed) in a temporary directory.
    static absl::StatusOr<CheckpointWriter> begin(const std::string& root, int64_t step);
    // A checkpoint written by several ranks into one temporary directory named from `shared`:
    // the owner (rank 0) creates it fresh; the others only point at it (after a barrier), write
    // their files, and leave commit() to the owner.
    static absl::StatusOr<CheckpointWriter> begin_shared(const std::string& root, int64_t step,
                                                         const std::string& shared, bool owner);
    // Path of a file to write inside the checkpoint (write it completely before commit()).
    std::string file(const std::string& name) const;
    // Hashes every file, writes manifest.json, renames the directory into place, fsyncs the root.
    absl::StatusOr<CheckpointInfo> commit();
    // Removes the temporary directory (a checkpoint that failed to write).
    void abandon();

  private:
    std::string root_, tmp_dir_, final_dir_;
    int64_t step_ = 0;
};

// Committed checkpoints under `root`, oldest first. Stray temporary directories are removed.
// "step-0000000042": the committed folder name of a step.
std::string step_dir_name(int64_t step);
absl::StatusOr<std::vector<CheckpointInfo>> list_checkpoints(const std::string& root);
// Verifies every file of the checkpoint against its manifest: DataLoss naming the file on a size
// or checksum mismatch, a missing file or a malformed manifest.
absl::Status verify_checkpoint(const std::string& checkpoint_dir);
// Deletes committed checkpoints beyond the newest `keep_last_n`, except the one of step
// `keep_step` (early stopping's best); returns the deleted paths.
std::vector<std::string> prune_checkpoints(const std::string& root, int64_t keep_last_n,
                                           int64_t keep_step = -1);

// Hex SHA-256 of a file's contents.
absl::StatusOr<std::string> sha256_file(const std::string& path);

}  // namespace deltatune
