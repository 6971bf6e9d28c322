// Whole-file reads and atomic writes (temp file + fsync + rename + directory fsync).
#include "runtime/base/file_util.h"

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

namespace {

void dont_need_whole_pages(const void* data, size_t size) {
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<uintptr_t>(data);
    const uintptr_t lo = (begin + page - 1) / page * page, hi = (begin + size) / page * page;
    if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

}  // namespace

// A private mapping never written: MADV_DONTNEED drops the pages, the file keeps the data.
void release_mapped_pages(const void* data, size_t size) {
    dont_need_whole_pages(data, size);
}

// Private anonymous memory: MADV_DONTNEED frees the pages; the next touch maps a zero page.
void discard_pages(void* data, size_t size) {
    dont_need_whole_pages(data, size);
}

absl::Status write_file_atomic(const std::string& path,
                               const std::vector<std::pair<const void*, size_t>>& chunks) {
    return process_sandbox().write_atomic(path, chunks);
}

absl::Status write_file_atomic(const std::string& path, const std::string& contents) {
    return write_file_atomic(path, {{contents.data(), contents.size()}});
}

}  // namespace deltatune
