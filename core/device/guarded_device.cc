#include "core/device/guarded_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/quant_simd.h"

namespace zero {
namespace {

// Every live stand-in allocation, process-wide: device range -> alias.
struct Region {
  size_t bytes;
  char* alias;
};
std::mutex& RegionMu() {
  static std::mutex mu;
  return mu;
}
std::map<uintptr_t, Region>& Regions() {
  static auto* m = new std::map<uintptr_t, Region>;
  return *m;
}
std::mutex& StreamMu() {
  static std::mutex mu;
  return mu;
}
std::set<GuardedStream*>& Streams() {
  static auto* s = new std::set<GuardedStream*>;
  return *s;
}

size_t PageRounded(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t r = (bytes + page - 1) / page * page;
  return r == 0 ? page : r;
}

// One in-order stream whose work runs on a worker thread when waited for.
class Queue : public GuardedStream {
 public:
  Queue() : worker_([this] { Run(); }) {
    std::lock_guard<std::mutex> l(StreamMu());
    Streams().insert(this);
  }
  ~Queue() override {
    {
      std::lock_guard<std::mutex> l(StreamMu());
      Streams().erase(this);
    }
    Flush();
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  // Returns how many operations were ever queued, this one included.
  int64_t Enqueue(std::function<void()> fn) {
    std::lock_guard<std::mutex> l(mu_);
    q_.push_back(std::move(fn));
    return ++enqueued_;
  }
  void Flush() override { FlushTo(-1); }
  // Runs the first `target` operations ever queued (-1: all so far).
  void FlushTo(int64_t target) {
    std::unique_lock<std::mutex> l(mu_);
    if (std::this_thread::get_id() == worker_.get_id()) return;
    if (target < 0 || target > enqueued_) target = enqueued_;
    if (target > flush_to_) flush_to_ = target;
    cv_.notify_all();
    done_cv_.wait(l, [&] { return done_ >= target; });
  }
  int64_t pending() const {
    std::lock_guard<std::mutex> l(mu_);
    return enqueued_ - done_;
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || (!q_.empty() && done_ < flush_to_); });
      if (q_.empty() || done_ >= flush_to_) {
        if (stop_) return;
        continue;
      }
      std::function<void()> fn = std::move(q_.front());
      q_.pop_front();
      l.unlock();
      fn();
      l.lock();
      ++done_;
      done_cv_.notify_all();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> q_;
  int64_t enqueued_ = 0, done_ = 0, flush_to_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

class Guarded : public GuardedDevice {
 public:
  ~Guarded() override { queue_.Flush(); }
  std::string name() const override { return "standin"; }
  bool host_accessible() const override { return false; }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    const size_t r = PageRounded(bytes);
    void* dev = mmap(nullptr, r, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (dev == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat("standin device: cannot reserve ", bytes, " bytes"));
    }
    void* alias = mmap(nullptr, r, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (alias == MAP_FAILED) {
      munmap(dev, r);
      return absl::ResourceExhaustedError(
          absl::StrCat("standin device: cannot allocate ", bytes, " bytes"));
    }
    {
      std::lock_guard<std::mutex> l(RegionMu());
      Regions()[reinterpret_cast<uintptr_t>(dev)] = {r, static_cast<char*>(alias)};
    }
    allocated_ += bytes;  // what was asked for, as the CPU device counts
    NotePeak();
    // The zero fill of a fresh mapping is already there, as cudaMalloc's
    // zero-fill memset is queued first on the CUDA device: work queued
    // later sees it either way.
    return dev;
  }

  // Stream-ordered like the CUDA caching allocator: the range stops being
  // device memory at once; its bytes go away after the work queued so far.
  void Free(void* p, size_t bytes) override {
    if (p == nullptr) return;
    Region reg{};
    {
      std::lock_guard<std::mutex> l(RegionMu());
      auto it = Regions().find(reinterpret_cast<uintptr_t>(p));
      if (it == Regions().end()) {
        Note(absl::InternalError("standin device: Free of a pointer it did not allocate"));
        return;
      }
      reg = it->second;
      Regions().erase(it);
    }
    allocated_ -= bytes;
    queue_.Enqueue([p, reg] {
      munmap(reg.alias, reg.bytes);
      munmap(p, reg.bytes);
    });
  }

  void Memset0(void* p, size_t bytes) override {
    char* a = Dev(p, "Memset0");
    if (a == nullptr || bytes == 0) return;
    queue_.Enqueue([a, bytes] { std::memset(a, 0, bytes); });
  }

  // Any direction; returns when the bytes have landed (like CudaDevice::Copy).
  void Copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    char* d = Any(dst);
    const char* s = Any(src);
    queue_.Enqueue([d, s, bytes] { std::memmove(d, s, bytes); });
    queue_.Flush();
  }
  // Queued and not waited for, as on a GPU: only later device work (or a
  // wait) makes it run.
  void CopyQueued(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    char* d = Any(dst);
    const char* s = Any(src);
    queue_.Enqueue([d, s, bytes] { std::memmove(d, s, bytes); });
  }

