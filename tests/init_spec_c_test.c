/* Described initial values through the C ABI (1.4), from C99:
 * zero_engine_register_param_init and zero_engine_register_param_fill on one
 * rank; refusals (a second source, a bad kind, a short struct); a failing
 * fill callback fails finalize naming the param. The sharded behaviour is
 * tests/init_spec_test.cc's. zero_engine_write_master_range (1.5) from C99. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/testing/c_expect.h"
#include "zero_c.h"


static int calls = 0;

/* user: the value to fill, or NULL to fail. */
static int32_t fill(void* user, const char* name, int64_t offset, int64_t count, float* out) {
  int64_t k;
  (void)name;
  ++calls;
  if (user == NULL) return 3;
  for (k = 0; k < count; ++k) out[k] = *(const float*)user + (float)(offset + k);
  return 0;
}

int main(void) {
  zero_comm_t* comm = NULL;
  zero_engine_t* engine = NULL;
  zero_config cfg = ZERO_CONFIG_INIT;
  zero_param_desc d = ZERO_PARAM_DESC_INIT;
  zero_init_spec spec = ZERO_INIT_SPEC_INIT;
  int64_t shape[2] = {16, 8};
  int32_t id = -1, k;
  float base = 0.5f, values[128], out[128];
  double mean = 0;

  EXPECT(ZERO_VERSION_MINOR >= 4);
  EXPECT(ZERO_INIT_ZEROS == 0 && ZERO_INIT_NORMAL == 4 && ZERO_INIT_FAN_IN_UNIFORM == 7);
  EXPECT(spec.struct_size == sizeof(zero_init_spec) && spec.std == 1.0 && spec.fan_in == 0);
  EXPECT(zero_comm_create_self(&comm) == ZERO_OK);
  cfg.stage = 3;
  EXPECT(zero_engine_create(&cfg, comm, &engine) == ZERO_OK);
  d.ndim = 2;
  d.shape = shape;

  /* Refusals. */
  d.name = "w";
  EXPECT(is_error(zero_engine_register_param_init(engine, &d, NULL, &id), ZERO_INVALID_ARGUMENT,
                  "spec"));
  EXPECT(is_error(zero_engine_register_param_fill(engine, &d, NULL, NULL, &id),
                  ZERO_INVALID_ARGUMENT, "fill"));
  spec.kind = (zero_init_kind)99;
  EXPECT(is_error(zero_engine_register_param_init(engine, &d, &spec, &id), ZERO_INVALID_ARGUMENT,
                  "kind"));
  spec.kind = ZERO_INIT_NORMAL;
  spec.struct_size = 8;
  EXPECT(is_error(zero_engine_register_param_init(engine, &d, &spec, &id), ZERO_INVALID_ARGUMENT,
                  "zero_init_spec"));
  spec.struct_size = sizeof(spec);
  d.init = values;
  EXPECT(is_error(zero_engine_register_param_init(engine, &d, &spec, &id), ZERO_INVALID_ARGUMENT,
                  "one init source"));
  d.init = NULL;
  d.ndim = 1;
  spec.kind = ZERO_INIT_KAIMING_UNIFORM; /* a 1-D param needs fan_in */
  EXPECT(is_error(zero_engine_register_param_init(engine, &d, &spec, &id), ZERO_INVALID_ARGUMENT,
                  "fan_in"));
  d.ndim = 2;

  /* w: N(0, 1) by spec; f: filled. */
  spec.kind = ZERO_INIT_NORMAL;
  spec.seed = 5;
  EXPECT(zero_engine_register_param_init(engine, &d, &spec, &id) == ZERO_OK && id == 0);
  d.name = "f";
  EXPECT(zero_engine_register_param_fill(engine, &d, fill, &base, &id) == ZERO_OK && id == 1);
  EXPECT(zero_engine_finalize(engine) == ZERO_OK);
  EXPECT(calls > 0);
  EXPECT(zero_engine_read_master(engine, 0, out) == ZERO_OK);
  for (k = 0; k < 128; ++k) mean += out[k];
  EXPECT(fabs(mean / 128) < 0.5 && out[0] != out[1]);
  EXPECT(zero_engine_read_master(engine, 1, out) == ZERO_OK);
  for (k = 0; k < 128; ++k) EXPECT(out[k] == 0.5f + (float)k);
  /* 1.5: a range written (a "row" of 8), the rest unchanged; a range past
   * the end or a NULL pointer refused. */
  {
    float row[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    EXPECT(zero_engine_write_master_range(engine, 1, 16, 8, row) == ZERO_OK);
    EXPECT(zero_engine_read_master(engine, 1, out) == ZERO_OK);
    for (k = 0; k < 128; ++k) EXPECT(out[k] == (k >= 16 && k < 24 ? 0.0f : 0.5f + (float)k));
    EXPECT(is_error(zero_engine_write_master_range(engine, 1, 124, 8, row),
                    ZERO_INVALID_ARGUMENT, "outside"));
    EXPECT(zero_engine_write_master_range(engine, 1, 0, 8, NULL) == ZERO_INVALID_ARGUMENT);
    EXPECT(zero_engine_write_master_range(NULL, 1, 0, 8, row) == ZERO_INVALID_ARGUMENT);
  }
  zero_engine_destroy(engine);

  /* A failing callback fails finalize, naming the param. */
  EXPECT(zero_engine_create(&cfg, comm, &engine) == ZERO_OK);
  d.name = "broken";
  EXPECT(zero_engine_register_param_fill(engine, &d, fill, NULL, &id) == ZERO_OK);
  EXPECT(is_error(zero_engine_finalize(engine), ZERO_INVALID_ARGUMENT, "'broken'"));
  zero_engine_destroy(engine);
  zero_comm_destroy(comm);

  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
