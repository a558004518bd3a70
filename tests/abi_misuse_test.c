/* The C ABI from C99 (-std=c99 -pedantic -Werror): the header compiles as C,
 * and every misuse returns a status with a message, never a crash. */
#include <stdio.h>
#include <string.h>

#include "tests/testing/c_expect.h"
#include "zero_c.h"


int main(void) {
  zero_comm_t* comm = NULL;
  zero_engine_t* engine = NULL;
  zero_config cfg = ZERO_CONFIG_INIT;
  zero_param_desc d = ZERO_PARAM_DESC_INIT;
  zero_step_info info = ZERO_STEP_INFO_INIT;
  zero_stats stats = ZERO_STATS_INIT;
  int64_t shape[2] = {4, 3};
  int32_t id = -1, count = 0;
  void* p = NULL;
  float out[12];
  double scale = 0;

  EXPECT(zero_version() == ZERO_VERSION_CODE);
  EXPECT(strcmp(zero_status_string(ZERO_OK), "ok") == 0);
  EXPECT(strlen(zero_status_string((zero_status)99)) > 0);
  /* Fixed enum values: part of the ABI. */
  EXPECT(ZERO_INVALID_ARGUMENT == 1 && ZERO_TIMEOUT == 5 && ZERO_MISMATCH == 11);
  EXPECT(ZERO_DTYPE_BF16 == 2 && ZERO_OPTIMIZER_SGD == 2);

  /* NULL handles and pointers. */
  EXPECT(is_error(zero_comm_create_self(NULL), ZERO_INVALID_ARGUMENT, "NULL"));
  EXPECT(is_error(zero_engine_create(&cfg, NULL, &engine), ZERO_INVALID_ARGUMENT, "comm"));
  EXPECT(is_error(zero_engine_step(NULL, &info), ZERO_INVALID_ARGUMENT, "engine"));
  EXPECT(is_error(zero_engine_gather(NULL, 0, &p), ZERO_INVALID_ARGUMENT, "engine"));
  zero_engine_destroy(NULL); /* no-op */
  zero_comm_destroy(NULL);

  EXPECT(zero_comm_create_self(&comm) == ZERO_OK);
  EXPECT(is_error(zero_comm_create_threads(0, &comm), ZERO_INVALID_ARGUMENT, "world_size"));

  /* Bad configs name the key. */
  EXPECT(is_error(zero_engine_create_json("{\"zero_optimization\": {\"stage\": 4}}", comm, &engine),
                  ZERO_INVALID_ARGUMENT, "zero_optimization.stage: expected 0..3, got 4"));
  EXPECT(engine == NULL);
  EXPECT(is_error(zero_engine_create_json("{\"optimiser\": {}}", comm, &engine),
                  ZERO_INVALID_ARGUMENT, "optimiser: unknown key"));
  cfg.stage = 7;
  EXPECT(is_error(zero_engine_create(&cfg, comm, &engine), ZERO_INVALID_ARGUMENT,
                  "zero_optimization.stage"));
  cfg.stage = 2;
  cfg.struct_size = 2;
  EXPECT(is_error(zero_engine_create(&cfg, comm, &engine), ZERO_INVALID_ARGUMENT, "struct_size"));
  cfg.struct_size = sizeof(cfg);

  EXPECT(zero_engine_create(&cfg, comm, &engine) == ZERO_OK);
  /* Devices: unknown kinds are errors; CUDA says how to get it. */
  EXPECT(is_error(zero_engine_set_device(engine, "tpu", 0), ZERO_INVALID_ARGUMENT, "unknown kind 'tpu'"));
  EXPECT(zero_engine_set_device(engine, "cpu", 0) == ZERO_OK);
  {
    zero_status st = zero_engine_set_device(engine, "cuda", 0);
    EXPECT(st == ZERO_UNIMPLEMENTED || st == ZERO_OK || st == ZERO_INTERNAL);
    if (st != ZERO_OK) EXPECT(strlen(zero_last_error()) > 0);
    if (st == ZERO_OK) EXPECT(zero_engine_set_device(engine, "cpu", 0) == ZERO_OK);
  }
  /* Wrong order: before finalize. */
  EXPECT(is_error(zero_engine_step(engine, &info), ZERO_FAILED_PRECONDITION, "finalize"));
  EXPECT(is_error(zero_engine_gather(engine, 0, &p), ZERO_FAILED_PRECONDITION, "finalize"));

  d.name = "w";
  d.ndim = 2;
  d.shape = shape;
  EXPECT(zero_engine_register_param(engine, &d, &id) == ZERO_OK && id == 0);
  EXPECT(is_error(zero_engine_register_param(engine, &d, &id), ZERO_INVALID_ARGUMENT,
                  "already registered"));
  d.name = "bad";
  d.dtype = ZERO_DTYPE_F16;
  EXPECT(is_error(zero_engine_register_param(engine, &d, &id), ZERO_INVALID_ARGUMENT,
                  "working dtype"));
  d.dtype = (zero_dtype)9;
  EXPECT(is_error(zero_engine_register_param(engine, &d, &id), ZERO_INVALID_ARGUMENT, "dtype"));
  d.dtype = ZERO_DTYPE_F32;
  d.shape = NULL;
  EXPECT(is_error(zero_engine_register_param(engine, &d, &id), ZERO_INVALID_ARGUMENT, "shape"));
  d.shape = shape;
  shape[1] = 0;
  EXPECT(is_error(zero_engine_register_param(engine, &d, &id), ZERO_INVALID_ARGUMENT, "dimension"));
  shape[1] = 3;

  EXPECT(zero_engine_finalize(engine) == ZERO_OK);
  /* Wrong order: after finalize. */
  d.name = "late";
  EXPECT(is_error(zero_engine_register_param(engine, &d, &id), ZERO_FAILED_PRECONDITION,
                  "after finalize"));
  EXPECT(is_error(zero_engine_finalize(engine), ZERO_FAILED_PRECONDITION, "after finalize"));

  EXPECT(zero_engine_num_params(engine, &count) == ZERO_OK && count == 1);
  EXPECT(is_error(zero_engine_find_param(engine, "nope", &id), ZERO_NOT_FOUND, "nope"));
  EXPECT(is_error(zero_engine_gather(engine, 5, &p), ZERO_INVALID_ARGUMENT, "no param with id 5"));
  EXPECT(is_error(zero_engine_release(engine, 0), ZERO_FAILED_PRECONDITION, "not gathered"));
  EXPECT(is_error(zero_engine_grad_ready(engine, 0), ZERO_FAILED_PRECONDITION, "no grad_buffer"));

  /* A normal step works after all that. */
  EXPECT(zero_engine_grad_buffer(engine, 0, &p) == ZERO_OK);
  ((float*)p)[0] = 1.0f;
  EXPECT(is_error(zero_engine_step(engine, &info), ZERO_FAILED_PRECONDITION, "without grad_ready"));
  EXPECT(zero_engine_grad_ready(engine, 0) == ZERO_OK);
  EXPECT(is_error(zero_engine_grad_ready(engine, 0), ZERO_FAILED_PRECONDITION, "already"));
  /* Its bucket (sized to the model) was full and is reducing already: a
   * second buffer for the same param would count its gradient twice. */
  EXPECT(is_error(zero_engine_grad_buffer(engine, 0, &p), ZERO_FAILED_PRECONDITION,
                  "already handed in"));
  EXPECT(zero_engine_step(engine, &info) == ZERO_OK);
  EXPECT(info.boundary == 1 && info.global_step == 1 && info.skipped == 0);
  EXPECT(zero_engine_loss_scale(engine, &scale) == ZERO_OK && scale == 1.0);
  EXPECT(zero_engine_read_master(engine, 0, out) == ZERO_OK);
  EXPECT(out[0] < 0.0f && out[1] == 0.0f); /* Adam moved only the element with a gradient */

  /* Checkpoints: NULLs, bad tags and missing checkpoints are statuses. */
  {
    zero_load_options lo = ZERO_LOAD_OPTIONS_INIT;
    EXPECT(lo.struct_size == sizeof(lo) && lo.load_optimizer_states == 1 && lo.allow_missing == 0);
    EXPECT(is_error(zero_engine_save(NULL, "d", "t"), ZERO_INVALID_ARGUMENT, "engine"));
    EXPECT(is_error(zero_engine_save(engine, "d", NULL), ZERO_INVALID_ARGUMENT, "tag"));
    EXPECT(is_error(zero_engine_save(engine, "d", "a/b"), ZERO_INVALID_ARGUMENT, "tag"));
    EXPECT(is_error(zero_engine_load(engine, NULL, NULL, &lo), ZERO_INVALID_ARGUMENT, "dir"));
    EXPECT(is_error(zero_engine_load(engine, "/nonexistent/zero", NULL, NULL), ZERO_NOT_FOUND,
                    "latest"));
    EXPECT(is_error(zero_engine_load_safetensors(NULL, "m.safetensors", NULL),
                    ZERO_INVALID_ARGUMENT, "engine"));
    EXPECT(is_error(zero_engine_load_safetensors(engine, NULL, NULL), ZERO_INVALID_ARGUMENT,
                    "path"));
    EXPECT(is_error(zero_engine_load_safetensors(engine, "/nonexistent/m.safetensors", NULL),
                    ZERO_NOT_FOUND, "m.safetensors"));
    EXPECT(is_error(zero_checkpoint_export_safetensors("d", NULL, NULL, ZERO_DTYPE_F32),
                    ZERO_INVALID_ARGUMENT, "out_path"));
  }

  stats.struct_size = 8;
  EXPECT(is_error(zero_engine_stats(engine, &stats), ZERO_INVALID_ARGUMENT, "struct_size"));
  stats.struct_size = sizeof(stats);
  EXPECT(zero_engine_stats(engine, &stats) == ZERO_OK);
  EXPECT(stats.trainable_numel == 12 && stats.global_step == 1 && stats.world_size == 1);

  {
    zero_param_info pi = ZERO_PARAM_INFO_INIT;
    int32_t gas = 0;
    EXPECT(zero_engine_param_info(engine, 0, &pi) == ZERO_OK);
    EXPECT(strcmp(pi.name, "w") == 0 && pi.ndim == 2 && pi.shape[0] == 4 && pi.shape[1] == 3 &&
           pi.dtype == ZERO_DTYPE_F32 && pi.trainable == 1);
    EXPECT(is_error(zero_engine_param_info(engine, 3, &pi), ZERO_INVALID_ARGUMENT, "no param with id 3"));
    EXPECT(zero_engine_gradient_accumulation_steps(engine, &gas) == ZERO_OK && gas == 1);
  }
  zero_engine_destroy(engine);
  zero_comm_destroy(comm);
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
