// The training plan writer.
#include "runtime/train/training_plan.h"

#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"
#include "runtime/train/trainer_inputs.h"

namespace deltatune {

namespace {

nlohmann::json batch_line(int64_t step, int64_t micro, size_t shard, const PackedBin& bin,
                          const PackedBatch& b) {
    nlohmann::json segments = nlohmann::json::array();
    for (const Segment& s : bin.segments) segments.push_back({s.doc, s.begin, s.end});
    return {{"step", step},
            {"micro", micro},
            {"shard", shard},
            {"segments", segments},
            {"input_ids", b.input_ids},
            {"labels", flattened_labels(b)},
            {"cu_seqlens", b.cu_seqlens}};
}

}  // namespace

absl::StatusOr<int64_t> write_training_plan(const TrainConfig& c, int shards, std::ostream& out) {
    if (shards < 1) return absl::InvalidArgumentError("the plan needs at least one data shard");
    DT_ASSIGN_OR_RETURN(const Loaded in, load_train_inputs(c, TrainerHooks{}));
    DT_ASSIGN_OR_RETURN(Packer packer, make_train_packer(c, in.train, shards));
    DT_ASSIGN_OR_RETURN(const TrainingLength length, train_length_of(c, packer));
    const int64_t vocab = in.model.config.vocab_size;
    for (int64_t step = 1; step <= length.max_steps; ++step) {
        uint64_t digest = kBatchDigestStart;
        int64_t labels = 0;
        for (int64_t m = 0; m < c.grad_accum; ++m) {
            const std::vector<PackedBin> bins = packer.next_step();
            for (size_t r = 0; r < bins.size(); ++r) {
                for (const Segment& s : bins[r].segments) digest = batch_digest_add(digest, s);
                DT_ASSIGN_OR_RETURN(const PackedBatch b, assemble(in.train, bins[r], vocab));
                labels += b.label_tokens();
                out << batch_line(step, m, r, bins[r], b).dump() << '\n';
            }
        }
        // As STEP_METRICS carries it: the digest's top 48 bits, exact in a double.
        out << nlohmann::json{{"step", step},
                              {"batch_digest", static_cast<double>(digest >> 16)},
                              {"label_tokens", labels}}
                   .dump()
            << '\n';
    }
    if (!out) return absl::DataLossError("writing the training plan failed");
    return length.max_steps;
}

}  // namespace deltatune
