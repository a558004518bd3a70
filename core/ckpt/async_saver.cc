#include "core/ckpt/async_saver.h"

#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/ckpt/checkpoint_writer.h"

namespace zero {
namespace ckpt {

AsyncSaver::~AsyncSaver() {
  const absl::Status s = Wait();
  if (!s.ok()) std::fprintf(stderr, "zero: %s\n", std::string(s.message()).c_str());
}

void AsyncSaver::Start(ShardView snapshot, Communicator* comm, std::string dir,
                       std::string tag, SaveOptions options, std::string what) {
  what_ = std::move(what);
  finished_ = false;
  thread_ = std::thread([this, v = std::move(snapshot), comm, dir = std::move(dir),
                         tag = std::move(tag), options = std::move(options)]() {
    const auto t0 = std::chrono::steady_clock::now();
    result_ = SaveCheckpoint(v, comm, dir, tag, options);
    write_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                         .count();
    finished_ = true;
  });
}

absl::Status AsyncSaver::Wait() {
  if (!thread_.joinable()) return absl::OkStatus();
  thread_.join();
  absl::Status s = std::exchange(result_, absl::OkStatus());
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("background save of ", what_, " failed: ",
                                             s.message()));
}

}  // namespace ckpt
}  // namespace zero
