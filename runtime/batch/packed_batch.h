// A packed 1D batch: documents concatenated into one token stream with their boundaries
// (cu_seqlens), position ids restarting at 0 per document, and per-position next-token targets.
// Labels follow the Hugging Face convention (same length as input_ids, -100 = not trained); the
// shift happens here, inside each document, so no position ever predicts across a boundary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace deltatune {

struct Document {
    std::vector<int32_t> input_ids;
    std::vector<int32_t> labels;  // same length; -100 where not trained
};

struct PackedBatch {
    std::vector<int32_t> input_ids;     // (T)
    std::vector<int32_t> targets;       // (T) labels[t + 1] within the document, else -100
    std::vector<int32_t> position_ids;  // (T) 0, 1, ... per document
    std::vector<int32_t> cu_seqlens;    // (num_docs + 1), cu_seqlens[0] = 0

    int64_t tokens() const { return static_cast<int64_t>(input_ids.size()); }
    int64_t num_docs() const { return static_cast<int64_t>(cu_seqlens.size()) - 1; }
    int64_t label_tokens() const;  // targets that are not -100
};

// Validates ids against the vocabulary (InvalidArgument naming the document and position).
absl::StatusOr<PackedBatch> pack_documents(const std::vector<Document>& docs, int64_t vocab_size);

// Labels for a flattened batch in the Hugging Face DataCollatorWithFlattening convention: in input
// order, -100 on each document's first token and where not trained; i.e. labels[t] = targets[t-1]
// inside a document. Feeding these to a model that shifts labels across the whole flat stream
// reproduces `targets` without any cross-document prediction.
std::vector<int32_t> flattened_labels(const PackedBatch& batch);

// Parses BATCH.json: {"documents": [{"input_ids": [...], "labels": [...]}, ...]}; labels default
// to input_ids when absent. `source` names the file in errors.
absl::StatusOr<std::vector<Document>> parse_batch_json(const std::string& text,
                                                       const std::string& source);

}  // namespace deltatune
