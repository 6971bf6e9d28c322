// The training-loop tests' data and configuration (trainer_test.cc, trainer_gpu_test.cc): a
// tiny model and pre-tokenized documents it can learn.
#pragma once

#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/train/trainer.h"
#include "tests/common/test_util.h"

namespace deltatune::testing {

// Pre-tokenized documents that repeat a short pattern, so a tiny model can learn them.
inline std::string write_data(const std::string& path, int docs, uint32_t seed) {
    std::mt19937 rng(seed);
    std::ofstream out(path);
    for (int d = 0; d < docs; ++d) {
        const int n = 3 + static_cast<int>(rng() % 30);
        const int start = static_cast<int>(rng() % 50);
        out << "{\"input_ids\": [";
        for (int i = 0; i < n; ++i) out << (i ? ", " : "") << (start + i) % 60;
        out << "]}\n";
    }
    return path;
}

inline TrainConfig config(const TempDir& tmp, const std::string& out) {
    TrainConfig c;
    c.model_dir = source_path("tests/fixtures/parity/tiny-c");
    c.train_files = {write_data(tmp.file("train.jsonl"), 120, 1)};
    c.eval_files = {write_data(tmp.file("eval.jsonl"), 10, 2)};
    c.tokens_per_batch = 96;
    c.max_steps = 8;
    c.lr = {LrScheduleKind::kCosine, 3e-3, 2, 8, 0.1};
    c.adamw.weight_decay = 0.01;
    c.checkpoint_every = 2;
    c.keep_last_n = 3;
    c.output_dir = tmp.file(out);
    c.seed = 7;
    return c;
}

// A train() call's events and result.
struct RecordedRun {
    std::vector<TrainerEvent> events;
    absl::StatusOr<TrainResult> result = absl::UnknownError("not run");
    // The events of one type, in order.
    std::vector<const TrainerEvent*> of(const std::string& type) const {
        std::vector<const TrainerEvent*> out;
        for (const auto& e : events) {
            if (e.type == type) out.push_back(&e);
        }
        return out;
    }
};

// Trains `c` with `hooks` (their on_event replaced by the recorder).
inline RecordedRun run(const TrainConfig& c, TrainerHooks hooks = {}) {
    RecordedRun r;
    hooks.on_event = [&](const TrainerEvent& e) { r.events.push_back(e); };
    r.result = train(c, hooks);
    return r;
}

// Hooks that ask the trainer to checkpoint and exit once it reports step `step`.
inline TrainerHooks stop_at_step(int step) {
    auto seen = std::make_shared<int>(0);
    TrainerHooks h;
    h.on_progress = [seen](const TrainProgress& p) { *seen = static_cast<int>(p.step); };
    h.poll = [seen, step] {
        return *seen == step ? StopRequest::kCheckpointAndExit : StopRequest::kNone;
    };
    return h;
}

}  // namespace deltatune::testing
