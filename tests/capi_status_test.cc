// The C ABI's status plumbing: errno -> absl::Status (core/common/
// errno_status.h), the typed mismatch (core/common/errors.h) -> ZERO_MISMATCH,
// and the struct_size helper (capi/abi_struct.h) on made-up struct versions.
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "capi/abi_struct.h"
#include "capi/status_code.h"
#include "core/common/errno_status.h"
#include "core/common/errors.h"
#include "gtest/gtest.h"
#include "zero_c.h"

namespace {

using zero::ErrnoToStatus;

TEST(ErrnoToStatus, MapsTheKindAndKeepsTheMessage) {
  struct Case {
    int err;
    absl::StatusCode code;
    zero_status c;
  };
  const Case cases[] = {
      {ENOENT, absl::StatusCode::kNotFound, ZERO_NOT_FOUND},
      {EACCES, absl::StatusCode::kPermissionDenied, ZERO_IO_ERROR},
      {EPERM, absl::StatusCode::kPermissionDenied, ZERO_IO_ERROR},
      {EROFS, absl::StatusCode::kPermissionDenied, ZERO_IO_ERROR},
      {ENOSPC, absl::StatusCode::kResourceExhausted, ZERO_OUT_OF_MEMORY},
      {EDQUOT, absl::StatusCode::kResourceExhausted, ZERO_OUT_OF_MEMORY},
      {EFBIG, absl::StatusCode::kResourceExhausted, ZERO_OUT_OF_MEMORY},
      {EEXIST, absl::StatusCode::kAlreadyExists, ZERO_IO_ERROR},
      {EINVAL, absl::StatusCode::kInvalidArgument, ZERO_INVALID_ARGUMENT},
      {ENOTDIR, absl::StatusCode::kFailedPrecondition, ZERO_FAILED_PRECONDITION},
      {EIO, absl::StatusCode::kUnavailable, ZERO_IO_ERROR},
      {EXDEV, absl::StatusCode::kUnavailable, ZERO_IO_ERROR},
  };
  for (const Case& c : cases) {
    absl::Status s = ErrnoToStatus(c.err, "open '/x/y'");
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_EQ(s.message(), std::string("open '/x/y': ") + std::strerror(c.err));
    EXPECT_EQ(zero_capi::ToZeroStatus(s), c.c) << s;
    EXPECT_FALSE(zero::IsMismatch(s));
  }
  EXPECT_EQ(zero::ErrnoText(ENOENT), std::strerror(ENOENT));
  // A progress callback's cancel (1.6).
  EXPECT_EQ(zero_capi::ToZeroStatus(absl::CancelledError("cancelled")), ZERO_CANCELLED);
}

TEST(Mismatch, IsTypedByPayloadNotByText) {
  absl::Status m = zero::MismatchError("anything at all");
  EXPECT_TRUE(absl::IsFailedPrecondition(m));
  EXPECT_TRUE(zero::IsMismatch(m));
  EXPECT_EQ(m.message(), "anything at all");
  EXPECT_EQ(zero_capi::ToZeroStatus(m), ZERO_MISMATCH);
  // The old message text without the payload is a plain precondition.
  absl::Status text = absl::FailedPreconditionError("finalize: ranks registered different params");
  EXPECT_FALSE(zero::IsMismatch(text));
  EXPECT_EQ(zero_capi::ToZeroStatus(text), ZERO_FAILED_PRECONDITION);
  EXPECT_FALSE(zero::IsMismatch(absl::OkStatus()));
  EXPECT_EQ(zero_capi::ToZeroStatus(absl::OkStatus()), ZERO_OK);
  EXPECT_EQ(zero_capi::ToZeroStatus(absl::AlreadyExistsError("x")), ZERO_IO_ERROR);
  EXPECT_EQ(zero_capi::ToZeroStatus(absl::UnknownError("x")), ZERO_INTERNAL);
}

// Through the ABI: ranks that register different params get ZERO_MISMATCH.
TEST(Mismatch, FinalizeReportsZeroMismatchOnEveryRank) {
  zero_comm_t* comms[2] = {nullptr, nullptr};
  ASSERT_EQ(zero_comm_create_threads(2, comms), ZERO_OK);
  std::vector<zero_status> got(2, ZERO_OK);
  std::vector<std::string> msg(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      zero_config cfg = ZERO_CONFIG_INIT;
      zero_engine_t* e = nullptr;
      if (zero_engine_create(&cfg, comms[r], &e) != ZERO_OK) return;
      const int64_t shape[1] = {r == 1 ? 5 : 4};
      zero_param_desc d = ZERO_PARAM_DESC_INIT;
      d.name = "b";
      d.ndim = 1;
      d.shape = shape;
      int32_t id = -1;
      zero_engine_register_param(e, &d, &id);
      got[r] = zero_engine_finalize(e);
      msg[r] = zero_last_error();
      zero_engine_destroy(e);
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(got[r], ZERO_MISMATCH) << msg[r];
    EXPECT_NE(msg[r].find("'b [4] fp32 trainable'"), std::string::npos) << msg[r];
  }
  zero_comm_destroy(comms[0]);
  zero_comm_destroy(comms[1]);
}

// A struct of two versions: 1.0 had `a`, 1.1 appended `b`.
struct TestV1 {
  size_t struct_size;
  int64_t a;
};
struct TestV2 {
  size_t struct_size;
  int64_t a;
  int64_t b;
};

}  // namespace

