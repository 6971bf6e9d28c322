// Training checkpoint contents: safetensors for weights and moments, JSON for the rest.
#include "runtime/train/train_state.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"
#include "runtime/checkpoint/file_util.h"
#include "runtime/checkpoint/safetensors.h"

namespace deltatune {

namespace {

std::vector<std::pair<std::string, Tensor>> named(const ParamSet& set) {
    std::vector<std::pair<std::string, Tensor>> out;
    for (const auto& p : set.all()) out.emplace_back(p.name, p.value);
    return out;
}

absl::Status read_into(const std::string& path, ParamSet& set) {
    DT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
    for (auto& p : set.all()) {
        auto t = f.get(p.name);
        if (!t.ok()) return t.status();
        if (t->shape() != p.value.shape() || t->dtype() != DType::kF32) {
            return absl::InvalidArgumentError(absl::StrCat(
                path, ": tensor '", p.name, "' is ", t->shape_string(), " ", dtype_name(t->dtype()),
                ", the model needs F32 ", p.value.shape_string()));
        }
        std::memcpy(p.value.raw_data(), t->raw_data(), t->nbytes());
    }
    return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CheckpointInfo> save_train_state(const std::string& root, const TrainState& state,
                                                const ParamSet& params, const AdamWState& adam) {
    DT_ASSIGN_OR_RETURN(CheckpointWriter w, CheckpointWriter::begin(root, state.step));
    absl::Status s = write_safetensors(w.file("master.safetensors"), named(params));
    if (s.ok()) s = write_safetensors(w.file("adam_m.safetensors"), named(adam.m));
    if (s.ok()) s = write_safetensors(w.file("adam_v.safetensors"), named(adam.v));
    if (s.ok()) {
        const nlohmann::json j = {
            {"step", state.step},           {"tokens", state.tokens},
            {"adam_step", adam.step},       {"data_cursor", state.data_cursor},
            {"last_loss", state.last_loss}, {"world_size", 1}};
        s = write_file_atomic(w.file("state.json"), j.dump(2) + "\n");
    }
    if (!s.ok()) {
        w.abandon();
        return s;
    }
    auto info = w.commit();
    if (!info.ok()) w.abandon();
    return info;
}

absl::StatusOr<TrainState> load_train_state(const std::string& dir, ParamSet& params,
                                            AdamWState& adam) {
    DT_RETURN_IF_ERROR(verify_checkpoint(dir));
    DT_RETURN_IF_ERROR(read_into(dir + "/master.safetensors", params));
    DT_RETURN_IF_ERROR(read_into(dir + "/adam_m.safetensors", adam.m));
    DT_RETURN_IF_ERROR(read_into(dir + "/adam_v.safetensors", adam.v));
    DT_ASSIGN_OR_RETURN(std::string text, read_file(dir + "/state.json"));
    TrainState state;
    try {
        const auto j = nlohmann::json::parse(text);
        state.step = j.at("step").get<int64_t>();
        state.tokens = j.at("tokens").get<int64_t>();
        state.data_cursor = j.at("data_cursor").get<std::string>();
        state.last_loss = j.value("last_loss", 0.0);
        adam.step = j.at("adam_step").get<int64_t>();
    } catch (const nlohmann::json::exception& e) {
        return absl::DataLossError(absl::StrCat(dir, "/state.json: ", e.what()));
    }
    return state;
}

}  // namespace deltatune
