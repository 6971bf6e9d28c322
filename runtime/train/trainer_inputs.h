// What the trainer reads and writes around its loop: the model and the tokenized train / eval
// corpora (one global document index over their files), batches assembled from packed bins, the
// forward-only evaluation of a corpus, and the tokenizer files an export carries.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/batch/packed_batch.h"
#include "runtime/data/dataset.h"
#include "runtime/data/packing.h"
#include "runtime/data/tokenizer.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/train/train_engine.h"
#include "runtime/train/trainer.h"
#include "runtime/train/training_length.h"

namespace deltatune {

// Every training (or eval) file, addressed by one global document index.
struct Corpus {
    std::vector<TokenizedDataset> files;
    std::vector<int64_t> first_doc;  // global index of each file's first document
    int64_t trained_tokens = 0;      // labels other than -100

    std::vector<int64_t> lengths() const {
        std::vector<int64_t> out;
        for (const auto& f : files) {
            const auto l = f.lengths();
            out.insert(out.end(), l.begin(), l.end());
        }
        return out;
    }
    Document piece(const Segment& s) const {
        size_t f = 0;
        while (f + 1 < files.size() && first_doc[f + 1] <= s.doc) ++f;
        return files[f].document(s.doc - first_doc[f], s.begin, s.end);
    }
    int64_t tokens() const {
        int64_t n = 0;
        for (const auto& f : files) n += f.total_tokens();
        return n;
    }
};

struct Loaded {
    HfModel model;
    std::unique_ptr<Tokenizer> tokenizer;
    Corpus train, eval;
    ParamSet adapters;  // TrainConfig::lora's tensors, initialised; empty without
};

// The model, the tokenizer when the data needs one, the train and eval corpora; MODEL_LOADED and
// DATA_LOADED go to the hooks.
absl::StatusOr<Loaded> load_train_inputs(const TrainConfig& c, const TrainerHooks& hooks);
absl::StatusOr<PackedBatch> assemble(const Corpus& corpus, const PackedBin& bin, int64_t vocab);
// The packer's mixture for per-file weights (TrainConfig::train_weights): empty when there are
// none or all are 1 (the plan is then exactly the unweighted one).
absl::StatusOr<std::vector<MixtureGroup>> training_mixture(const Corpus& corpus,
                                                           const std::vector<double>& weights);
// The packer of a job's training data over `shards` data shards (the world size, or
// TrainConfig::data_shards): the trainer's, and the plan's (training_plan.h), so the same batches
// in the same order wherever it is made.
absl::StatusOr<Packer> make_train_packer(const TrainConfig& c, const Corpus& train, int shards);
// The job's optimizer steps and warmup for that packer's epoch.
absl::StatusOr<TrainingLength> train_length_of(const TrainConfig& c, const Packer& packer);
// A global step's batch digest (STEP_METRICS' batch_digest): FNV-1a over every segment's
// (document, begin, end) of its micro-steps' bins, in order, from kBatchDigestStart.
inline constexpr uint64_t kBatchDigestStart = 1469598103934665603ull;
uint64_t batch_digest_add(uint64_t digest, const Segment& s);

// Token-weighted mean loss of a corpus (forward only), packed deterministically.
absl::StatusOr<double> evaluate_corpus(TrainEngine& engine, const Corpus& eval,
                                       const TrainConfig& c, int64_t vocab);
// Puts what a server loads besides the weights into export_dir: the tokenizer files beside the
// model (or the spec's tokenizer) as they are (tokenizer.json, tokenizer_config.json,
// chat_template.jinja, special_tokens_map.json, ...), and a generation_config.json, derived from
// the exported config.json's token ids (as transformers does) when the base has none.
absl::Status copy_tokenizer_files(const TrainConfig& c, const std::string& export_dir);
// An export: the model's weights and config (save_hf_model), then the files above. The job's own
// export and export_checkpoint both write through it, so the two cannot differ.
// The CPU engine for `c`: with c.lora it trains `adapters` (make_lora_params's, outliving the
// engine) on the frozen base, else model.params.
absl::StatusOr<std::unique_ptr<TrainEngine>> make_cpu_engine_for(const TrainConfig& c,
                                                                 HfModel& model, Communicator& comm,
                                                                 ParamSet& adapters);
// With c.lora the export is the adapter in PEFT's form (`adapters`; or merged into the base,
// streamed from it), written by the rank with `write_files` alone; else the model whole, from
// `values` (the engine's param_bytes), which every rank calls (it may gather) and only the one
// with `write_files` writes. Host memory: what `values` holds, never the model.
absl::Status write_export(const TrainConfig& c, const HfModel& model, const ParamSet& adapters,
                          const ParamBytes& values, const std::string& dir, bool write_files);

// A committed training checkpoint of the model at c.model_dir as a Hugging Face folder in
// out_dir (weights, config.json, tokenizer files), the form a job's final export has, from a
// checkpoint of any world size, CPU or GPU ranks. Full fine-tuning: the masters are read from
// the rank files a piece at a time (host memory: a few MB); a LoRA adapter's state is loaded
// whole with its base. Returns the checkpoint's step.
absl::StatusOr<int64_t> export_checkpoint(const TrainConfig& c, const std::string& checkpoint_dir,
                                          const std::string& out_dir);

}  // namespace deltatune
