// Training checkpoint contents: per-rank safetensors shards, JSON for the rest.
#include "runtime/train/train_state.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/base/file_util.h"
#include "runtime/base/status_macros.h"

namespace deltatune {

std::string shard_file_name(int rank, int world) {
    return absl::StrCat("shard-", rank, "-of-", world, ".safetensors");
}

absl::StatusOr<CheckpointInfo> save_train_state(const std::string& root, const TrainState& state,
                                                const ShardedStateIo& io, Communicator& comm) {
    const bool owner = comm.rank() == 0;
    // Every rank learns whether any rank failed, so all abandon together and none waits forever.
    auto agree = [&](const absl::Status& mine) -> absl::Status {
        double failures = mine.ok() ? 0 : 1;
        DT_RETURN_IF_ERROR(comm.all_reduce_sum(&failures, 1));
        if (!mine.ok()) return mine;
        if (failures > 0) {
            return absl::AbortedError(absl::StrCat("checkpoint step ", state.step,
                                                   ": another rank failed to write its shard"));
        }
        return absl::OkStatus();
    };
    auto writer = CheckpointWriter::begin_shared(root, state.step, "ranks", owner);
    DT_RETURN_IF_ERROR(agree(writer.status()));  // the owner has created the folder
    absl::Status s = io.save_shard(writer->file(shard_file_name(comm.rank(), comm.world_size())));
    if (s.ok() && owner) {
        nlohmann::json j = {{"step", state.step},           {"tokens", state.tokens},
                            {"adam_step", io.adam_step},    {"data_cursor", state.data_cursor},
                            {"last_loss", state.last_loss}, {"world_size", comm.world_size()},
                            {"group_sizes", io.group_sizes}};
        const EarlyStoppingState& best = state.early_stopping;
        if (best.best_step > 0) {
            j["best_step"] = best.best_step;
            j["best_eval_loss"] = best.best_eval_loss;
            j["evals_since_best"] = best.evals_since_best;
        }
        s = write_file_atomic(writer->file("state.json"), j.dump(2) + "\n");
    }
    if (absl::Status all = agree(s); !all.ok()) {
        if (owner) writer->abandon();
        return all;
    }
    absl::StatusOr<CheckpointInfo> info = CheckpointInfo{state.step, "", 0, ""};
    if (owner) {
        info = writer->commit();
        if (!info.ok()) writer->abandon();
    }
    DT_RETURN_IF_ERROR(agree(info.status()));  // nobody goes on before the commit
    if (!owner) info->path = (std::filesystem::path(root) / step_dir_name(state.step)).string();
    return info;
}

absl::StatusOr<TrainState> load_train_state(const std::string& dir, const ShardedStateIo& io) {
    DT_RETURN_IF_ERROR(verify_checkpoint(dir));
    DT_ASSIGN_OR_RETURN(std::string text, read_file(dir + "/state.json"));
    TrainState state;
    int world = 0;
    int64_t adam_step = 0;
    std::vector<int64_t> groups;
    try {
        const auto j = nlohmann::json::parse(text);
        state.step = j.at("step").get<int64_t>();
        state.tokens = j.at("tokens").get<int64_t>();
        state.data_cursor = j.at("data_cursor").get<std::string>();
        state.last_loss = j.value("last_loss", 0.0);
        state.early_stopping.best_step = j.value("best_step", int64_t{0});
        state.early_stopping.best_eval_loss = j.value("best_eval_loss", 0.0);
        state.early_stopping.evals_since_best = j.value("evals_since_best", int64_t{0});
        adam_step = j.at("adam_step").get<int64_t>();
        world = j.at("world_size").get<int>();
        groups = j.at("group_sizes").get<std::vector<int64_t>>();
    } catch (const nlohmann::json::exception& e) {
        return absl::DataLossError(absl::StrCat(dir, "/state.json: ", e.what()));
    }
    if (groups != io.group_sizes) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": parameter groups ", nlohmann::json(groups).dump(),
                         " do not match this model's ", nlohmann::json(io.group_sizes).dump()));
    }
    if (world < 1) return absl::DataLossError(absl::StrCat(dir, "/state.json: world_size ", world));
    std::vector<std::string> files;
    for (int r = 0; r < world; ++r) files.push_back(dir + "/" + shard_file_name(r, world));
    DT_RETURN_IF_ERROR(io.load(files, adam_step));
    return state;
}

}  // namespace deltatune
