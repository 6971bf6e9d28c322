// Atomic, checksummed training checkpoint directories.
#include "runtime/train/checkpoint_store.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "runtime/base/file_util.h"
#include "runtime/base/path_sandbox.h"
#include "runtime/base/status_macros.h"

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

const PathSandbox& files() {
    return process_sandbox();
}

void fsync_dir(const std::string& dir) {
    absl::StatusOr<UniqueFd> fd = files().open_folder(dir, /*for_writing=*/false);
    if (fd.ok()) ::fsync(fd->get());
}

absl::Status fsync_file(const std::string& path) {
    DT_ASSIGN_OR_RETURN(UniqueFd fd, files().open(path, O_RDONLY));
    if (::fsync(fd.get()) != 0) return errno_status(path, "fsync failed", errno);
    return absl::OkStatus();
}

std::string join(const std::string& dir, const std::string& name) {
    return absl::StrCat(dir, "/", name);
}

std::string parent_of(const std::string& path) {
    return fs::path(path).parent_path().string();
}

}  // namespace

absl::StatusOr<std::string> sha256_file(const std::string& path) {
    DT_ASSIGN_OR_RETURN(UniqueFd fd, files().open(path, O_RDONLY));
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
    std::vector<char> buf(1 << 20);
    while (true) {
        const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            EVP_MD_CTX_free(ctx);
            return errno_status(path, "cannot read", errno);
        }
        if (n == 0) break;
        EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(n));
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
absl::Status retire_dir(const std::string& dir) {
    std::random_device rd;
    const std::string trash =
        join(parent_of(dir),
             absl::StrCat(kTmpPrefix, "retired-", fs::path(dir).filename().string(), "-", rd()));
    DT_RETURN_IF_ERROR(files().rename(dir, trash));
    return files().remove_tree(trash);
}

absl::StatusOr<CheckpointWriter> CheckpointWriter::begin(const std::string& root, int64_t step) {
    DT_RETURN_IF_ERROR(files().make_dirs(root));
    CheckpointWriter w;
    w.root_ = root;
    w.step_ = step;
    w.final_dir_ = join(root, step_dir_name(step));
    std::random_device rd;
    w.tmp_dir_ = join(root, absl::StrCat(kTmpPrefix, step_dir_name(step), "-", rd()));
    DT_RETURN_IF_ERROR(files().make_dirs(w.tmp_dir_));
    return w;
}

absl::StatusOr<CheckpointWriter> CheckpointWriter::begin_shared(const std::string& root,
                                                                int64_t step,
                                                                const std::string& shared,
                                                                bool owner) {
    CheckpointWriter w;
    w.root_ = root;
    w.step_ = step;
    w.final_dir_ = join(root, step_dir_name(step));
    w.tmp_dir_ = join(root, absl::StrCat(kTmpPrefix, shared, "-", step_dir_name(step)));
    if (!owner) return w;
    DT_RETURN_IF_ERROR(files().remove_tree(w.tmp_dir_));
    DT_RETURN_IF_ERROR(files().make_dirs(w.tmp_dir_));
    return w;
}

std::string CheckpointWriter::file(const std::string& name) const {
    return join(tmp_dir_, name);
}

absl::StatusOr<CheckpointInfo> CheckpointWriter::commit() {
    nlohmann::json manifest;
    manifest["step"] = step_;
    int64_t total = 0;
    DT_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, files().list(tmp_dir_));
    for (const DirEntry& e : entries) {
        if (e.type != EntryType::kFile) continue;
        DT_RETURN_IF_ERROR(fsync_file(file(e.name)));
        DT_ASSIGN_OR_RETURN(std::string sha, sha256_file(file(e.name)));
        manifest["files"][e.name] = {{"bytes", e.bytes}, {"sha256", sha}};
        total += e.bytes;
    }
    const std::string manifest_text = manifest.dump(2) + "\n";
    DT_RETURN_IF_ERROR(write_file_atomic(file(kManifest), manifest_text));
    if (files().exists(final_dir_)) {
        DT_RETURN_IF_ERROR(retire_dir(final_dir_));  // a re-run of the same step
    }
    DT_RETURN_IF_ERROR(files().rename(tmp_dir_, final_dir_));
    fsync_dir(root_);
    CheckpointInfo info{step_, final_dir_, total, ""};
    DT_ASSIGN_OR_RETURN(info.manifest_sha256, sha256_file(join(final_dir_, kManifest)));
    return info;
}

void CheckpointWriter::abandon() {
    (void)files().remove_tree(tmp_dir_);  // best effort: list_checkpoints collects leftovers
}

absl::StatusOr<std::vector<CheckpointInfo>> list_checkpoints(const std::string& root) {
    std::vector<CheckpointInfo> out;
    absl::StatusOr<std::vector<DirEntry>> entries = files().list(root);
    if (absl::IsNotFound(entries.status())) return out;
    if (!entries.ok()) return entries.status();
    for (const DirEntry& e : *entries) {
        const std::string path = join(root, e.name);
        if (e.name.rfind(kTmpPrefix, 0) == 0) {
            (void)files().remove_tree(path);  // an interrupted write: never committed
            continue;
        }
        int64_t step = 0;
        if (e.type != EntryType::kDirectory || !parse_step_dir(e.name, step)) continue;
        DT_ASSIGN_OR_RETURN(std::vector<DirEntry> inside, files().list(path));
        const bool committed = std::any_of(inside.begin(), inside.end(),
                                           [](const DirEntry& f) { return f.name == kManifest; });
        if (!committed) continue;
        CheckpointInfo info{step, path, 0, ""};
        for (const DirEntry& f : inside) info.bytes += f.type == EntryType::kFile ? f.bytes : 0;
        out.push_back(std::move(info));
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
    return out;
}

absl::Status verify_checkpoint(const std::string& dir) {
    const std::string manifest_path = join(dir, kManifest);
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
        const std::string path = join(dir, name);
        absl::StatusOr<DirEntry> st = files().stat(path);
        if (!st.ok())
            return absl::DataLossError(absl::StrCat(path, ": listed in the manifest but missing"));
        const int64_t bytes = st->bytes;
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

std::vector<std::string> prune_checkpoints(const std::string& root, int64_t keep_last_n,
                                           int64_t keep_step) {
    std::vector<std::string> deleted;
    auto all = list_checkpoints(root);
    if (!all.ok() || keep_last_n <= 0) return deleted;
    const int64_t excess = static_cast<int64_t>(all->size()) - keep_last_n;
    for (int64_t i = 0; i < excess; ++i) {
        const CheckpointInfo& c = (*all)[static_cast<size_t>(i)];
        if (c.step == keep_step) continue;
        if (retire_dir(c.path).ok()) deleted.push_back(c.path);
    }
    return deleted;
}

}  // namespace deltatune
