// Packing documents into a 1D batch, and the BATCH.json reader.
#include "runtime/batch/packed_batch.h"

#include "absl/strings/str_cat.h"
#include "kernels/loss/cross_entropy.h"
#include "nlohmann/json.hpp"

namespace deltatune {

int64_t PackedBatch::label_tokens() const {
    int64_t n = 0;
    for (int32_t t : targets) n += t != kIgnoreIndex;
    return n;
}

absl::StatusOr<PackedBatch> pack_documents(const std::vector<Document>& docs, int64_t vocab_size) {
    if (docs.empty()) return absl::InvalidArgumentError("batch has no documents");
    PackedBatch b;
    b.cu_seqlens.push_back(0);
    for (size_t d = 0; d < docs.size(); ++d) {
        const Document& doc = docs[d];
        if (doc.input_ids.empty())
            return absl::InvalidArgumentError(absl::StrCat("document ", d, " is empty"));
        if (doc.labels.size() != doc.input_ids.size()) {
            return absl::InvalidArgumentError(absl::StrCat("document ", d, ": ", doc.labels.size(),
                                                           " labels for ", doc.input_ids.size(),
                                                           " input_ids"));
        }
        const size_t n = doc.input_ids.size();
        for (size_t i = 0; i < n; ++i) {
            const int32_t id = doc.input_ids[i];
            if (id < 0 || id >= vocab_size) {
                return absl::InvalidArgumentError(
                    absl::StrCat("document ", d, " position ", i, ": token id ", id,
                                 " outside the vocabulary [0, ", vocab_size, ")"));
            }
            const int32_t label = doc.labels[i];
            if (label != kIgnoreIndex && (label < 0 || label >= vocab_size)) {
                return absl::InvalidArgumentError(absl::StrCat("document ", d, " position ", i,
                                                               ": label ", label,
                                                               " is neither -100 nor a token id"));
            }
            b.input_ids.push_back(id);
            b.position_ids.push_back(static_cast<int32_t>(i));
            b.targets.push_back(i + 1 < n ? doc.labels[i + 1] : kIgnoreIndex);
        }
        if (b.input_ids.size() > static_cast<size_t>(INT32_MAX)) {
            return absl::InvalidArgumentError("batch exceeds 2^31 tokens");
        }
        b.cu_seqlens.push_back(static_cast<int32_t>(b.input_ids.size()));
    }
    return b;
}

std::vector<int32_t> flattened_labels(const PackedBatch& batch) {
    std::vector<int32_t> labels(batch.input_ids.size(), kIgnoreIndex);
    for (size_t d = 0; d + 1 < batch.cu_seqlens.size(); ++d) {
        const auto begin = static_cast<size_t>(batch.cu_seqlens[d]);
        const auto end = static_cast<size_t>(batch.cu_seqlens[d + 1]);
        for (size_t t = begin + 1; t < end; ++t) labels[t] = batch.targets[t - 1];
    }
    return labels;
}

absl::StatusOr<std::vector<Document>> parse_batch_json(const std::string& text,
                                                       const std::string& source) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON: ", e.what()));
    }
    if (!j.is_object() || !j.contains("documents") || !j["documents"].is_array()) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": expected {\"documents\": [...]}"));
    }
    std::vector<Document> docs;
    for (size_t d = 0; d < j["documents"].size(); ++d) {
        const auto& jd = j["documents"][d];
        const std::string where = absl::StrCat(source, ": documents[", d, "]");
        auto read_ids = [&](const char* key, std::vector<int32_t>& out) -> absl::Status {
            if (!jd[key].is_array())
                return absl::InvalidArgumentError(
                    absl::StrCat(where, ".", key, " is not an array"));
            for (size_t i = 0; i < jd[key].size(); ++i) {
                const auto& v = jd[key][i];
                if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN ||
                    v.get<int64_t>() > INT32_MAX) {
                    return absl::InvalidArgumentError(absl::StrCat(
                        where, ".", key, "[", i, "] = ", v.dump(), " is not a 32-bit integer"));
                }
                out.push_back(v.get<int32_t>());
            }
            return absl::OkStatus();
        };
        if (!jd.is_object() || !jd.contains("input_ids")) {
            return absl::InvalidArgumentError(absl::StrCat(where, " has no input_ids"));
        }
        Document doc;
        if (absl::Status s = read_ids("input_ids", doc.input_ids); !s.ok()) return s;
        if (jd.contains("labels")) {
            if (absl::Status s = read_ids("labels", doc.labels); !s.ok()) return s;
        } else {
            doc.labels = doc.input_ids;
        }
        docs.push_back(std::move(doc));
    }
    return docs;
}

}  // namespace deltatune
