#include "daemon/rank/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "tensorboard/event.pb.h"

namespace deltatune {

namespace {

std::array<uint32_t, 256> crc32c_table() {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected
        t[i] = c;
    }
    return t;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
    static const std::array<uint32_t, 256> table = crc32c_table();
    const auto* p = static_cast<const unsigned char*>(data);
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
    const uint32_t c = crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::open(const std::string& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return absl::UnavailableError(absl::StrCat("tensorboard: cannot create ", dir));
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    const std::string path = absl::StrCat(
        dir, "/events.out.tfevents.", std::chrono::duration_cast<std::chrono::seconds>(now).count(),
        ".", host, ".", getpid());
    std::FILE* f = std::fopen(path.c_str(), "ab");
    if (!f) return absl::UnavailableError(absl::StrCat("tensorboard: cannot open ", path));
    std::unique_ptr<TensorBoardWriter> w(new TensorBoardWriter(f, path));
    tensorboard::Event first;
    first.set_wall_time(std::chrono::duration<double>(now).count());
    first.set_file_version("brain.Event:2");
    absl::Status s = w->record(first.SerializeAsString());
    if (!s.ok()) return s;
    return w;
}

TensorBoardWriter::~TensorBoardWriter() {
    if (file_) std::fclose(file_);
}

absl::Status TensorBoardWriter::scalars(int64_t step, double wall_time,
                                        const std::map<std::string, double>& values) {
    tensorboard::Event e;
    e.set_wall_time(wall_time);
    e.set_step(step);
    for (const auto& [tag, value] : values) {
        tensorboard::Summary::Value* v = e.mutable_summary()->add_value();
        v->set_tag(tag);
        v->set_simple_value(static_cast<float>(value));
    }
    return record(e.SerializeAsString());
}

// uint64 length, masked CRC of those 8 bytes, the data, masked CRC of the data (little endian).
absl::Status TensorBoardWriter::record(const std::string& data) {
    const uint64_t len = data.size();
    unsigned char header[12];
    for (int i = 0; i < 8; ++i) header[i] = static_cast<unsigned char>(len >> (8 * i));
    const uint32_t len_crc = masked_crc32c(header, 8);
    for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<unsigned char>(len_crc >> (8 * i));
    const uint32_t data_crc = masked_crc32c(data.data(), data.size());
    unsigned char footer[4];
    for (int i = 0; i < 4; ++i) footer[i] = static_cast<unsigned char>(data_crc >> (8 * i));
    if (std::fwrite(header, 1, 12, file_) != 12 ||
        std::fwrite(data.data(), 1, data.size(), file_) != data.size() ||
        std::fwrite(footer, 1, 4, file_) != 4 || std::fflush(file_) != 0) {
        return absl::UnavailableError(absl::StrCat("tensorboard: cannot write ", path_));
    }
    return absl::OkStatus();
}

std::optional<TrainerEvent> TensorBoardLog::add(const TrainerEvent& e) {
    const bool step = e.type == "STEP_METRICS", eval = e.type == "EVAL_METRICS";
    const auto at = e.metrics.find("step");
    if ((!step && !eval) || at == e.metrics.end() || failed_) return std::nullopt;
    std::map<std::string, double> values;
    for (const auto& [key, value] : e.metrics) {
        // Not curves: the step is the x axis, a digest is an identity, an ETA a forecast.
        if (key == "step" || key == "trained_tokens" || key == "batch_digest" ||
            key == "eta_seconds") {
            continue;
        }
        values[(step ? "train/" : "eval/") + key] = value;
    }
    absl::Status s = absl::OkStatus();
    if (!writer_) {
        auto opened = TensorBoardWriter::open(dir_);
        if (opened.ok()) writer_ = std::move(*opened);
        s = opened.status();
    }
    if (s.ok()) {
        const double now =
            std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                .count();
        s = writer_->scalars(static_cast<int64_t>(at->second), now, values);
    }
    if (s.ok()) return std::nullopt;
    failed_ = true;
    return TrainerEvent{"TENSORBOARD_FAILED",
                        "WARNING",
                        absl::StrCat("TensorBoard summaries stop here: ", s.message()),
                        {},
                        {{"path", dir_}}};
}

}  // namespace deltatune
