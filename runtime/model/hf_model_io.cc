// Loading and saving Hugging Face Qwen3.5 checkpoints (single file or sharded with an index).
#include "runtime/model/hf_model_io.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

absl::StatusOr<HfModel> load_hf_model(const std::string& dir) {
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
    m.params = make_qwen35_params(m.config, m.tied);
    std::set<std::string> used;
    for (auto& p : m.params.all()) {
        const std::string name = checkpoint_name(p.name, m.layout);
        auto it = ck.where.find(name);
        if (it == ck.where.end()) {
            return absl::NotFoundError(absl::StrCat(dir, ": missing tensor '", name,
                                                    "' (expected shape ", p.value.shape_string(),
                                                    ")"));
        }
        DT_ASSIGN_OR_RETURN(Tensor t, it->second->get(name));
        if (t.shape() != p.value.shape()) {
            return absl::InvalidArgumentError(
                absl::StrCat(it->second->path(), ": tensor '", name, "' has shape ",
                             t.shape_string(), ", config.json implies ", p.value.shape_string()));
        }
        if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16 && t.dtype() != DType::kF16) {
            return absl::InvalidArgumentError(absl::StrCat(it->second->path(), ": tensor '", name,
                                                           "' has dtype ", dtype_name(t.dtype()),
                                                           ", expected a float type"));
        }
        DT_ASSIGN_OR_RETURN(Tensor f32, t.to_cpu_f32());
        std::memcpy(p.value.raw_data(), f32.raw_data(), f32.nbytes());
        p.stored_dtype = t.dtype();
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
    return m;
}

absl::Status save_hf_model(const std::string& dir, const HfModel& model, size_t max_shard_bytes) {
    DT_RETURN_IF_ERROR(process_sandbox().make_dirs(dir));
    // Group tensors into shards in parameter order, then the untouched ones.
    std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
    size_t shard_bytes = 0;
    auto place = [&](std::string name, Tensor t) {
        if (shard_bytes > 0 && shard_bytes + t.nbytes() > max_shard_bytes) {
            shards.emplace_back();
            shard_bytes = 0;
        }
        shard_bytes += t.nbytes();
        shards.back().emplace_back(std::move(name), std::move(t));
    };
    for (const auto& p : model.params.all()) {
        DT_ASSIGN_OR_RETURN(Tensor stored, p.value.to_dtype(p.stored_dtype));
        place(checkpoint_name(p.name, model.layout), std::move(stored));
    }
    for (const auto& [name, t] : model.untouched) place(name, t);
    const std::map<std::string, std::string> meta = {{"format", "pt"}};
    if (shards.size() == 1) {
        DT_RETURN_IF_ERROR(
            write_safetensors((fs::path(dir) / "model.safetensors").string(), shards[0], meta));
    } else {
        nlohmann::json index;
        size_t total = 0;
        for (size_t i = 0; i < shards.size(); ++i) {
            const std::string file =
                absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
            for (const auto& [name, t] : shards[i]) {
                index["weight_map"][name] = file;
                total += t.nbytes();
            }
            DT_RETURN_IF_ERROR(write_safetensors((fs::path(dir) / file).string(), shards[i], meta));
        }
        index["metadata"]["total_size"] = total;
        DT_RETURN_IF_ERROR(write_file_atomic(
            (fs::path(dir) / "model.safetensors.index.json").string(), index.dump(2) + "\n"));
    }
    return write_file_atomic((fs::path(dir) / "config.json").string(), model.config_json);
}

}  // namespace deltatune
