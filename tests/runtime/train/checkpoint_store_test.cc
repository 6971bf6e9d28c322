// Training checkpoint directories: atomic commit, listing, pruning, and corruption detection.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "runtime/base/file_util.h"
#include "runtime/train/checkpoint_store.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;

CheckpointInfo write_checkpoint(const std::string& root, int64_t step) {
    auto w = CheckpointWriter::begin(root, step);
    REQUIRE(w.ok());
    REQUIRE(
        write_file_atomic(w->file("state.json"), "{\"step\": " + std::to_string(step) + "}").ok());
    REQUIRE(write_file_atomic(w->file("master.safetensors"), std::string(1000, 'x')).ok());
    auto info = w->commit();
    REQUIRE(info.ok());
    return *info;
}

TEST_CASE("checkpoints commit atomically, list in order and prune", "[train]") {
    testing::TempDir tmp;
    const std::string root = tmp.file("ckpt");
    write_checkpoint(root, 10);
    write_checkpoint(root, 2);
    const auto info = write_checkpoint(root, 30);
    CHECK(info.manifest_sha256.size() == 64);
    // An interrupted write leaves a temporary directory: never listed, and cleaned up.
    auto stray = CheckpointWriter::begin(root, 40);
    REQUIRE(stray.ok());
    REQUIRE(write_file_atomic(stray->file("state.json"), "{}").ok());
    auto all = list_checkpoints(root);
    REQUIRE(all.ok());
    REQUIRE(all->size() == 3);
    CHECK((*all)[0].step == 2);
    CHECK((*all)[2].step == 30);
    int tmp_dirs = 0;
    for (const auto& e : fs::directory_iterator(root))
        tmp_dirs += e.path().filename().string()[0] == '.';
    CHECK(tmp_dirs == 0);
    for (const auto& c : *all) CHECK(verify_checkpoint(c.path).ok());
    CHECK(prune_checkpoints(root, 2).size() == 1);
    CHECK(list_checkpoints(root)->front().step == 10);
    // Early stopping's best checkpoint stays, whatever keep_last_n says.
    write_checkpoint(root, 50);
    CHECK(prune_checkpoints(root, 1, 10).size() == 1);  // 30 goes, 10 stays
    auto kept = list_checkpoints(root);
    REQUIRE(kept->size() == 2);
    CHECK((*kept)[0].step == 10);
    CHECK((*kept)[1].step == 50);
}

TEST_CASE("a flipped byte or a truncated file fails verification with the file named", "[train]") {
    testing::TempDir tmp;
    const auto info = write_checkpoint(tmp.file("ckpt"), 5);
    const std::string f = info.path + "/master.safetensors";
    std::string bytes = *read_file(f);
    bytes[500] ^= 1;
    REQUIRE(write_file_atomic(f, bytes).ok());
    auto s = verify_checkpoint(info.path);
    CHECK(s.code() == absl::StatusCode::kDataLoss);
    CHECK(std::string(s.message()) == f + ": SHA-256 mismatch (corrupt checkpoint file)");
    bytes.resize(10);
    REQUIRE(write_file_atomic(f, bytes).ok());
    CHECK(
        std::string(verify_checkpoint(info.path).message()).find("10 bytes, manifest says 1000") !=
        std::string::npos);
    fs::remove(f);
    CHECK(std::string(verify_checkpoint(info.path).message()).find("missing") != std::string::npos);
}

}  // namespace
}  // namespace deltatune
