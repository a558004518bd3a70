// libFuzzer target: the ds_config parser. Any text gives a Config or an
// InvalidArgument naming what is wrong; never an exception (through the C
// ABI that would be ZERO_INTERNAL), a crash or undefined behaviour; and
// what it accepts resolves DeepSpeed's batch arithmetic exactly or refuses.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/config/config.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<zero::Config> c = zero::ParseDsConfig(text);
  if (!c.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(c.status()));
    FUZZ_CHECK(!c.status().message().empty());
    return 0;
  }
  FUZZ_CHECK(c->stage >= 0 && c->stage <= 3);
  // DeepSpeed's batch arithmetic at a few world sizes: train_batch_size =
  // micro batch x accumulation steps x world, or an error (never a product
  // that wrapped).
  for (int world : {1, 3, 1 << 20}) {
    zero::Config k = *c;
    absl::Status s = k.Resolve(world);
    if (!s.ok()) {
      FUZZ_CHECK(absl::IsInvalidArgument(s) && !s.message().empty());
      continue;
    }
    int64_t product = 0;
    FUZZ_CHECK(k.train_micro_batch_size_per_gpu >= 1 && k.gradient_accumulation_steps >= 1);
    FUZZ_CHECK(!__builtin_mul_overflow(k.train_micro_batch_size_per_gpu,
                                       k.gradient_accumulation_steps, &product));
    FUZZ_CHECK(!__builtin_mul_overflow(product, int64_t{world}, &product));
    FUZZ_CHECK(product == k.train_batch_size);
  }
  return 0;
}
