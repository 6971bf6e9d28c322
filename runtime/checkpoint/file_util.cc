// Whole-file reads and atomic writes (temp file + fsync + rename + directory fsync).
#include "runtime/checkpoint/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/base/path_sandbox.h"
#include "runtime/base/status_macros.h"

namespace deltatune {

absl::StatusOr<std::string> read_file(const std::string& path) {
    DT_ASSIGN_OR_RETURN(UniqueFd fd, process_sandbox().open(path, O_RDONLY));
    return read_fd(fd.get(), path);
}

absl::StatusOr<MappedFile> map_file(const std::string& path) {
    DT_ASSIGN_OR_RETURN(UniqueFd fd, process_sandbox().open(path, O_RDONLY));
    struct stat st {};
    if (fstat(fd.get(), &st) != 0) return errno_status(path, "fstat failed", errno);
    MappedFile m;
    m.size = static_cast<size_t>(st.st_size);
    if (m.size == 0) return m;  // mmap refuses length 0; callers report the file as too short
    void* base = mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (base == MAP_FAILED) return errno_status(path, "mmap failed", errno);
    m.data = static_cast<const unsigned char*>(base);
    const size_t size = m.size;
    m.keep = std::shared_ptr<const void>(
        base, [size](const void* p) { munmap(const_cast<void*>(p), size); });
    return m;
}

// The temporary file is created and renamed through the descriptor of the (confined) folder, so
// neither step can be redirected by a symlink swapped in after the folder was opened.
absl::Status write_file_atomic(const std::string& path,
                               const std::vector<std::pair<const void*, size_t>>& chunks) {
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "."
                            : slash == 0               ? "/"
                                                       : path.substr(0, slash);
    const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    DT_ASSIGN_OR_RETURN(UniqueFd dfd, process_sandbox().open_folder(dir, /*for_writing=*/true));
    const std::string tmp_name = absl::StrCat(".", name, ".tmp.", getpid());
    const std::string tmp = absl::StrCat(dir, "/", tmp_name);
    UniqueFd fd(::openat(dfd.get(), tmp_name.c_str(),
                         O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (fd.get() < 0) return errno_status(tmp, "cannot create", errno);
    absl::Status s;
    for (const auto& [data, size] : chunks) {
        s = write_fd(fd.get(), data, size, tmp);
        if (!s.ok()) break;
    }
    if (s.ok() && ::fsync(fd.get()) != 0) s = errno_status(tmp, "fsync failed", errno);
    if (s.ok() && ::close(fd.release()) != 0) s = errno_status(tmp, "close failed", errno);
    if (s.ok() && ::renameat(dfd.get(), tmp_name.c_str(), dfd.get(), name.c_str()) != 0) {
        s = errno_status(absl::StrCat(tmp, " -> ", path), "rename failed", errno);
    }
    if (!s.ok()) {
        ::unlinkat(dfd.get(), tmp_name.c_str(), 0);
        return s;
    }
    ::fsync(dfd.get());
    return absl::OkStatus();
}

absl::Status write_file_atomic(const std::string& path, const std::string& contents) {
    return write_file_atomic(path, {{contents.data(), contents.size()}});
}

}  // namespace deltatune
