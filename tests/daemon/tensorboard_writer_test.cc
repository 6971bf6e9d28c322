// The TensorBoard event file writer: CRC32C against its published check value, the record
// framing read back by hand, and a metrics event turned into train/* scalars. (The e2e lifecycle
// test reads a job's file with TensorBoard's own reader.)
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "daemon/rank/tensorboard_writer.h"
#include "tensorboard/event.pb.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

TEST_CASE("crc32c is Castagnoli's", "[daemon][tensorboard]") {
    CHECK(crc32c("123456789", 9) == 0xE3069283u);  // the standard check value
    CHECK(crc32c("", 0) == 0u);
}

// Every record of a file: length, masked CRCs checked, the Event parsed.
std::vector<tensorboard::Event> read_records(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<tensorboard::Event> out;
    size_t at = 0;
    while (at < bytes.size()) {
        REQUIRE(at + 12 <= bytes.size());
        uint64_t len = 0;
        uint32_t len_crc = 0, data_crc = 0;
        std::memcpy(&len, bytes.data() + at, 8);
        std::memcpy(&len_crc, bytes.data() + at + 8, 4);
        CHECK(len_crc == masked_crc32c(bytes.data() + at, 8));
        REQUIRE(at + 12 + len + 4 <= bytes.size());
        std::memcpy(&data_crc, bytes.data() + at + 12 + len, 4);
        CHECK(data_crc == masked_crc32c(bytes.data() + at + 12, len));
        tensorboard::Event e;
        REQUIRE(e.ParseFromArray(bytes.data() + at + 12, static_cast<int>(len)));
        out.push_back(e);
        at += 12 + len + 4;
    }
    return out;
}

TEST_CASE("a job's metrics events become TensorBoard scalars", "[daemon][tensorboard]") {
    testing::TempDir tmp;
    TensorBoardLog log(tmp.file("tb"));
    // A digest and an ETA are no curves: left out.
    CHECK(!log.add(
        {"STEP_METRICS",
         "INFO",
         "",
         {{"step", 1}, {"loss", 2.5}, {"lr", 1e-3}, {"batch_digest", 1.4e14}, {"eta_seconds", 600}},
         {}}));
    CHECK(!log.add({"CHECKPOINT_COMMITTED", "INFO", "", {{"step", 1}}, {}}));  // not a scalar
    CHECK(!log.add({"EVAL_METRICS", "INFO", "", {{"step", 2}, {"eval_loss", 2.25}}, {}}));
    std::vector<std::string> files;
    for (const auto& f : std::filesystem::directory_iterator(tmp.file("tb"))) {
        files.push_back(f.path().string());
    }
    REQUIRE(files.size() == 1);
    CHECK(files[0].find("events.out.tfevents.") != std::string::npos);
    const auto events = read_records(files[0]);
    REQUIRE(events.size() == 3);
    CHECK(events[0].file_version() == "brain.Event:2");
    CHECK(events[1].step() == 1);
    REQUIRE(events[1].summary().value_size() == 2);  // train/loss, train/lr (sorted)
    CHECK(events[1].summary().value(0).tag() == "train/loss");
    CHECK(events[1].summary().value(0).simple_value() == 2.5f);
    CHECK(events[2].step() == 2);
    CHECK(events[2].summary().value(0).tag() == "eval/eval_loss");
}

TEST_CASE("an unwritable TensorBoard folder is one warning, not a failed job",
          "[daemon][tensorboard]") {
    testing::TempDir tmp;
    std::ofstream(tmp.file("file")) << "x";  // a file where the folder should be
    TensorBoardLog log(tmp.file("file") + "/tb");
    auto warning = log.add({"STEP_METRICS", "INFO", "", {{"step", 1}, {"loss", 2.5}}, {}});
    REQUIRE(warning);
    CHECK(warning->type == "TENSORBOARD_FAILED");
    CHECK(warning->level == "WARNING");
    CHECK(!log.add({"STEP_METRICS", "INFO", "", {{"step", 2}, {"loss", 2.4}}, {}}));  // once
}

}  // namespace
}  // namespace deltatune