namespace zero_capi {
template <>
struct AbiStruct<TestV2> {
  static constexpr const char* kName = "test_struct";
  static constexpr size_t kFirstSize = sizeof(TestV1);
};
}  // namespace zero_capi

namespace {

constexpr TestV2 kDefaults = {sizeof(TestV2), -1, -2};

TEST(StructSize, AnOlderInputIsAPrefixWithDefaultsPastIt) {
  TestV1 old = {sizeof(TestV1), 7};
  auto r = zero_capi::ReadStruct(reinterpret_cast<const TestV2*>(&old), kDefaults);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->a, 7);
  EXPECT_EQ(r->b, -2);  // the default
}

TEST(StructSize, ANewerInputNeedsAZeroTail) {
  struct TestV3 {
    size_t struct_size;
    int64_t a, b, c;
  } newer = {sizeof(TestV3), 1, 2, 0};
  auto r = zero_capi::ReadStruct(reinterpret_cast<const TestV2*>(&newer), kDefaults);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->a, 1);
  EXPECT_EQ(r->b, 2);
  newer.c = 3;
  r = zero_capi::ReadStruct(reinterpret_cast<const TestV2*>(&newer), kDefaults);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
  EXPECT_NE(r.status().message().find("test_struct: struct_size 32 is larger than this library's 24"),
            std::string::npos)
      << r.status();
}

TEST(StructSize, TooSmallIsRefused) {
  TestV2 v = kDefaults;
  for (size_t n : {size_t{0}, size_t{8}, sizeof(TestV1) - 1}) {
    v.struct_size = n;
    absl::Status s = zero_capi::CheckStructSize(&v);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << n;
    EXPECT_NE(s.message().find("test_struct: struct_size " + std::to_string(n)), std::string::npos) << s;
  }
}

TEST(StructSize, AnOlderOutputGetsOnlyItsBytes) {
  struct {
    TestV1 v1;
    int64_t after;
  } mem = {{sizeof(TestV1), 0}, 99};
  TestV2 value = {sizeof(TestV2), 5, 6};
  auto* out = reinterpret_cast<TestV2*>(&mem);
  ASSERT_TRUE(zero_capi::CheckStructSize(out).ok());
  zero_capi::WriteStruct(value, out);
  EXPECT_EQ(mem.v1.struct_size, sizeof(TestV1));  // never written
  EXPECT_EQ(mem.v1.a, 5);
  EXPECT_EQ(mem.after, 99);  // past the caller's struct
}

}  // namespace
