// Scalar summaries as a TensorBoard event file (what `tensorboard --logdir` and its readers
// load): TFRecord framing (length, masked CRC32C of the length, the serialised Event, masked
// CRC32C of the data) around tensorboard.Event messages (proto/tensorboard/event.proto).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/train/trainer.h"

namespace deltatune {

// CRC32C (Castagnoli) of `n` bytes, and TFRecord's masking of it.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
  public:
    // A new file events.out.tfevents.<unix seconds>.<host>.<pid> in `dir` (created), starting
    // with the file-version record. Every write is flushed: a killed rank loses nothing written.
    static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> open(const std::string& dir);
    ~TensorBoardWriter();
    // One Event at `step` holding a simple_value per tag.
    absl::Status scalars(int64_t step, double wall_time, const std::map<std::string, double>& v);
    const std::string& path() const { return path_; }

  private:
    TensorBoardWriter(std::FILE* f, std::string path) : file_(f), path_(std::move(path)) {}
    absl::Status record(const std::string& data);
    std::FILE* file_;
    std::string path_;
};

// The job's scalars (loss, lr, gradient norm, tokens/s as train/*; eval loss as eval/*) as a
// TensorBoard event file under `dir` (a job's output_dir/tensorboard), one file per attempt,
// opened at the first metrics event. A file that cannot be written ends the summaries with one
// WARNING event (TENSORBOARD_FAILED), which add() returns; the job goes on.
class TensorBoardLog {
  public:
    explicit TensorBoardLog(std::string dir) : dir_(std::move(dir)) {}
    std::optional<TrainerEvent> add(const TrainerEvent& e);

  private:
    std::string dir_;
    std::unique_ptr<TensorBoardWriter> writer_;
    bool failed_ = false;
};

}  // namespace deltatune