  // The copy stream: the bytes are read from `src` when the copy queue
  // runs, which is only when the compute queue reaches the WaitForUpload.
  bool async_uploads() const override { return true; }
  void* UploadAsync(void* dst, const void* src, size_t bytes) override {
    ++async_uploads_;
    char* d = Dev(dst, "UploadAsync");
    if (d == nullptr || bytes == 0) return nullptr;
    const int64_t at = copy_.Enqueue([d, src, bytes] { std::memcpy(d, src, bytes); });
    return new int64_t(at);
  }
  void WaitForUpload(void* event) override {
    if (event == nullptr) return;
    const int64_t at = *static_cast<int64_t*>(event);
    delete static_cast<int64_t*>(event);
    queue_.Enqueue([this, at] { copy_.FlushTo(at); });
  }
  int64_t async_uploads_issued() const override { return async_uploads_; }

  void CallerCopy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    std::memmove(Any(dst), Any(src), bytes);
  }

  size_t allocated_bytes() const override { return allocated_; }
  // What a GPU would report: bytes now and their high-water mark, and the
  // host staging asked for page-locked (the stand-in does not lock it).
  DeviceMemoryStats memory_stats() const override {
    DeviceMemoryStats s;
    s.bytes = static_cast<int64_t>(allocated_.load());
    s.peak_bytes = static_cast<int64_t>(peak_.load());
    std::lock_guard<std::mutex> l(pinned_mu_);
    s.pinned_host_bytes = pinned_bytes_;
    return s;
  }
  absl::StatusOr<void*> AllocateHost(size_t bytes, bool pinned) override {
    absl::StatusOr<void*> p = Device::AllocateHost(bytes, pinned);
    if (p.ok() && pinned) {
      std::lock_guard<std::mutex> l(pinned_mu_);
      pinned_[*p] = static_cast<int64_t>(bytes);
      pinned_bytes_ += static_cast<int64_t>(bytes);
    }
    return p;
  }
  void FreeHost(void* p, bool pinned) override {
    if (pinned) {
      std::lock_guard<std::mutex> l(pinned_mu_);
      auto it = pinned_.find(p);
      if (it != pinned_.end()) {
        pinned_bytes_ -= it->second;
        pinned_.erase(it);
      }
    }
    Device::FreeHost(p, pinned);
  }

  void OptimizerStep(const math::OptimScalars& s, void* g, DType gt, float* p, float* s1,
                     float* s2, int64_t n, void* work, DType t, bool zero_grad) override {
    const char* what = "OptimizerStep";
    void* G = Dev(g, what);
    auto* P = reinterpret_cast<float*>(Dev(p, what));
    float* S1 = s1 ? reinterpret_cast<float*>(Dev(s1, what)) : nullptr;
    float* S2 = s2 ? reinterpret_cast<float*>(Dev(s2, what)) : nullptr;
    void* W = work ? Dev(work, what) : nullptr;
    if (!Launch(what, {G, P}, (s1 == nullptr || S1) && (s2 == nullptr || S2) &&
                                  (work == nullptr || W))) {
      return;
    }
    queue_.Enqueue([=] { cpu::OptimizerStep(s, G, gt, P, S1, S2, n, W, t, zero_grad); });
  }
  void ToF32(const void* src, DType t, float* dst, int64_t n, float scale) override {
    const char* what = "ToF32";
    const void* S = Dev(src, what);
    auto* D = reinterpret_cast<float*>(Dev(dst, what));
    if (!Launch(what, {S, D}, true)) return;
    queue_.Enqueue([=] { cpu::ToF32(S, t, D, n, scale); });
  }
  void FromF32(const float* src, void* dst, DType t, int64_t n) override {
    const char* what = "FromF32";
    auto* S = reinterpret_cast<const float*>(Dev(src, what));
    void* D = Dev(dst, what);
    if (!Launch(what, {S, D}, true)) return;
    queue_.Enqueue([=] { cpu::FromF32(S, D, t, n); });
  }
  void Accumulate(void* dst, const void* src, DType t, int64_t n) override {
    const char* what = "Accumulate";
    void* D = Dev(dst, what);
    const void* S = Dev(src, what);
    if (!Launch(what, {S, D}, true)) return;
    queue_.Enqueue([=] { cpu::Accumulate(D, S, t, n); });
  }
  void AccumulateF32(void* dst, const float* src, float scale, DType t, int64_t n) override {
    const char* what = "AccumulateF32";
    void* D = Dev(dst, what);
    auto* S = reinterpret_cast<const float*>(Dev(src, what));
    if (!Launch(what, {S, D}, true)) return;
    queue_.Enqueue([=] { cpu::AccumulateF32(D, S, scale, t, n); });
  }
  void Quantize(const float* x, int64_t n, int bits, int block, void* out) override {
    const char* what = "Quantize";
    auto* X = reinterpret_cast<const float*>(Dev(x, what));
    auto* O = reinterpret_cast<uint8_t*>(Dev(out, what));
    if (!Launch(what, {X, O}, true)) return;
    queue_.Enqueue([=] { cpu::QuantizePiece(X, n, bits, block, O); });
  }
  void Dequantize(const void* in, int64_t n, int bits, int block, float* out,
                  bool accumulate) override {
    const char* what = "Dequantize";
    auto* I = reinterpret_cast<const uint8_t*>(Dev(in, what));
    auto* O = reinterpret_cast<float*>(Dev(out, what));
    if (!Launch(what, {I, O}, true)) return;
    queue_.Enqueue([=] {
      if (accumulate) {
        cpu::DequantizeAdd(I, n, bits, block, O);
      } else {
        cpu::DequantizePiece(I, n, bits, block, O);
      }
    });
  }
  double SumSquares(const void* x, DType t, int64_t n) override {
    const char* what = "SumSquares";
    const void* X = Dev(x, what);
    if (!Launch(what, {X}, true)) return std::nan("");  // an error is no finite norm
    double out = 0.0;
    queue_.Enqueue([=, &out] { out = cpu::SumSquares(X, t, n); });
    queue_.Flush();
    return out;
  }
  void UploadF32(const float* host, void* dst, DType t, int64_t n) override {
    if (n <= 0) return;
    void* D = Dev(dst, "UploadF32");
    if (D == nullptr) return;
    queue_.Enqueue([=] { cpu::FromF32(host, D, t, n); });
    queue_.Flush();
  }
  void DownloadF32(const void* src, DType t, float* host, int64_t n) override {
    if (n <= 0) return;
    const void* S = Dev(src, "DownloadF32");
    if (S == nullptr) return;
    queue_.Enqueue([=] { cpu::ToF32(S, t, host, n, 1.0f); });
    queue_.Flush();
  }
  void Synchronize() override { queue_.Flush(); }

