/* Observing a run through the C ABI (1.5), from C99: the step breakdown and
 * the collective log of an engine created from a ds_config with
 * "wall_clock_breakdown" and "comms_logger"; refusals when they are off and
 * for short structs. The numbers themselves are tests/observe_test.cc's. */
#include <stdio.h>
#include <stddef.h>
#include <string.h>

#include "tests/testing/c_expect.h"
#include "zero_c.h"

static void train(zero_engine_t* engine, int steps) {
  void* p = NULL;
  int s, m;
  for (s = 0; s < steps; ++s) {
    for (m = 0; m < 2; ++m) {
      EXPECT(zero_engine_gather(engine, 0, &p) == ZERO_OK);
      EXPECT(zero_engine_release(engine, 0) == ZERO_OK);
      EXPECT(zero_engine_grad_buffer(engine, 0, &p) == ZERO_OK);
      ((float*)p)[0] = 1.0f;
      EXPECT(zero_engine_grad_ready(engine, 0) == ZERO_OK);
      EXPECT(zero_engine_step(engine, NULL) == ZERO_OK);
    }
  }
}

static zero_engine_t* make(zero_comm_t* comm, const char* json) {
  zero_engine_t* engine = NULL;
  zero_param_desc d = ZERO_PARAM_DESC_INIT;
  int64_t shape[2] = {32, 16};
  int32_t id = -1;
  EXPECT(zero_engine_create_json(json, comm, &engine) == ZERO_OK);
  d.name = "w";
  d.ndim = 2;
  d.shape = shape;
  EXPECT(zero_engine_register_param(engine, &d, &id) == ZERO_OK && id == 0);
  EXPECT(zero_engine_finalize(engine) == ZERO_OK);
  return engine;
}

int main(void) {
  zero_comm_t* comm = NULL;
  zero_engine_t* engine = NULL;
  zero_step_breakdown b = ZERO_STEP_BREAKDOWN_INIT;
  zero_comm_log_entry entries[16];
  zero_comm_log_entry one = ZERO_COMM_LOG_ENTRY_INIT;
  char text[4096];
  size_t length = 0;
  int32_t count = -1, i;

  EXPECT(ZERO_VERSION_MINOR >= 6);
  EXPECT(b.struct_size == sizeof(zero_step_breakdown) && b.global_step == 0);
  EXPECT(zero_comm_create_self(&comm) == ZERO_OK);

  engine = make(comm,
                "{\"gradient_accumulation_steps\": 2, \"steps_per_print\": 0,"
                " \"wall_clock_breakdown\": true, \"comms_logger\": {\"enabled\": true}}");
  EXPECT(zero_engine_step_breakdown(engine, &b) == ZERO_OK && b.global_step == 0);
  train(engine, 3);
  EXPECT(zero_engine_step_breakdown(engine, &b) == ZERO_OK);
  EXPECT(b.global_step == 3 && b.micro_steps == 2);
  EXPECT(b.step_ms > 0 && b.forward_ms >= 0 && b.backward_ms >= 0 && b.optimizer_ms > 0);
  EXPECT(b.forward_ms + b.backward_ms + b.optimizer_ms <= b.step_ms * 1.05 + 0.01);
  EXPECT(b.update_ms > 0 && b.update_ms <= b.optimizer_ms);
  EXPECT(b.reduce_hidden_ms <= b.reduce_ms);
  EXPECT(b.nvme_read_ms == 0 && b.nvme_write_ms == 0 && b.nvme_hidden_ms == 0); /* no NVMe */
  /* An older caller's struct gets its prefix; a short one is refused. A 1.5
   * caller's struct ends at nvme_write_bytes: the 1.6 fields past it untouched. */
  b.struct_size = offsetof(zero_step_breakdown, nvme_read_ms);
  b.nvme_read_ms = -7.0;
  EXPECT(zero_engine_step_breakdown(engine, &b) == ZERO_OK && b.global_step == 3);
  EXPECT(b.nvme_read_ms == -7.0);
  b.struct_size = 4;
  EXPECT(is_error(zero_engine_step_breakdown(engine, &b), ZERO_INVALID_ARGUMENT,
                  "zero_step_breakdown"));

  /* One rank: only the finalize checks talk (control broadcasts). */
  EXPECT(zero_engine_comm_log(engine, NULL, 0, &count) == ZERO_OK);
  EXPECT(count >= 0 && count <= 16);
  for (i = 0; i < 16; ++i) entries[i] = one;
  EXPECT(zero_engine_comm_log(engine, entries, 16, &count) == ZERO_OK);
  for (i = 0; i < count; ++i) {
    EXPECT(entries[i].op >= 0 && entries[i].op <= 3 && entries[i].count > 0);
    EXPECT(entries[i].bytes <= entries[i].count * entries[i].bucket_bytes);
  }
  EXPECT(is_error(zero_engine_comm_log(engine, NULL, 2, &count), ZERO_INVALID_ARGUMENT,
                  "entries"));
  EXPECT(zero_engine_comm_log_summary(engine, text, sizeof(text), &length) == ZERO_OK);
  EXPECT(length == strlen(text) && strstr(text, "comms log") != NULL);
  EXPECT(zero_engine_comm_log_summary(engine, text, 4, &length) == ZERO_OK);
  EXPECT(text[0] == '\0' && length > 4);
  zero_engine_destroy(engine);

  /* Off: both refused, naming the key. */
  engine = make(comm, "{\"steps_per_print\": 0}");
  train(engine, 1);
  b.struct_size = sizeof(b);
  EXPECT(is_error(zero_engine_step_breakdown(engine, &b), ZERO_FAILED_PRECONDITION,
                  "wall_clock_breakdown"));
  EXPECT(is_error(zero_engine_comm_log(engine, NULL, 0, &count), ZERO_FAILED_PRECONDITION,
                  "comms_logger"));
  EXPECT(is_error(zero_engine_comm_log_summary(engine, text, sizeof(text), &length),
                  ZERO_FAILED_PRECONDITION, "comms_logger"));
  zero_engine_destroy(engine);
  zero_comm_destroy(comm);

  /* The memory estimate (1.5): stage 2 fp16 over 4 ranks of 1000 x 1000 and
   * a bias; the model states follow the ZeRO formula on padded Psi. */
  {
    zero_memory_estimate est = ZERO_MEMORY_ESTIMATE_INIT;
    const int64_t numel[2] = {1000000, 1000};
    const int32_t ndim[2] = {2, 1};
    EXPECT(zero_estimate_memory("{\"fp16\": {\"enabled\": true}, "
                                "\"zero_optimization\": {\"stage\": 2}}",
                                2, numel, ndim, 4, 1, 1, &est) == ZERO_OK);
    EXPECT(est.trainable_numel == 1001000 && est.padded_numel >= 1001000);
    EXPECT(est.param_bytes == 2 * est.padded_numel);
    EXPECT(est.grad_bytes == 2 * est.padded_numel / 4);
    EXPECT(est.master_bytes + est.optimizer_bytes == 12 * est.padded_numel / 4);
    EXPECT(est.device_bytes == est.param_bytes + est.grad_bytes + est.master_bytes +
                                   est.optimizer_bytes + est.buffer_bytes);
    EXPECT(is_error(zero_estimate_memory("{\"zero_optimization\": {\"stage\": 5}}", 2, numel,
                                         ndim, 4, 1, 1, &est),
                    ZERO_INVALID_ARGUMENT, "stage"));
    EXPECT(is_error(zero_estimate_memory("{}", 2, NULL, ndim, 4, 1, 1, &est),
                    ZERO_INVALID_ARGUMENT, "numel"));
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
