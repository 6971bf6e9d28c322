// Atomic, checksummed training checkpoint directories.
#include "runtime/train/checkpoint_store.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"
#include "runtime/checkpoint/file_util.h"

namespace deltatune {

namespace fs = std::filesystem;

namespace {

constexpr char kManifest[] = "manifest.json";
constexpr char kTmpPrefix[] = ".tmp-";

}  // namespace

std::string step_dir_name(int64_t step) {
    return absl::StrFormat("step-%010d", step);
}

namespace {

bool parse_step_dir(const std::string& name, int64_t& step) {
    if (name.size() != 15 || name.rfind("step-", 0) != 0) return false;
    step = 0;
    for (size_t i = 5; i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9') return false;
        step = step * 10 + (name[i] - '0');
    }
    return true;
}

void fsync_dir(const std::string& dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

absl::Status fsync_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open for fsync"));
    const int rc = ::fsync(fd);
    ::close(fd);
    return rc == 0 ? absl::OkStatus() : absl::InternalError(absl::StrCat(path, ": fsync failed"));
}

}  // namespace

absl::StatusOr<std::string> sha256_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
    std::vector<char> buf(1 << 20);
    while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(in.gcount()));
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx, digest, &len);
    EVP_MD_CTX_free(ctx);
    std::string hex;
    for (unsigned int i = 0; i < len; ++i) hex += absl::StrFormat("%02x", digest[i]);
    return hex;
}

// Deletes a committed checkpoint without ever exposing a half-deleted one: it is first renamed
// (atomically) to a ".tmp-" name, which readers ignore and list_checkpoints garbage-collects, so
// a kill at any point leaves the folder either complete under its step name or gone from it.
std::error_code retire_dir(const fs::path& dir) {
    std::random_device rd;
    const fs::path trash = dir.parent_path() /
                           absl::StrCat(kTmpPrefix, "retired-", dir.filename().string(), "-", rd());
    std::error_code ec;
    fs::rename(dir, trash, ec);
    if (ec) return ec;
    fsync_dir(dir.parent_path().string());
    fs::remove_all(trash, ec);
    return ec;
}

absl::StatusOr<CheckpointWriter> CheckpointWriter::begin(const std::string& root, int64_t step) {
    std::error_code ec;
    fs::create_directories(root, ec);
    if (ec)
        return absl::PermissionDeniedError(absl::StrCat(root, ": cannot create: ", ec.message()));
    CheckpointWriter w;
    w.root_ = root;
    w.step_ = step;
    w.final_dir_ = (fs::path(root) / step_dir_name(step)).string();
    std::random_device rd;
    w.tmp_dir_ =
        (fs::path(root) / absl::StrCat(kTmpPrefix, step_dir_name(step), "-", rd())).string();
    fs::create_directories(w.tmp_dir_, ec);
    if (ec)
        return absl::PermissionDeniedError(
            absl::StrCat(w.tmp_dir_, ": cannot create: ", ec.message()));
    return w;
}

absl::StatusOr<CheckpointWriter> CheckpointWriter::begin_shared(const std::string& root,
                                                                int64_t step,
                                                                const std::string& shared,
                                                                bool owner) {
    CheckpointWriter w;
    w.root_ = root;
    w.step_ = step;
    w.final_dir_ = (fs::path(root) / step_dir_name(step)).string();
    w.tmp_dir_ =
        (fs::path(root) / absl::StrCat(kTmpPrefix, shared, "-", step_dir_name(step))).string();
    if (!owner) return w;
    std::error_code ec;
    fs::remove_all(w.tmp_dir_, ec);
    fs::create_directories(w.tmp_dir_, ec);
    if (ec)
        return absl::PermissionDeniedError(
            absl::StrCat(w.tmp_dir_, ": cannot create: ", ec.message()));
    return w;
}

std::string CheckpointWriter::file(const std::string& name) const {
    return (fs::path(tmp_dir_) / name).string();
}