  absl::Status status() const override {
    std::lock_guard<std::mutex> l(mu_);
    return sticky_;
  }
  void* stream_handle() const override {
    return static_cast<GuardedStream*>(const_cast<Queue*>(&queue_));
  }
  void FailNextKernel(const std::string& what) override {
    std::lock_guard<std::mutex> l(mu_);
    inject_ = what;
  }
  int64_t pending() const override { return queue_.pending(); }

 private:
  // The alias of device pointer p; a host pointer is an error (a GPU kernel
  // cannot use pageable host memory): null, noted.
  char* Dev(const void* p, const char* what) {
    if (p == nullptr) return nullptr;
    void* a = Alias(p);
    if (a == nullptr) {
      Note(absl::InternalError(absl::StrCat(
          "standin device: ", what, " was given host memory 0x",
          absl::Hex(reinterpret_cast<uintptr_t>(p)),
          " where device memory is needed (a GPU would fault: illegal address)")));
    }
    return static_cast<char*>(a);
  }
  // Device memory through its alias, host memory as it is.
  static char* Any(const void* p) {
    void* a = Alias(p);
    return static_cast<char*>(a ? a : const_cast<void*>(p));
  }
  // Whether a kernel may be queued: every pointer valid and no failure
  // injected (an injected one is noted, like a failed launch).
  bool Launch(const char* what, std::initializer_list<const void*> ptrs, bool rest_ok) {
    bool ok = rest_ok;
    for (const void* p : ptrs) ok = ok && p != nullptr;
    std::lock_guard<std::mutex> l(mu_);
    if (!inject_.empty()) {
      const absl::Status s = absl::InternalError(absl::StrCat(
          "standin device: ", what, ": injected launch failure (", inject_, ")"));
      if (sticky_.ok()) sticky_ = s;
      inject_.clear();
      return false;
    }
    return ok;
  }
  void Note(const absl::Status& s) {
    std::lock_guard<std::mutex> l(mu_);
    if (sticky_.ok()) sticky_ = s;
  }

  // Before queue_: its operations (WaitForUpload) reach copy_, so copy_ is
  // built first and destroyed last.
  Queue copy_;
  Queue queue_;
  std::atomic<int64_t> async_uploads_{0};
  std::atomic<size_t> allocated_{0};
  std::atomic<size_t> peak_{0};
  void NotePeak() {
    size_t now = allocated_.load(), seen = peak_.load();
    while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
    }
  }
  mutable std::mutex pinned_mu_;
  std::map<void*, int64_t> pinned_;
  int64_t pinned_bytes_ = 0;
  mutable std::mutex mu_;
  absl::Status sticky_;
  std::string inject_;
};

}  // namespace

GuardedStream* GuardedStream::FromHandle(void* handle) {
  std::lock_guard<std::mutex> l(StreamMu());
  auto* s = static_cast<GuardedStream*>(handle);
  return Streams().count(s) ? s : nullptr;
}

void* GuardedDevice::Alias(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> l(RegionMu());
  auto& m = Regions();
  auto it = m.upper_bound(a);
  if (it == m.begin()) return nullptr;
  --it;
  if (a >= it->first + it->second.bytes) return nullptr;
  return it->second.alias + (a - it->first);
}

std::unique_ptr<GuardedDevice> MakeGuardedDevice() { return std::make_unique<Guarded>(); }

}  // namespace zero
