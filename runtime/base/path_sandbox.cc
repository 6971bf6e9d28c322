// PathSandbox: openat2(RESOLVE_BENEATH) relative to root descriptors; folder operations through
// the descriptors of confined parents.
#include "runtime/base/path_sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/base/status_macros.h"

namespace deltatune {

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = o.release();
    }
    return *this;
}

UniqueFd::~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
}

absl::Status errno_status(const std::string& path, const char* what, int err) {
    const std::string msg = absl::StrCat(path, ": ", what, ": ", std::strerror(err));
    switch (err) {
        case ENOENT:
            return absl::NotFoundError(msg);
        case ENOSPC:
        case EDQUOT:
            return absl::ResourceExhaustedError(absl::StrCat("DISK_FULL: ", msg));
        case EXDEV:
        case ELOOP:
            return absl::PermissionDeniedError(
                absl::StrCat("PATH_NOT_ALLOWED: ", path, ": ", what,
                             ": leads outside its root (a symlink or '..')"));
        case EACCES:
        case EPERM:
            return absl::PermissionDeniedError(msg);
        default:
            return absl::InternalError(msg);
    }
}

namespace {

constexpr int kWriteFlags = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC;

bool beneath_or_at(const std::string& path, const std::string& root) {
    if (path.compare(0, root.size(), root) != 0) return false;
    return path.size() == root.size() || root == "/" || path[root.size()] == '/';
}

// Absolute, no empty, "." or ".." component: what the daemon hands a rank after resolving.
bool is_clean_absolute(const std::string& path) {
    if (path.empty() || path[0] != '/') return false;
    for (absl::string_view c : absl::StrSplit(path.substr(1), '/')) {
        if (c == "." || c == ".." || (c.empty() && path != "/")) return false;
    }
    return true;
}

int openat2_fd(int dirfd, const std::string& rel, int flags, mode_t mode, uint64_t resolve) {
    if (resolve == 0) return ::openat(dirfd, rel.c_str(), flags, mode);
    open_how how{};
    how.flags = static_cast<uint64_t>(flags);
    const bool creates = (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE;
    how.mode = creates ? mode : 0;  // openat2 refuses a mode otherwise
    how.resolve = resolve;
    int fd;
    do {
        fd = static_cast<int>(::syscall(SYS_openat2, dirfd, rel.c_str(), &how, sizeof(how)));
    } while (fd < 0 && errno == EAGAIN);
    return fd;
}

const char* type_name(mode_t m) {
    if (S_ISDIR(m)) return "folder";
    if (S_ISFIFO(m)) return "FIFO";
    if (S_ISSOCK(m)) return "socket";
    if (S_ISCHR(m) || S_ISBLK(m)) return "device";
    return "special file";
}

absl::Status not_a_file(const std::string& path, mode_t m) {
    return absl::FailedPreconditionError(
        absl::StrCat("NOT_A_REGULAR_FILE: '", path, "' is a ", type_name(m), ", not a file"));
}

EntryType type_of(mode_t m) {
    if (S_ISREG(m)) return EntryType::kFile;
    if (S_ISDIR(m)) return EntryType::kDirectory;
    if (S_ISLNK(m)) return EntryType::kSymlink;
    return EntryType::kOther;
}

// The entries of the open folder `dirfd` in directory order; symlinks are not followed.
absl::StatusOr<std::vector<DirEntry>> read_entries(int dirfd, const std::string& where) {
    DIR* dir = ::fdopendir(::dup(dirfd));
    if (dir == nullptr) return errno_status(where, "cannot list", errno);
    std::vector<DirEntry> out;
    while (dirent* e = ::readdir(dir)) {
        const std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        struct stat st {};
        if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        out.push_back({name, type_of(st.st_mode), static_cast<int64_t>(st.st_size)});
    }
    ::closedir(dir);
    return out;
}

// Removes everything inside the open folder `dirfd`, never following a symlink.
absl::Status remove_contents(int dirfd, const std::string& where) {
    absl::StatusOr<std::vector<DirEntry>> entries = read_entries(dirfd, where);
    if (!entries.ok()) return entries.status();
    for (const DirEntry& e : *entries) {
        const std::string path = absl::StrCat(where, "/", e.name);
        const bool is_dir = e.type == EntryType::kDirectory;
        if (is_dir) {
            UniqueFd sub(
                ::openat(dirfd, e.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
            if (sub.get() < 0) return errno_status(path, "cannot open", errno);
            if (absl::Status s = remove_contents(sub.get(), path); !s.ok()) return s;
        }
        if (::unlinkat(dirfd, e.name.c_str(), is_dir ? AT_REMOVEDIR : 0) != 0 && errno != ENOENT) {
            return errno_status(path, "cannot remove", errno);
        }
    }
    return absl::OkStatus();
}

std::atomic<const PathSandbox*> g_process_sandbox{nullptr};

}  // namespace

PathSandbox PathSandbox::unconfined() {
    return PathSandbox();
}

absl::StatusOr<PathSandbox> PathSandbox::confined(const SandboxRoots& roots) {
    auto list = std::make_shared<std::vector<Root>>();
    auto add = [&](const std::string& path, bool writable) -> absl::Status {
        if (!is_clean_absolute(path)) {
            return absl::InvalidArgumentError(
                absl::StrCat("sandbox root '", path, "' must be an absolute, clean path"));
        }
        UniqueFd fd(::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (fd.get() < 0) return errno_status(path, "cannot open the sandbox root", errno);
        list->push_back({path, std::move(fd), writable});
        return absl::OkStatus();
    };
    for (const std::string& r : roots.write) {
        if (absl::Status s = add(r, true); !s.ok()) return s;
    }
    for (const std::string& r : roots.read) {
        if (absl::Status s = add(r, false); !s.ok()) return s;
    }
    // Longest first, so a path is resolved against the innermost root holding it; among equal
    // roots the writable one (listed first) wins.
    std::stable_sort(list->begin(), list->end(),
                     [](const Root& a, const Root& b) { return a.path.size() > b.path.size(); });
    PathSandbox s;
    s.roots_ = std::move(list);
    return s;
}

absl::StatusOr<PathSandbox::Located> PathSandbox::locate(const std::string& path,
                                                         bool write) const {
    if (!roots_) return Located{AT_FDCWD, path, 0};
    if (!is_clean_absolute(path)) {
        return absl::PermissionDeniedError(absl::StrCat(
            "PATH_NOT_ALLOWED: '", path, "' is not an absolute path free of '.' and '..'"));
    }
    for (const Root& r : *roots_) {
        if (!beneath_or_at(path, r.path)) continue;
        if (write && !r.writable) {
            return absl::PermissionDeniedError(absl::StrCat(
                "PATH_NOT_ALLOWED: '", path, "' is beneath the read-only root '", r.path, "'"));
        }
        std::string rel = path.size() == r.path.size() ? "."
                          : r.path == "/"              ? path.substr(1)
                                                       : path.substr(r.path.size() + 1);
        return Located{r.fd.get(), std::move(rel), RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    }
    return absl::PermissionDeniedError(
        absl::StrCat("PATH_NOT_ALLOWED: '", path, "' is not beneath any of this job's roots"));
}

absl::StatusOr<UniqueFd> PathSandbox::open(const std::string& path, int flags, mode_t mode) const {
    const bool plain = (flags & (O_PATH | O_DIRECTORY)) == 0;
    absl::StatusOr<UniqueFd> fd =
        open_checked(path, plain ? flags | O_NONBLOCK : flags, mode, (flags & kWriteFlags) != 0);
    if (!plain) return fd;
    if (!fd.ok()) {  // a FIFO without a reader refuses O_WRONLY | O_NONBLOCK (ENXIO): say why
        absl::StatusOr<UniqueFd> there = open_checked(path, O_PATH, 0, false);
        struct stat st {};
        if (!there.ok() || ::fstat(there->get(), &st) != 0 || S_ISREG(st.st_mode)) return fd;
        return not_a_file(path, st.st_mode);
    }
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0) return errno_status(path, "cannot stat", errno);
    if (!S_ISREG(st.st_mode)) {
        return not_a_file(path, st.st_mode);
    }
    if ((flags & O_NONBLOCK) == 0)
        ::fcntl(fd->get(), F_SETFL, ::fcntl(fd->get(), F_GETFL) & ~O_NONBLOCK);
    return fd;
}

absl::StatusOr<UniqueFd> PathSandbox::open_folder(const std::string& path, bool for_writing) const {
    return open_checked(path, O_RDONLY | O_DIRECTORY, 0, for_writing);
}

absl::StatusOr<UniqueFd> PathSandbox::open_checked(const std::string& path, int flags, mode_t mode,
                                                   bool write) const {
    absl::StatusOr<Located> at = locate(path, write);
    if (!at.ok()) return at.status();
    const int fd = openat2_fd(at->dirfd, at->rel, flags | O_CLOEXEC, mode, at->resolve);
    if (fd < 0) {
        if (errno == ENOSYS) {
            return absl::FailedPreconditionError(
                absl::StrCat(path,
                             ": the kernel refuses openat2 (Linux 5.6 or later, not blocked "
                             "by seccomp, is needed to confine a job's paths)"));
        }
        return errno_status(path, write ? "cannot open for writing" : "cannot open", errno);
    }
    return UniqueFd(fd);
}

absl::StatusOr<DirEntry> PathSandbox::stat(const std::string& path) const {
    absl::StatusOr<UniqueFd> fd = open(path, O_PATH);
    if (!fd.ok()) return fd.status();
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0) return errno_status(path, "cannot stat", errno);
    const size_t slash = path.rfind('/');
    return DirEntry{slash == std::string::npos ? path : path.substr(slash + 1), type_of(st.st_mode),
                    static_cast<int64_t>(st.st_size)};
}

// The folder holding `path` (opened writable-checked) and the last component in `name`.
absl::StatusOr<UniqueFd> PathSandbox::open_parent(const std::string& path,
                                                  std::string* name) const {
    const size_t slash = path.rfind('/');
    *name = slash == std::string::npos ? path : path.substr(slash + 1);
    if (name->empty() || *name == "." || *name == "..") {
        return absl::InvalidArgumentError(absl::StrCat(path, ": no file or folder name"));
    }
    const std::string parent = slash == std::string::npos ? "."
                               : slash == 0               ? "/"
                                                          : path.substr(0, slash);
    if (roots_) {  // a root itself is never created, renamed or removed
        absl::StatusOr<Located> at = locate(path, true);
        if (!at.ok()) return at.status();
        if (at->rel == ".") {
            return absl::PermissionDeniedError(
                absl::StrCat("PATH_NOT_ALLOWED: '", path, "' is a root itself"));
        }
    }
    return open_folder(parent, /*for_writing=*/true);
}

absl::Status PathSandbox::make_dirs(const std::string& path) const {
    absl::StatusOr<DirEntry> st = stat(path);
    if (st.ok()) {
        if (st->type == EntryType::kDirectory) return absl::OkStatus();
        return absl::FailedPreconditionError(absl::StrCat(path, ": exists and is not a folder"));
    }
    if (!absl::IsNotFound(st.status())) return st.status();
    const size_t slash = path.rfind('/');
    if (slash != std::string::npos && slash > 0) {
        if (absl::Status s = make_dirs(path.substr(0, slash)); !s.ok()) return s;
    }
    std::string name;
    absl::StatusOr<UniqueFd> parent = open_parent(path, &name);
    if (!parent.ok()) return parent.status();
    if (::mkdirat(parent->get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
        return errno_status(path, "cannot create the folder", errno);
    }
    return absl::OkStatus();
}

absl::Status PathSandbox::rename(const std::string& from, const std::string& to) const {
    std::string from_name, to_name;
    absl::StatusOr<UniqueFd> from_dir = open_parent(from, &from_name);
    if (!from_dir.ok()) return from_dir.status();
    absl::StatusOr<UniqueFd> to_dir = open_parent(to, &to_name);
    if (!to_dir.ok()) return to_dir.status();
    if (::renameat(from_dir->get(), from_name.c_str(), to_dir->get(), to_name.c_str()) != 0) {
        return errno_status(absl::StrCat(from, " -> ", to), "cannot rename", errno);
    }
    ::fsync(to_dir->get());
    return absl::OkStatus();
}

absl::Status PathSandbox::remove_tree(const std::string& path) const {
    std::string name;
    absl::StatusOr<UniqueFd> parent = open_parent(path, &name);
    if (!parent.ok()) return absl::IsNotFound(parent.status()) ? absl::OkStatus() : parent.status();
    struct stat st {};
    if (::fstatat(parent->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return errno == ENOENT ? absl::OkStatus() : errno_status(path, "cannot stat", errno);
    }
    if (S_ISDIR(st.st_mode)) {
        UniqueFd dir(
            ::openat(parent->get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (dir.get() < 0) return errno_status(path, "cannot open", errno);
        if (absl::Status s = remove_contents(dir.get(), path); !s.ok()) return s;
    }
    if (::unlinkat(parent->get(), name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0 &&
        errno != ENOENT) {
        return errno_status(path, "cannot remove", errno);
    }
    return absl::OkStatus();
}

absl::StatusOr<std::vector<DirEntry>> PathSandbox::list(const std::string& path) const {
    absl::StatusOr<UniqueFd> fd = open(path, O_RDONLY | O_DIRECTORY);
    if (!fd.ok()) return fd.status();
    absl::StatusOr<std::vector<DirEntry>> out = read_entries(fd->get(), path);
    if (!out.ok()) return out.status();
    std::sort(out->begin(), out->end(),
              [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    return out;
}

// The temporary file is created and renamed through the descriptor of the (confined) folder, so
// neither step can be redirected by a symlink swapped in after the folder was opened.
absl::Status PathSandbox::write_atomic(
    const std::string& path, const std::vector<std::pair<const void*, size_t>>& chunks) const {
    return write_atomic_streamed(path, [&](const WriteFn& write) {
        for (const auto& [data, size] : chunks) DT_RETURN_IF_ERROR(write(data, size));
        return absl::OkStatus();
    });
}

absl::Status PathSandbox::write_atomic_streamed(
    const std::string& path, const std::function<absl::Status(const WriteFn&)>& produce) const {
    std::string name;
    absl::StatusOr<UniqueFd> dir = open_parent(path, &name);
    if (!dir.ok()) return dir.status();
    const std::string tmp_name = absl::StrCat(".", name, ".tmp.", getpid());
    const std::string tmp = absl::StrCat(path.substr(0, path.size() - name.size()), tmp_name);
    UniqueFd fd(::openat(dir->get(), tmp_name.c_str(),
                         O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (fd.get() < 0) return errno_status(tmp, "cannot create", errno);
    absl::Status s =
        produce([&](const void* data, size_t size) { return write_fd(fd.get(), data, size, tmp); });
    if (s.ok() && ::fsync(fd.get()) != 0) s = errno_status(tmp, "fsync failed", errno);
    if (s.ok() && ::close(fd.release()) != 0) s = errno_status(tmp, "close failed", errno);
    if (s.ok() && ::renameat(dir->get(), tmp_name.c_str(), dir->get(), name.c_str()) != 0) {
        s = errno_status(absl::StrCat(tmp, " -> ", path), "rename failed", errno);
    }
    if (!s.ok()) {
        ::unlinkat(dir->get(), tmp_name.c_str(), 0);
        return s;
    }
    ::fsync(dir->get());
    return absl::OkStatus();
}

const PathSandbox& process_sandbox() {
    static const PathSandbox unconfined = PathSandbox::unconfined();
    const PathSandbox* s = g_process_sandbox.load(std::memory_order_acquire);
    return s ? *s : unconfined;
}

absl::Status install_process_sandbox(PathSandbox sandbox) {
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    if (g_process_sandbox.load() != nullptr) {
        return absl::FailedPreconditionError("a process sandbox is already installed");
    }
    // Deliberately never freed: helpers on any thread may hold a reference until exit.
    g_process_sandbox.store(new PathSandbox(std::move(sandbox)), std::memory_order_release);
    return absl::OkStatus();
}

absl::StatusOr<std::string> read_fd(int fd, const std::string& path_for_errors) {
    std::string out;
    char buf[1 << 16];
    while (true) {
        const ssize_t n = ::read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno_status(path_for_errors, "cannot read", errno);
        if (n == 0) return out;
        out.append(buf, static_cast<size_t>(n));
    }
}

absl::Status write_fd(int fd, const void* data, size_t size, const std::string& path_for_errors) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
        const ssize_t n = ::write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return errno_status(path_for_errors, "write failed", n < 0 ? errno : EIO);
        p += n;
        size -= static_cast<size_t>(n);
    }
    return absl::OkStatus();
}

}  // namespace deltatune
