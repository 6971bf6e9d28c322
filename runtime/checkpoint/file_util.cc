// Whole-file reads and atomic writes (temp file + fsync + rename + directory fsync).
#include "runtime/checkpoint/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace deltatune {

absl::StatusOr<std::string> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        const int err = errno;
        const std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
        return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

absl::StatusOr<MappedFile> map_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        const std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
        return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
    }
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        ::close(fd);
        return absl::InternalError(absl::StrCat(path, ": fstat failed"));
    }
    MappedFile m;
    m.size = static_cast<size_t>(st.st_size);
    if (m.size == 0) {  // mmap refuses length 0; callers report the file as too short
        ::close(fd);
        return m;
    }
    void* base = mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (base == MAP_FAILED) return absl::InternalError(absl::StrCat(path, ": mmap failed"));
    m.data = static_cast<const unsigned char*>(base);
    const size_t size = m.size;
    m.keep = std::shared_ptr<const void>(
        base, [size](const void* p) { munmap(const_cast<void*>(p), size); });
    return m;
}

absl::Status write_file_atomic(const std::string& path,
                               const std::vector<std::pair<const void*, size_t>>& chunks) {
    const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        return absl::PermissionDeniedError(
            absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
    }
    for (const auto& [data, size] : chunks) {
        const char* p = static_cast<const char*>(data);
        size_t left = size;
        while (left > 0) {
            const ssize_t n = ::write(fd, p, left);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                const std::string err = std::strerror(errno);
                ::close(fd);
                ::unlink(tmp.c_str());
                return absl::ResourceExhaustedError(absl::StrCat(tmp, ": write failed: ", err));
            }
            p += n;
            left -= static_cast<size_t>(n);
        }
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        ::unlink(tmp.c_str());
        return absl::InternalError(absl::StrCat(tmp, ": fsync/close failed"));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        ::unlink(tmp.c_str());
        return absl::InternalError(
            absl::StrCat("rename ", tmp, " -> ", path, ": ", std::strerror(errno)));
    }
    std::string dir = std::filesystem::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
    return absl::OkStatus();
}

absl::Status write_file_atomic(const std::string& path, const std::string& contents) {
    return write_file_atomic(path, {{contents.data(), contents.size()}});
}

}  // namespace deltatune
