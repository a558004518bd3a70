// Injected IO faults (docs/ARCHITECTURE.md, "Failures"): every file read,
// write, fsync, rename and preallocation of the NVMe tiers and of the
// checkpoint writer and reader goes through these wrappers, which behave
// exactly like the system calls unless a fault is armed, so the tests can
// make the Nth of them fail the way a full or dying disk does.
//
// Armed from the environment (read once, at the first IO) or by
// SetIoFaults(). A spec is a list of entries separated by ';':
//
//   OP:N[+]:ACTION[:SUBSTRING]
//
//   OP         read | write | fsync | rename | alloc | any
//   N          the Nth call of OP (counted from 1, per entry, over the whole
//              process) on a path containing SUBSTRING; "N+" that call and
//              every later one (a disk that stays full)
//   ACTION     EIO | ENOSPC | EDQUOT | EROFS (the call fails with that errno),
//              short (a read or write transfers half its bytes, rounded to
//              4 KiB for O_DIRECT files: the caller must finish the rest),
//              crash (the process SIGKILLs itself before the call: a crash
//              between two steps of a protocol)
//
// e.g. ZERO_IO_FAULT="write:3:ENOSPC:zero_optim_r1" fails rank 1's third
// optimizer-state write with ENOSPC. A malformed spec aborts the process
// with a message (it is a test tool: a typo must not pass as "no fault").
#ifndef ZERO_CORE_COMMON_IO_FAULT_H_
#define ZERO_CORE_COMMON_IO_FAULT_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace zero {
namespace io {

inline constexpr const char* kIoFaultEnv = "ZERO_IO_FAULT";

// Replaces the armed faults (and their counters); "" disarms. Errors name
// the bad entry.
absl::Status SetIoFaults(const std::string& spec);
// Faults injected so far (a test checks that its fault fired).
int64_t IoFaultsInjected();
// Calls the first armed entry has matched so far (0 when none is armed): a
// test counts the calls before the one it aims at, then arms N for it.
int64_t IoFaultMatches();

// The system calls, with faults. Same return values and errno as the calls.
ssize_t Pread(int fd, void* buf, size_t n, off_t off, const std::string& path);
ssize_t Pwrite(int fd, const void* buf, size_t n, off_t off, const std::string& path);
ssize_t Read(int fd, void* buf, size_t n, const std::string& path);
ssize_t Write(int fd, const void* buf, size_t n, const std::string& path);
int Fsync(int fd, const std::string& path);
int Rename(const std::string& from, const std::string& to);
// renameat2(RENAME_EXCHANGE) of two existing paths (a fault counts as a rename).
int RenameExchange(const std::string& from, const std::string& to);
// posix_fallocate: returns 0 or the error number (it does not set errno).
int Fallocate(int fd, off_t len, const std::string& path);

// For an asynchronous engine that issues the call itself (io_uring): what
// to do with a transfer of n bytes. err != 0: fail it with -err;
// otherwise transfer `n_out` bytes (n, or fewer for a short transfer).
struct Decision {
  int err = 0;
  size_t n_out = 0;
};
Decision Decide(bool write, int fd, size_t n, const std::string& path);

}  // namespace io
}  // namespace zero

#endif  // ZERO_CORE_COMMON_IO_FAULT_H_
