// Opening files beneath root folders, checked by the kernel at the time of use.
//
// The daemon validates a job's paths when the job is submitted, but a path checked then and
// opened later by name can be swapped in between (a data file replaced by a symlink to
// /etc/shadow, an output folder created as a symlink). A PathSandbox holds a descriptor for each
// root and opens every path relative to its root with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_MAGICLINKS): symlinks are followed only while they stay beneath the root, and a
// path that leaves it fails with PermissionDenied "PATH_NOT_ALLOWED: ...". Folders are created,
// renamed and removed through descriptors of their (confined) parents, never by a full path.
//
// Every file helper of the runtime goes through process_sandbox(), which is unconfined (paths
// opened as given) until a process installs one: the daemon's ranks do, before they train, with
// the daemon's model, data and output roots.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace deltatune {

// An owned file descriptor, closed on destruction.
class UniqueFd {
  public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : fd_(fd) {}
    UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
    UniqueFd& operator=(UniqueFd&& o) noexcept;
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    ~UniqueFd();
    int get() const { return fd_; }
    int release() {
        const int fd = fd_;
        fd_ = -1;
        return fd;
    }

  private:
    int fd_ = -1;
};

struct SandboxRoots {
    std::vector<std::string> read;   // readable beneath (models, data)
    std::vector<std::string> write;  // readable and writable beneath (outputs)
};

enum class EntryType { kFile, kDirectory, kSymlink, kOther };

struct DirEntry {
    std::string name;
    EntryType type = EntryType::kOther;  // of the entry itself (symlinks are not followed)
    int64_t bytes = 0;
};

// Errors carry the path and the system's reason; ENOENT is NotFound, ENOSPC and EDQUOT are
// ResourceExhausted "DISK_FULL: ...", a path leading outside its root PermissionDenied
// "PATH_NOT_ALLOWED: ...".
absl::Status errno_status(const std::string& path, const char* what, int err);

class PathSandbox {
  public:
    // Paths are opened as given (relative ones against the working folder).
    static PathSandbox unconfined();
    // Opens each root (it must exist and be a folder). Paths must then be absolute, free of "."
    // and ".." components, and beneath a root; the longest matching root is used.
    static absl::StatusOr<PathSandbox> confined(const SandboxRoots& roots);

    bool is_confined() const { return roots_ != nullptr; }

    // open(2) flags; anything that can modify (O_WRONLY, O_RDWR, O_CREAT, O_TRUNC) needs a
    // writable root. Unless flags hold O_PATH or O_DIRECTORY, only a regular file opens: the
    // open never blocks (O_NONBLOCK, cleared after) and a FIFO, socket or device found there is
    // FailedPrecondition "NOT_A_REGULAR_FILE: ...", so no file planted at a path can stall the
    // caller.
    absl::StatusOr<UniqueFd> open(const std::string& path, int flags, mode_t mode = 0644) const;
    // A folder to create, rename or remove entries in (through *at calls); for_writing needs a
    // writable root.
    absl::StatusOr<UniqueFd> open_folder(const std::string& path, bool for_writing) const;
    // NotFound when missing; symlinks within the root are followed.
    absl::StatusOr<DirEntry> stat(const std::string& path) const;
    bool exists(const std::string& path) const { return stat(path).ok(); }
    absl::Status make_dirs(const std::string& path) const;
    absl::Status rename(const std::string& from, const std::string& to) const;
    // Removes a file or a folder tree (symlinks inside are removed, not followed); a missing
    // path is fine.
    absl::Status remove_tree(const std::string& path) const;
    // Writes the chunks to `path` through a temporary file in the same folder (fsynced, renamed
    // into place, the folder fsynced), all through the folder's descriptor: readers see the old
    // file or the new one, never half, and no swapped symlink redirects either step.
    absl::Status write_atomic(const std::string& path,
                              const std::vector<std::pair<const void*, size_t>>& chunks) const;
    // The same, with the contents produced piece by piece: `produce` calls `write` as often as
    // it likes (files larger than memory). An error from either leaves no file behind.
    using WriteFn = std::function<absl::Status(const void* data, size_t size)>;
    absl::Status write_atomic_streamed(
        const std::string& path, const std::function<absl::Status(const WriteFn&)>& produce) const;
    // The entries of a folder, sorted by name.
    absl::StatusOr<std::vector<DirEntry>> list(const std::string& path) const;

  private:
    struct Root {
        std::string path;
        UniqueFd fd;
        bool writable = false;
    };
    struct Located {
        int dirfd = -1;
        std::string rel;  // relative to dirfd ("." for the root itself)
        uint64_t resolve = 0;
    };
    absl::StatusOr<Located> locate(const std::string& path, bool write) const;
    absl::StatusOr<UniqueFd> open_checked(const std::string& path, int flags, mode_t mode,
                                          bool write) const;
    absl::StatusOr<UniqueFd> open_parent(const std::string& path, std::string* name) const;

    std::shared_ptr<const std::vector<Root>> roots_;  // null: unconfined
};

// The sandbox every runtime file helper uses; unconfined until install_process_sandbox.
const PathSandbox& process_sandbox();
// Installs `sandbox` for the rest of the process (once, before other threads open files).
absl::Status install_process_sandbox(PathSandbox sandbox);

// Whole-file helpers on a descriptor.
absl::StatusOr<std::string> read_fd(int fd, const std::string& path_for_errors);
absl::Status write_fd(int fd, const void* data, size_t size, const std::string& path_for_errors);

}  // namespace deltatune
