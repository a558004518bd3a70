/* Every enum the C ABI takes from its caller, at values outside its
 * enumerators: a C caller may store any int in an enum, and the library must
 * refuse it as ZERO_INVALID_ARGUMENT naming the value (never read it as the
 * C++ enum first: undefined behaviour, caught by UBSan's -fsanitize=enum
 * under --config=asan). zero_status_string names any value. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "tests/testing/c_expect.h"
#include "zero_c.h"

static const int kBad[] = {3, 4, 8, 255, 1000, -1, -7, INT_MAX, INT_MIN};
/* 3-5 are optimizers since 1.13 (LION, ADAGRAD, MUON). */
static const int kBadOptimizers[] = {6, 8, 255, 1000, -1, -7, INT_MAX, INT_MIN};
static const int kBadKinds[] = {8, 9, 16, 1000, -1, INT_MAX, INT_MIN};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The message names the value as the caller stored it. */
static int names(int v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%d", v);
  return strstr(zero_last_error(), buf) != NULL;
}

int main(void) {
  zero_comm_t* comm = NULL;
  zero_engine_t* engine = NULL;
  int64_t shape[1] = {4};
  int32_t id = -1;
  int i;

  EXPECT(zero_comm_create_self(&comm) == ZERO_OK);

  /* zero_config.dtype and .optimizer. */
  for (i = 0; i < COUNT(kBad); ++i) {
    zero_config cfg = ZERO_CONFIG_INIT;
    cfg.dtype = (zero_dtype)kBad[i];
    EXPECT(is_error(zero_engine_create(&cfg, comm, &engine), ZERO_INVALID_ARGUMENT,
                    "zero_config.dtype") && names(kBad[i]));
    EXPECT(engine == NULL);
  }
  for (i = 0; i < COUNT(kBadOptimizers); ++i) {
    zero_config cfg = ZERO_CONFIG_INIT;
    cfg.optimizer = (zero_optimizer)kBadOptimizers[i];
    EXPECT(is_error(zero_engine_create(&cfg, comm, &engine), ZERO_INVALID_ARGUMENT,
                    "zero_config.optimizer") && names(kBadOptimizers[i]));
    EXPECT(engine == NULL);
  }

  {
    zero_config cfg = ZERO_CONFIG_INIT;
    EXPECT(zero_engine_create(&cfg, comm, &engine) == ZERO_OK);
  }
  /* zero_param_desc.dtype, through every register call. */
  for (i = 0; i < COUNT(kBad); ++i) {
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    zero_init_spec spec = ZERO_INIT_SPEC_INIT;
    d.name = "w";
    d.ndim = 1;
    d.shape = shape;
    d.dtype = (zero_dtype)kBad[i];
    EXPECT(is_error(zero_engine_register_param(engine, &d, &id), ZERO_INVALID_ARGUMENT,
                    "'w': dtype") && names(kBad[i]));
    EXPECT(is_error(zero_engine_register_param_init(engine, &d, &spec, &id),
                    ZERO_INVALID_ARGUMENT, "'w': dtype") && names(kBad[i]));
  }
  /* zero_param_desc.dtype and .use_muon in the memory estimate (1.16),
   * refused as registration refuses them, naming the entry and the param. */
  for (i = 0; i < COUNT(kBad); ++i) {
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    zero_memory_estimate e = ZERO_MEMORY_ESTIMATE_INIT;
    d.name = "w";
    d.ndim = 1;
    d.shape = shape;
    d.dtype = (zero_dtype)kBad[i];
    EXPECT(is_error(zero_estimate_memory_params("{}", 1, &d, 1, 1, 0, &e),
                    ZERO_INVALID_ARGUMENT, "param 0 'w': dtype") && names(kBad[i]));
    d.dtype = ZERO_DTYPE_F32;
    d.use_muon = (zero_muon_use)kBad[i];
    EXPECT(is_error(zero_estimate_memory_params("{}", 1, &d, 1, 1, 0, &e),
                    ZERO_INVALID_ARGUMENT, "param 0 'w': use_muon") && names(kBad[i]));
  }
  /* zero_init_spec.kind. */
  for (i = 0; i < COUNT(kBadKinds); ++i) {
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    zero_init_spec spec = ZERO_INIT_SPEC_INIT;
    d.name = "w";
    d.ndim = 1;
    d.shape = shape;
    spec.kind = (zero_init_kind)kBadKinds[i];
    EXPECT(is_error(zero_engine_register_param_init(engine, &d, &spec, &id),
                    ZERO_INVALID_ARGUMENT, "spec kind") && names(kBadKinds[i]));
  }
  /* Nothing was registered by the refused calls: "w" is still free. */
  {
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "w";
    d.ndim = 1;
    d.shape = shape;
    EXPECT(zero_engine_register_param(engine, &d, &id) == ZERO_OK && id == 0);
  }
  /* zero_engine_gather_into's dtype, refused before the param is looked at. */
  {
    float dst[4];
    for (i = 0; i < COUNT(kBad); ++i) {
      EXPECT(is_error(zero_engine_gather_into(engine, id, (zero_dtype)kBad[i], dst, sizeof dst),
                      ZERO_INVALID_ARGUMENT, "zero_engine_gather_into: dtype") &&
             names(kBad[i]));
    }
  }
  /* zero_engine_gather_into_many's (1.15), refused before any entry is. */
  {
    float dst[4];
    void* dsts[1];
    size_t bytes[1];
    dsts[0] = dst;
    bytes[0] = sizeof dst;
    for (i = 0; i < COUNT(kBad); ++i) {
      EXPECT(is_error(zero_engine_gather_into_many(engine, &id, 1, (zero_dtype)kBad[i], dsts,
                                                   bytes),
                      ZERO_INVALID_ARGUMENT, "zero_engine_gather_into_many: dtype") &&
             names(kBad[i]));
    }
  }
  zero_engine_destroy(engine);

  /* The export's dtype is refused before any file is opened. */
  for (i = 0; i < COUNT(kBad); ++i) {
    EXPECT(is_error(zero_checkpoint_export_safetensors("/nonexistent", "t", "/nonexistent/x",
                                                       (zero_dtype)kBad[i]),
                    ZERO_INVALID_ARGUMENT, "dtype") && names(kBad[i]));
  }

  /* zero_status_string: every value has a string; unknown ones say so. */
  EXPECT(strcmp(zero_status_string(ZERO_MISMATCH), "mismatch between ranks") == 0);
  for (i = 0; i < COUNT(kBad); ++i) {
    if (kBad[i] >= 0 && kBad[i] <= ZERO_CANCELLED) continue;
    EXPECT(strcmp(zero_status_string((zero_status)kBad[i]), "unknown status") == 0);
  }

  zero_comm_destroy(comm);
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