absl::StatusOr<CheckpointInfo> CheckpointWriter::commit() {
    nlohmann::json manifest;
    manifest["step"] = step_;
    int64_t total = 0;
    for (const auto& e : fs::directory_iterator(tmp_dir_)) {
        const std::string name = e.path().filename().string();
        DT_RETURN_IF_ERROR(fsync_file(e.path().string()));
        DT_ASSIGN_OR_RETURN(std::string sha, sha256_file(e.path().string()));
        const auto bytes = static_cast<int64_t>(fs::file_size(e.path()));
        manifest["files"][name] = {{"bytes", bytes}, {"sha256", sha}};
        total += bytes;
    }
    const std::string manifest_text = manifest.dump(2) + "\n";
    DT_RETURN_IF_ERROR(write_file_atomic(file(kManifest), manifest_text));
    std::error_code ec;
    if (fs::exists(final_dir_)) ec = retire_dir(final_dir_);  // a re-run of the same step
    if (!ec) fs::rename(tmp_dir_, final_dir_, ec);
    if (ec)
        return absl::InternalError(
            absl::StrCat("rename ", tmp_dir_, " -> ", final_dir_, ": ", ec.message()));
    fsync_dir(root_);
    CheckpointInfo info{step_, final_dir_, total, ""};
    DT_ASSIGN_OR_RETURN(info.manifest_sha256,
                        sha256_file((fs::path(final_dir_) / kManifest).string()));
    return info;
}

void CheckpointWriter::abandon() {
    std::error_code ec;
    fs::remove_all(tmp_dir_, ec);
}

absl::StatusOr<std::vector<CheckpointInfo>> list_checkpoints(const std::string& root) {
    std::vector<CheckpointInfo> out;
    if (!fs::exists(root)) return out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root, ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind(kTmpPrefix, 0) == 0) {
            fs::remove_all(e.path(), ec);  // an interrupted write: never committed
            continue;
        }
        int64_t step = 0;
        if (!e.is_directory() || !parse_step_dir(name, step)) continue;
        const fs::path manifest = e.path() / kManifest;
        if (!fs::exists(manifest)) continue;
        CheckpointInfo info{step, e.path().string(), 0, ""};
        for (const auto& f : fs::directory_iterator(e.path(), ec)) {
            info.bytes += static_cast<int64_t>(f.is_regular_file() ? f.file_size() : 0);
        }
        out.push_back(std::move(info));
    }
    if (ec) return absl::InternalError(absl::StrCat(root, ": ", ec.message()));
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
    return out;
}

absl::Status verify_checkpoint(const std::string& dir) {
    const std::string manifest_path = (fs::path(dir) / kManifest).string();
    DT_ASSIGN_OR_RETURN(std::string text, read_file(manifest_path));
    nlohmann::json manifest;
    try {
        manifest = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        return absl::DataLossError(absl::StrCat(manifest_path, ": not valid JSON: ", e.what()));
    }
    if (!manifest.contains("files") || !manifest["files"].is_object()) {
        return absl::DataLossError(absl::StrCat(manifest_path, ": no files object"));
    }
    for (const auto& [name, entry] : manifest["files"].items()) {
        const std::string path = (fs::path(dir) / name).string();
        if (!fs::exists(path))
            return absl::DataLossError(absl::StrCat(path, ": listed in the manifest but missing"));
        const auto bytes = static_cast<int64_t>(fs::file_size(path));
        if (bytes != entry.value("bytes", int64_t{-1})) {
            return absl::DataLossError(absl::StrCat(path, ": ", bytes, " bytes, manifest says ",
                                                    entry.value("bytes", -1)));
        }
        DT_ASSIGN_OR_RETURN(std::string sha, sha256_file(path));
        if (sha != entry.value("sha256", std::string())) {
            return absl::DataLossError(
                absl::StrCat(path, ": SHA-256 mismatch (corrupt checkpoint file)"));
        }
    }
    return absl::OkStatus();
}

std::vector<std::string> prune_checkpoints(const std::string& root, int64_t keep_last_n) {
    std::vector<std::string> deleted;
    auto all = list_checkpoints(root);
    if (!all.ok() || keep_last_n <= 0) return deleted;
    const int64_t excess = static_cast<int64_t>(all->size()) - keep_last_n;
    for (int64_t i = 0; i < excess; ++i) {
        const std::error_code ec = retire_dir((*all)[static_cast<size_t>(i)].path);
        if (!ec) deleted.push_back((*all)[static_cast<size_t>(i)].path);
    }
    return deleted;
}

}  // namespace deltatune
