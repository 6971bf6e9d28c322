// Loading and saving Hugging Face Qwen3.5 checkpoints (single file or sharded with an index).
#include "runtime/model/hf_model_io.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "runtime/base/file_util.h"
#include "runtime/base/path_sandbox.h"
#include "runtime/base/status_macros.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/model/qwen35_params.h"

namespace deltatune {

namespace fs = std::filesystem;

namespace {

constexpr char kTextPrefix[] = "model.";
constexpr char kMultimodalPrefix[] = "model.language_model.";

// All safetensors files of a checkpoint and which file holds each tensor.
struct OpenCheckpoint {
    std::vector<std::unique_ptr<SafetensorsFile>> files;
    std::map<std::string, const SafetensorsFile*> where;
};

absl::StatusOr<OpenCheckpoint> open_checkpoint(const std::string& dir) {
    OpenCheckpoint ck;
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    std::vector<std::string> shard_names;
    std::map<std::string, std::string> weight_map;
    if (process_sandbox().exists(index.string())) {
        DT_ASSIGN_OR_RETURN(std::string text, read_file(index.string()));
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(text);
        } catch (const nlohmann::json::exception& e) {
            return absl::DataLossError(
                absl::StrCat(index.string(), ": not valid JSON: ", e.what()));
        }
        if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
            return absl::DataLossError(absl::StrCat(index.string(), ": no weight_map object"));
        }
        std::set<std::string> shards;
        for (const auto& [name, file] : j["weight_map"].items()) {
            if (!file.is_string()) {
                return absl::DataLossError(absl::StrCat(index.string(), ": weight_map entry '",
                                                        name, "' is not a file name"));
            }
            weight_map[name] = file.get<std::string>();
            shards.insert(file.get<std::string>());
        }
        shard_names.assign(shards.begin(), shards.end());
    } else if (process_sandbox().exists((fs::path(dir) / "model.safetensors").string())) {
        shard_names.push_back("model.safetensors");
    } else {
        return absl::NotFoundError(absl::StrCat(dir,
                                                ": neither model.safetensors nor "
                                                "model.safetensors.index.json exists"));
    }
    std::map<std::string, const SafetensorsFile*> by_file;
    for (const auto& shard : shard_names) {
        if (shard.find('/') != std::string::npos) {
            return absl::InvalidArgumentError(absl::StrCat(index.string(), ": shard name '", shard,
                                                           "' must be a plain file name"));
        }
        DT_ASSIGN_OR_RETURN(SafetensorsFile f,
                            SafetensorsFile::open((fs::path(dir) / shard).string()));
        ck.files.push_back(std::make_unique<SafetensorsFile>(std::move(f)));
        by_file[shard] = ck.files.back().get();
        for (const auto& name : ck.files.back()->names()) ck.where[name] = ck.files.back().get();
    }
    for (const auto& [name, shard] : weight_map) {
        const SafetensorsFile* f = by_file.at(shard);
        if (!f->contains(name)) {
            return absl::DataLossError(absl::StrCat(index.string(), " maps tensor '", name, "' to ",
                                                    f->path(), ", which does not contain it"));
        }
    }
    return ck;
}

bool untouched_tensor(const std::string& name) {
    return absl::StartsWith(name, "model.visual.") || absl::StartsWith(name, "mtp.");
}

}  // namespace

std::string checkpoint_name(const std::string& canonical, CheckpointLayout layout) {
    if (layout == CheckpointLayout::kMultimodal && absl::StartsWith(canonical, kTextPrefix)) {
        return kMultimodalPrefix + canonical.substr(std::strlen(kTextPrefix));
    }
    return canonical;
}

absl::Status CheckpointWeights::copy(size_t param, int64_t first, int64_t last, void* dst) const {
    const Param& p = params_.at(param);
    if (first < 0 || first > last || last > p.numel) {
        return absl::OutOfRangeError(absl::StrCat(p.file->path(), ": elements [", first, ", ", last,
                                                  ") of '", p.name, "' (", p.numel, ")"));
    }
    const size_t size = dtype_size(p.dtype);
    return p.file->copy_bytes(p.name, static_cast<size_t>(first) * size,
                              static_cast<size_t>(last) * size, dst);
}

absl::Status CheckpointWeights::copy_f32(size_t param, int64_t first, int64_t last,
                                         float* dst) const {
    const DType dt = dtype(param);
    if (dt == DType::kF32) return copy(param, first, last, dst);
    constexpr int64_t kPiece = 1 << 20;  // elements converted at a time
    std::vector<unsigned char> stored(static_cast<size_t>(kPiece) * dtype_size(dt));
    for (int64_t at = first; at < last; at += kPiece) {
        const int64_t end = std::min(last, at + kPiece);
        DT_RETURN_IF_ERROR(copy(param, at, end, stored.data()));
        float_span_to_f32(dt, stored.data(), dst + (at - first), end - at);
    }
    return absl::OkStatus();
}

