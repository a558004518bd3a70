// zero_engine_flight_record (C ABI 1.9) over two thread ranks at stage 3:
// the records of a run where rank 1 gathers another expert than rank 0 are
// identical on both ranks up to the collective where they parted (the first
// divergence), which is each rank's last record, marked "diverged" and
// naming that rank's param; the step fails with ZERO_MISMATCH on both, and
// the engine refuses further calls. A run where the ranks agree records
// every collective "done". The size query and a short buffer behave as
// zero_engine_comm_log_summary's.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "zero_c.h"

namespace {

struct Outcome {
  zero_status status = ZERO_OK;
  std::string error;
  std::string record;
  zero_status after = ZERO_OK;  // a call made after the failure
};

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  size_t a = 0;
  while (a < s.size()) {
    size_t b = s.find('\n', a);
    out.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return out;
}

// Each rank gathers "shared" then expert `expert(rank)`, hands in their
// gradients and steps, `steps` times.
Outcome Run(zero_comm_t* comm, int rank, int (*expert)(int), int steps) {
  Outcome o;
  const char* json =
      "{\"zero_optimization\": {\"stage\": 3, \"stage3_param_persistence_threshold\": 0},"
      " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 0.01}},"
      " \"comm_timeout_seconds\": 60, \"zero_flight_recorder_size\": 64}";
  zero_engine_t* e = nullptr;
  EXPECT_EQ(zero_engine_create_json(json, comm, &e), ZERO_OK) << zero_last_error();
  const char* names[3] = {"shared", "experts.0", "experts.1"};
  int32_t ids[3];
  const int64_t shape[1] = {6};
  for (int p = 0; p < 3; ++p) {
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = names[p];
    d.ndim = 1;
    d.shape = shape;
    EXPECT_EQ(zero_engine_register_param(e, &d, &ids[p]), ZERO_OK);
  }
  EXPECT_EQ(zero_engine_finalize(e), ZERO_OK) << zero_last_error();
  for (int s = 0; s < steps && o.status == ZERO_OK; ++s) {
    const int used[2] = {0, 1 + expert(rank)};
    for (int k = 0; k < 2 && o.status == ZERO_OK; ++k) {
      void* w = nullptr;
      o.status = zero_engine_gather(e, ids[used[k]], &w);
    }
    for (int k = 1; k >= 0 && o.status == ZERO_OK; --k) {
      void* g = nullptr;
      o.status = zero_engine_grad_buffer(e, ids[used[k]], &g);
      if (o.status != ZERO_OK) break;
      for (int i = 0; i < 6; ++i) static_cast<float*>(g)[i] = 0.1f * (i + k + rank);
      o.status = zero_engine_grad_ready(e, ids[used[k]]);
      if (o.status == ZERO_OK) o.status = zero_engine_release(e, ids[used[k]]);
    }
    if (o.status == ZERO_OK) o.status = zero_engine_step(e, nullptr);
  }
  if (o.status != ZERO_OK) {
    o.error = zero_last_error();
    void* w = nullptr;
    o.after = zero_engine_gather(e, ids[0], &w);
  }
  size_t length = 0;
  EXPECT_EQ(zero_engine_flight_record(e, nullptr, 0, &length), ZERO_OK);
  char tiny[4] = {'x', 'x', 'x', 'x'};
  size_t again = 0;
  EXPECT_EQ(zero_engine_flight_record(e, tiny, sizeof tiny, &again), ZERO_OK);
  EXPECT_EQ(again, length);
  if (length >= sizeof tiny) EXPECT_EQ(tiny[0], '\0');
  o.record.assign(length + 1, '\0');
  EXPECT_EQ(zero_engine_flight_record(e, &o.record[0], o.record.size(), &length), ZERO_OK);
  o.record.resize(length);
  zero_engine_destroy(e);
  return o;
}

std::vector<Outcome> OnTwoThreads(int (*expert)(int), int steps) {
  zero_comm_t* comms[2];
  EXPECT_EQ(zero_comm_create_threads(2, comms), ZERO_OK);
  std::vector<Outcome> out(2);
  std::thread t0([&] { out[0] = Run(comms[0], 0, expert, steps); });
  std::thread t1([&] { out[1] = Run(comms[1], 1, expert, steps); });
  t0.join();
  t1.join();
  zero_comm_destroy(comms[0]);
  zero_comm_destroy(comms[1]);
  return out;
}

int SameExpert(int) { return 0; }
int OwnExpert(int rank) { return rank; }

TEST(FlightRecordCapi, AgreeingRanksRecordEveryCollectiveDone) {
  auto out = OnTwoThreads(SameExpert, 2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(out[r].status, ZERO_OK) << out[r].error;
    auto lines = Lines(out[r].record);
    ASSERT_GE(lines.size(), 6u);
    for (const std::string& l : lines) {
      EXPECT_NE(l.find("\"rank\":" + std::to_string(r)), std::string::npos) << l;
      EXPECT_NE(l.find("\"outcome\":\"done\""), std::string::npos) << l;
    }
    EXPECT_NE(out[r].record.find("\"call\":\"gather\""), std::string::npos);
    EXPECT_NE(out[r].record.find("\"param\":\"experts.0\""), std::string::npos);
  }
}

TEST(FlightRecordCapi, FirstDivergenceIsTheLastRecordOnEveryRank) {
  auto out = OnTwoThreads(OwnExpert, 2);
  std::vector<std::vector<std::string>> lines(2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(out[r].status, ZERO_MISMATCH) << out[r].error;
    EXPECT_NE(out[r].error.find("rank 0 all-gathers 'experts.0'"), std::string::npos)
        << out[r].error;
    EXPECT_NE(out[r].error.find("rank 1 all-gathers 'experts.1'"), std::string::npos)
        << out[r].error;
    EXPECT_NE(out[r].after, ZERO_OK);  // the engine refuses further calls
    lines[r] = Lines(out[r].record);
    ASSERT_FALSE(lines[r].empty());
    const std::string& last = lines[r].back();
    EXPECT_NE(last.find("\"outcome\":\"diverged\""), std::string::npos) << last;
    EXPECT_NE(last.find(r == 0 ? "\"param\":\"experts.0\"" : "\"param\":\"experts.1\""),
              std::string::npos)
        << last;
  }
  // Up to the divergence the two records are the same but for the rank.
  ASSERT_EQ(lines[0].size(), lines[1].size());
  for (size_t k = 0; k + 1 < lines[0].size(); ++k) {
    std::string a = lines[0][k], b = lines[1][k];
    a.replace(a.find("\"rank\":0"), 8, "\"rank\":R");
    b.replace(b.find("\"rank\":1"), 8, "\"rank\":R");
    EXPECT_EQ(a, b) << "record " << k;
    EXPECT_NE(a.find("\"outcome\":\"done\""), std::string::npos) << a;
  }
}

TEST(FlightRecordCapi, NullArguments) {
  size_t length = 0;
  EXPECT_EQ(zero_engine_flight_record(nullptr, nullptr, 0, &length), ZERO_INVALID_ARGUMENT);
}

}  // namespace