absl::StatusOr<HfModel> open_hf_model(const std::string& dir) {
    HfModel m;
    const std::string config_path = (fs::path(dir) / "config.json").string();
    DT_ASSIGN_OR_RETURN(m.config_json, read_file(config_path));
    DT_ASSIGN_OR_RETURN(m.config, parse_qwen35_config(m.config_json, config_path));
    DT_ASSIGN_OR_RETURN(OpenCheckpoint ck, open_checkpoint(dir));

    bool any_multimodal = false;
    for (const auto& [name, f] : ck.where)
        any_multimodal |= absl::StartsWith(name, kMultimodalPrefix);
    m.layout = any_multimodal ? CheckpointLayout::kMultimodal : CheckpointLayout::kText;
    m.tied = ck.where.count("lm_head.weight") == 0;
    if (m.tied != m.config.tie_word_embeddings) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": config.json says tie_word_embeddings=",
                         m.config.tie_word_embeddings ? "true" : "false", " but the checkpoint ",
                         m.tied ? "has no" : "has an", " lm_head.weight tensor"));
    }
    // Names and shapes only: nothing is written into these tensors until materialize_weights.
    m.params = make_qwen35_params(m.config, m.tied, /*zero_fill=*/false);
    m.materialized = false;
    auto weights = std::make_shared<CheckpointWeights>();
    std::set<std::string> used;
    for (auto& p : m.params.all()) {
        const std::string name = checkpoint_name(p.name, m.layout);
        auto it = ck.where.find(name);
        if (it == ck.where.end()) {
            return absl::NotFoundError(absl::StrCat(dir, ": missing tensor '", name,
                                                    "' (expected shape ", p.value.shape_string(),
                                                    ")"));
        }
        const SafetensorsEntry* e = it->second->entry(name);
        if (e->shape != p.value.shape()) {
            return absl::InvalidArgumentError(absl::StrCat(
                it->second->path(), ": tensor '", name, "' has shape ", "[",
                absl::StrJoin(e->shape, ", "), "], config.json implies ", p.value.shape_string()));
        }
        if (!is_float_dtype(e->dtype)) {
            return absl::InvalidArgumentError(absl::StrCat(it->second->path(), ": tensor '", name,
                                                           "' has dtype ", dtype_name(e->dtype),
                                                           ", expected a float type"));
        }
        p.stored_dtype = e->dtype;
        weights->params_.push_back({it->second, name, e->dtype, p.value.numel()});
        used.insert(name);
    }
    for (const auto& [name, f] : ck.where) {
        if (used.count(name)) continue;
        if (untouched_tensor(name)) {
            DT_ASSIGN_OR_RETURN(Tensor view, f->get(name));
            m.untouched.emplace_back(name, std::move(view));
            continue;
        }
        return absl::InvalidArgumentError(
            absl::StrCat(f->path(), ": unexpected tensor '", name,
                         "' for this config (wrong layer_types or model?)"));
    }
    weights->files_ = std::move(ck.files);
    m.weights = std::move(weights);
    return m;
}

absl::Status materialize_weights(HfModel& model) {
    if (model.materialized) return absl::OkStatus();
    for (size_t i = 0; i < model.params.all().size(); ++i) {
        Tensor& v = model.params.all()[i].value;
        DT_RETURN_IF_ERROR(model.weights->copy_f32(i, 0, v.numel(), v.data<float>()));
    }
    model.materialized = true;
    return absl::OkStatus();
}

absl::StatusOr<HfModel> load_hf_model(const std::string& dir) {
    DT_ASSIGN_OR_RETURN(HfModel m, open_hf_model(dir));
    DT_RETURN_IF_ERROR(materialize_weights(m));
    return m;
}

absl::Status write_f32_as(DType dtype, const float* values, int64_t n,
                          const SafetensorsWrite& write) {
    if (dtype == DType::kF32) return write(values, static_cast<size_t>(n) * sizeof(float));
    constexpr int64_t kPiece = 1 << 20;  // elements converted at a time
    std::vector<unsigned char> out(static_cast<size_t>(std::min(n, kPiece)) * dtype_size(dtype));
    for (int64_t at = 0; at < n; at += kPiece) {
        const int64_t count = std::min(n - at, kPiece);
        f32_to_float_span(dtype, values + at, out.data(), count);
        DT_RETURN_IF_ERROR(write(out.data(), static_cast<size_t>(count) * dtype_size(dtype)));
    }
    return absl::OkStatus();
}

ParamBytes param_bytes_of(const ParamSet& params) {
    return [&params](size_t i, const SafetensorsWrite& write) {
        const NamedParam& p = params.all()[i];
        return write_f32_as(p.stored_dtype, p.value.data<float>(), p.value.numel(), write);
    };
}

namespace {

// The export's tensors (parameters in ParamSet order, then the untouched ones), split into
// shards in that order.
struct ShardPlan {
    std::vector<std::vector<SafetensorsSpec>> shards{1};
    std::vector<std::vector<size_t>> source;  // per shard entry: parameter index, or npos + k
    static constexpr size_t kUntouched = size_t(1) << 62;
};

ShardPlan plan_shards(const HfModel& model, size_t max_shard_bytes) {
    ShardPlan plan;
    plan.source.resize(1);
    size_t shard_bytes = 0;
    auto place = [&](SafetensorsSpec spec, size_t source) {
        if (shard_bytes > 0 && shard_bytes + spec.nbytes() > max_shard_bytes) {
            plan.shards.emplace_back();
            plan.source.emplace_back();
            shard_bytes = 0;
        }
        shard_bytes += spec.nbytes();
        plan.shards.back().push_back(std::move(spec));
        plan.source.back().push_back(source);
    };
    const auto& params = model.params.all();
    for (size_t i = 0; i < params.size(); ++i) {
        place({checkpoint_name(params[i].name, model.layout), params[i].stored_dtype,
               params[i].value.shape()},
              i);
    }
    for (size_t k = 0; k < model.untouched.size(); ++k) {
        const Tensor& t = model.untouched[k].second;
        place({model.untouched[k].first, t.dtype(), t.shape()}, ShardPlan::kUntouched + k);
    }
    return plan;
}

// A mapped tensor's bytes, a bounded piece at a time, its pages given back after each.
absl::Status write_mapped(const Tensor& view, const SafetensorsWrite& write) {
    constexpr size_t kPiece = 64ull << 20;
    const auto* p = static_cast<const unsigned char*>(view.raw_data());
    for (size_t at = 0; at < view.nbytes(); at += kPiece) {
        const size_t n = std::min(kPiece, view.nbytes() - at);
        DT_RETURN_IF_ERROR(write(p + at, n));
        release_mapped_pages(p + at, n);
    }
    return absl::OkStatus();
}

}  // namespace

absl::Status save_hf_model(const std::string& dir, const HfModel& model, const ParamBytes& values,
                           const SaveOptions& options) {
    const ShardPlan plan = plan_shards(model, options.max_shard_bytes);
    const SafetensorsWrite discard = [](const void*, size_t) { return absl::OkStatus(); };
    if (!options.write_files) {  // a partner rank: the same calls, nothing written
        for (size_t i = 0; i < model.params.all().size(); ++i)
            DT_RETURN_IF_ERROR(values(i, discard));
        return absl::OkStatus();
    }
    DT_RETURN_IF_ERROR(process_sandbox().make_dirs(dir));
    const std::map<std::string, std::string> meta = {{"format", "pt"}};
    const size_t count = plan.shards.size();
    auto file_name = [&](size_t i) {
        return count == 1 ? std::string("model.safetensors")
                          : absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, count);
    };
    for (size_t i = 0; i < count; ++i) {
        const std::vector<size_t>& source = plan.source[i];
        DT_RETURN_IF_ERROR(write_safetensors_streamed(
            (fs::path(dir) / file_name(i)).string(), plan.shards[i], meta,
            [&](size_t k, const SafetensorsWrite& write) {
                if (source[k] < ShardPlan::kUntouched) return values(source[k], write);
                return write_mapped(model.untouched[source[k] - ShardPlan::kUntouched].second,
                                    write);
            }));
    }
    if (count > 1) {
        nlohmann::json index;
        size_t total = 0;
        for (size_t i = 0; i < count; ++i) {
            for (const SafetensorsSpec& t : plan.shards[i]) {
                index["weight_map"][t.name] = file_name(i);
                total += t.nbytes();
            }
        }
        index["metadata"]["total_size"] = total;
        DT_RETURN_IF_ERROR(write_file_atomic(
            (fs::path(dir) / "model.safetensors.index.json").string(), index.dump(2) + "\n"));
    }
    return write_file_atomic((fs::path(dir) / "config.json").string(), model.config_json);
}

absl::Status save_hf_model(const std::string& dir, const HfModel& model, size_t max_shard_bytes) {
    if (!model.materialized) {
        return absl::FailedPreconditionError("save_hf_model: the weights were never read");
    }
    SaveOptions o;
    o.max_shard_bytes = max_shard_bytes;
    return save_hf_model(dir, model, param_bytes_of(model.params), o);
}

}  // namespace deltatune
