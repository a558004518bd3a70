/* The struct_size rule of zero_c.h (convention 3), for every public struct,
 * from strict C99: the first published size is accepted (an older client's
 * struct is a prefix: the library writes no byte past it), a larger struct
 * with an all-zero tail is accepted (a newer client that left the fields
 * this library does not know at their defaults), a larger struct with a
 * non-zero tail is refused naming the struct and the size, and a struct_size
 * below the first published size is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testing/c_expect.h"
#include "zero_c.h"

/* Bytes a "newer client" appends past this library's struct. */
#define EXTRA 24
/* An unknown (non-zero) field of a newer client, this far past our sizeof. */
#define POKE 5

/* First published sizes (the header notes each struct's last 1.0/1.1 field). */
#define END(T, f) (offsetof(T, f) + sizeof(((T*)0)->f))
#define ROUND8(n) (((n) + 7) / 8 * 8)
static const size_t kFirstConfig = ROUND8(END(zero_config, comm_timeout_seconds));
static const size_t kFirstDesc = ROUND8(END(zero_param_desc, trainable));
static const size_t kFirstStep = ROUND8(END(zero_step_info, lr));
static const size_t kFirstStats = ROUND8(END(zero_stats, micro_step));
static const size_t kFirstLoad = ROUND8(END(zero_load_options, allow_missing));
static const size_t kFirstInfo = ROUND8(END(zero_param_info, trainable));
static const size_t kFirstSafetensors = ROUND8(END(zero_safetensors_options, allow_missing));
static const size_t kFirstInitSpec = ROUND8(END(zero_init_spec, fan_in)); /* 1.4 */
static const size_t kFirstLinks = ROUND8(END(zero_link_stats, inter_values_control)); /* 1.5 */
static const size_t kFirstDevice = ROUND8(END(zero_device_info, dlpack_device_type)); /* 1.5 */
static const size_t kFirstSave = ROUND8(END(zero_save_options, keep_last)); /* 1.11 */
static const size_t kFirstPreempt = ROUND8(END(zero_preemption_options, exit_code)); /* 1.11 */

/* The caller's memory: one struct of any kind and room past it. */
static union {
  zero_config config;
  zero_param_desc desc;
  zero_step_info step;
  zero_stats stats;
  zero_load_options load;
  zero_param_info info;
  zero_safetensors_options st;
  zero_init_spec spec;
  zero_link_stats links;
  zero_device_info device;
  zero_save_options save;
  zero_preemption_options preempt;
  unsigned char bytes[512];
} buf;

/* buf := zeros, then `init` (size `size`), then struct_size = n; bytes from
 * n up to `canary_end` are set to 0xAB (memory the library must not write);
 * with `poke`, the byte POKE past `size` is set (an unknown newer field). */
static void fill(const void* init, size_t size, size_t n, size_t canary_end, int poke) {
  size_t i;
  memset(&buf, 0, sizeof(buf));
  memcpy(&buf, init, size);
  memcpy(&buf, &n, sizeof(n));
  for (i = n; i < canary_end; ++i) buf.bytes[i] = 0xAB;
  if (poke) buf.bytes[size + POKE] = 1;
}

/* Bytes [from, to) of buf all equal `v`. */
static int all(size_t from, size_t to, unsigned char v) {
  size_t i;
  for (i = from; i < to; ++i) {
    if (buf.bytes[i] != v) return 0;
  }
  return 1;
}

/* Refused as convention 3 says: ZERO_INVALID_ARGUMENT, naming the struct
 * and the offending struct_size. */
static int refused(zero_status got, const char* name, size_t n) {
  char want[64];
  snprintf(want, sizeof(want), "struct_size %lu", (unsigned long)n);
  return got == ZERO_INVALID_ARGUMENT && strstr(zero_last_error(), name) != NULL &&
         strstr(zero_last_error(), want) != NULL;
}

static zero_comm_t* comm;
static zero_engine_t* fresh_engine; /* before finalize: register_param */
static zero_engine_t* engine;       /* finalized, one param of 4x3 */

static zero_status create_with(const zero_config* c) {
  zero_engine_t* e = NULL;
  zero_status st = zero_engine_create(c, comm, &e);
  zero_engine_destroy(e);
  return st;
}

static void test_config(void) {
  const zero_config init = ZERO_CONFIG_INIT;
  const size_t size = sizeof(zero_config);
  fill(&init, size, kFirstConfig, 0, 0);
  EXPECT(create_with(&buf.config) == ZERO_OK);
  fill(&init, size, size + EXTRA, 0, 0);
  EXPECT(create_with(&buf.config) == ZERO_OK);
  fill(&init, size, size + EXTRA, 0, 1);
  EXPECT(refused(create_with(&buf.config), "zero_config", size + EXTRA));
  EXPECT(strstr(zero_last_error(), "newer") != NULL);
  fill(&init, size, kFirstConfig - 1, 0, 0);
  EXPECT(refused(create_with(&buf.config), "zero_config", kFirstConfig - 1));
  fill(&init, size, 0, 0, 0);
  EXPECT(refused(create_with(&buf.config), "zero_config", 0));
  fill(&init, size, 1u << 20, 0, 0); /* garbage: refused without reading it */
  EXPECT(refused(create_with(&buf.config), "zero_config", 1u << 20));
}

static void test_param_desc(void) {
  static const int64_t shape[2] = {4, 3};
  const size_t size = sizeof(zero_param_desc);
  zero_param_desc init = ZERO_PARAM_DESC_INIT;
  int32_t id = -1, count = 0;
  init.ndim = 2;
  init.shape = shape;
  init.name = "p_first";
  fill(&init, size, kFirstDesc, 0, 0);
  EXPECT(zero_engine_register_param(fresh_engine, &buf.desc, &id) == ZERO_OK && id == 0);
  init.name = "p_newer";
  fill(&init, size, size + EXTRA, 0, 0);
  EXPECT(zero_engine_register_param(fresh_engine, &buf.desc, &id) == ZERO_OK && id == 1);
  init.name = "p_refused";
  fill(&init, size, size + EXTRA, 0, 1);
  EXPECT(refused(zero_engine_register_param(fresh_engine, &buf.desc, &id), "zero_param_desc",
                 size + EXTRA));
  fill(&init, size, kFirstDesc - 1, 0, 0);
  EXPECT(refused(zero_engine_register_param(fresh_engine, &buf.desc, &id), "zero_param_desc",
                 kFirstDesc - 1));
  fill(&init, size, sizeof(size_t), 0, 0);
  EXPECT(refused(zero_engine_register_param(fresh_engine, &buf.desc, &id), "zero_param_desc",
                 sizeof(size_t)));
  /* A 1.0 client: whatever sits in its tail padding (reserved_1_13 since
   * 1.13) is ignored; use_muon, past its size, takes its default. */
  init.name = "p_old_padding";
  fill(&init, size, kFirstDesc, 0, 0);
  memset(buf.bytes + offsetof(zero_param_desc, reserved_1_13), 0xAB, 4);
  EXPECT(zero_engine_register_param(fresh_engine, &buf.desc, &id) == ZERO_OK && id == 2);
  /* 1.13: Muon on a 1-D param is refused naming it; an unknown value too. */
  init.name = "p_bias";
  init.ndim = 1;
  init.use_muon = ZERO_MUON_ON;
  fill(&init, size, size, 0, 0);
  EXPECT(zero_engine_register_param(fresh_engine, &buf.desc, &id) == ZERO_INVALID_ARGUMENT);
  EXPECT(strstr(zero_last_error(), "'p_bias'") != NULL);
  init.ndim = 2;
  init.use_muon = (zero_muon_use)7;
  fill(&init, size, size, 0, 0);
  EXPECT(zero_engine_register_param(fresh_engine, &buf.desc, &id) == ZERO_INVALID_ARGUMENT);
  EXPECT(strstr(zero_last_error(), "use_muon") != NULL);
  EXPECT(zero_engine_num_params(fresh_engine, &count) == ZERO_OK && count == 3);
  /* 1.16: the memory estimate reads the same struct by the same rule. */
  {
    zero_memory_estimate e = ZERO_MEMORY_ESTIMATE_INIT;
    init.name = "p_estimate";
    init.ndim = 2;
    init.use_muon = ZERO_MUON_AUTO;
    fill(&init, size, kFirstDesc, 0, 0);
    EXPECT(zero_estimate_memory_params("{}", 1, &buf.desc, 1, 1, 0, &e) == ZERO_OK &&
           e.trainable_numel == 12);
    fill(&init, size, size + EXTRA, 0, 0);
    EXPECT(zero_estimate_memory_params("{}", 1, &buf.desc, 1, 1, 0, &e) == ZERO_OK);
    fill(&init, size, size + EXTRA, 0, 1);
    EXPECT(refused(zero_estimate_memory_params("{}", 1, &buf.desc, 1, 1, 0, &e),
                   "zero_param_desc", size + EXTRA));
    fill(&init, size, kFirstDesc - 1, 0, 0);
    EXPECT(refused(zero_estimate_memory_params("{}", 1, &buf.desc, 1, 1, 0, &e),
                   "zero_param_desc", kFirstDesc - 1));
  }
}

static void test_init_spec(void) {
  static const int64_t shape[2] = {4, 3};
  const size_t size = sizeof(zero_init_spec);
  const zero_init_spec init = ZERO_INIT_SPEC_INIT;
  zero_param_desc d = ZERO_PARAM_DESC_INIT;
  int32_t id = -1;
  d.ndim = 2;
  d.shape = shape;
  d.name = "s_first";
  fill(&init, size, kFirstInitSpec, 0, 0);
  EXPECT(zero_engine_register_param_init(fresh_engine, &d, &buf.spec, &id) == ZERO_OK);
  d.name = "s_newer";
  fill(&init, size, size + EXTRA, 0, 0);
  EXPECT(zero_engine_register_param_init(fresh_engine, &d, &buf.spec, &id) == ZERO_OK);
  d.name = "s_refused";
  fill(&init, size, size + EXTRA, 0, 1);
  EXPECT(refused(zero_engine_register_param_init(fresh_engine, &d, &buf.spec, &id),
                 "zero_init_spec", size + EXTRA));
  fill(&init, size, kFirstInitSpec - 1, 0, 0);
  EXPECT(refused(zero_engine_register_param_init(fresh_engine, &d, &buf.spec, &id),
                 "zero_init_spec", kFirstInitSpec - 1));
}

static void test_load_options(void) {
  const zero_load_options init = ZERO_LOAD_OPTIONS_INIT;
  const size_t size = sizeof(zero_load_options);
  const char* dir = "/nonexistent/zero_abi_struct_size";
  /* Accepted options get as far as the missing checkpoint. */
  fill(&init, size, kFirstLoad, 0, 0);
  EXPECT(zero_engine_load(engine, dir, NULL, &buf.load) == ZERO_NOT_FOUND);
  fill(&init, size, size + EXTRA, 0, 0);
  EXPECT(zero_engine_load(engine, dir, NULL, &buf.load) == ZERO_NOT_FOUND);
  fill(&init, size, size + EXTRA, 0, 1);
  EXPECT(refused(zero_engine_load(engine, dir, NULL, &buf.load), "zero_load_options",
                 size + EXTRA));
  fill(&init, size, kFirstLoad - 1, 0, 0);
  EXPECT(refused(zero_engine_load(engine, dir, NULL, &buf.load), "zero_load_options",
                 kFirstLoad - 1));
}

/* Accepted options save (synchronously, every tag kept) into a scratch dir. */
static void test_save_options(void) {
  const zero_save_options init = ZERO_SAVE_OPTIONS_INIT;
  const size_t size = sizeof(zero_save_options);
  char dir[512];
  const char* t = getenv("TEST_TMPDIR");
  snprintf(dir, sizeof(dir), "%s/zero_abi_struct_size_save", t ? t : "/tmp");
  fill(&init, size, kFirstSave, 0, 0);
  EXPECT(zero_engine_save_with(engine, dir, "a", &buf.save) == ZERO_OK);
  fill(&init, size, size + EXTRA, 0, 0);
  EXPECT(zero_engine_save_with(engine, dir, "b", &buf.save) == ZERO_OK);
  fill(&init, size, size + EXTRA, 0, 1);
  EXPECT(refused(zero_engine_save_with(engine, dir, "c", &buf.save), "zero_save_options",
                 size + EXTRA));
  fill(&init, size, kFirstSave - 1, 0, 0);
  EXPECT(refused(zero_engine_save_with(engine, dir, "c", &buf.save), "zero_save_options",
                 kFirstSave - 1));
  EXPECT(zero_engine_wait_checkpoint(engine) == ZERO_OK);
}

static void test_preemption_options(void) {
  zero_preemption_options init = ZERO_PREEMPTION_OPTIONS_INIT;
  const size_t size = sizeof(zero_preemption_options);
  init.dir = "/tmp";
  fill(&init, size, kFirstPreempt, 0, 0);
  EXPECT(zero_engine_set_preemption(engine, &buf.preempt) == ZERO_OK);
  EXPECT(zero_engine_set_preemption(engine, NULL) == ZERO_OK);
  fill(&init, size, size + EXTRA, 0, 0);
  EXPECT(zero_engine_set_preemption(engine, &buf.preempt) == ZERO_OK);
  EXPECT(zero_engine_set_preemption(engine, NULL) == ZERO_OK);
  fill(&init, size, size + EXTRA, 0, 1);
  EXPECT(refused(zero_engine_set_preemption(engine, &buf.preempt), "zero_preemption_options",
                 size + EXTRA));
  fill(&init, size, kFirstPreempt - 1, 0, 0);
  EXPECT(refused(zero_engine_set_preemption(engine, &buf.preempt), "zero_preemption_options",
                 kFirstPreempt - 1));
}

static void test_safetensors_options(void) {
  const zero_safetensors_options init = ZERO_SAFETENSORS_OPTIONS_INIT;
  const size_t size = sizeof(zero_safetensors_options);
  const char* path = "/nonexistent/zero_abi_struct_size.safetensors";
  /* Accepted options get as far as the missing file. */
  fill(&init, size, kFirstSafetensors, 0, 0);
  EXPECT(zero_engine_load_safetensors(engine, path, &buf.st) == ZERO_NOT_FOUND);
  fill(&init, size, size + EXTRA, 0, 0);
  EXPECT(zero_engine_load_safetensors(engine, path, &buf.st) == ZERO_NOT_FOUND);
  fill(&init, size, size + EXTRA, 0, 1);
  EXPECT(refused(zero_engine_load_safetensors(engine, path, &buf.st), "zero_safetensors_options",
                 size + EXTRA));
  fill(&init, size, kFirstSafetensors - 1, 0, 0);
  EXPECT(refused(zero_engine_load_safetensors(engine, path, &buf.st), "zero_safetensors_options",
                 kFirstSafetensors - 1));
}

static void test_step_info(void) {
  const zero_step_info init = ZERO_STEP_INFO_INIT;
  const size_t size = sizeof(zero_step_info);
  fill(&init, size, kFirstStep, kFirstStep + EXTRA, 0);
  EXPECT(zero_engine_step(engine, &buf.step) == ZERO_OK);
  EXPECT(buf.step.boundary == 1 && buf.step.global_step >= 1 && buf.step.lr > 0.0);
  EXPECT(all(kFirstStep, kFirstStep + EXTRA, 0xAB)); /* nothing past struct_size */
  fill(&init, size, size + EXTRA, 0, 0);
  EXPECT(zero_engine_step(engine, &buf.step) == ZERO_OK);
  EXPECT(buf.step.struct_size == size + EXTRA && buf.step.boundary == 1);
  EXPECT(all(size, size + EXTRA, 0)); /* the unknown tail is left alone */
  fill(&init, size, size + EXTRA, 0, 1);
  EXPECT(refused(zero_engine_step(engine, &buf.step), "zero_step_info", size + EXTRA));
  EXPECT(buf.step.boundary == 0 && buf.step.global_step == 0); /* not written */
  fill(&init, size, kFirstStep - 1, 0, 0);
  EXPECT(refused(zero_engine_step(engine, &buf.step), "zero_step_info", kFirstStep - 1));
}

static void test_stats(void) {
  const zero_stats init = ZERO_STATS_INIT;
  const size_t size = sizeof(zero_stats);
  /* A 1.0 client: its struct ends at micro_step; what follows is not its. */
  fill(&init, size, kFirstStats, size + EXTRA, 0);
  EXPECT(kFirstStats < size);
  EXPECT(zero_engine_stats(engine, &buf.stats) == ZERO_OK);
  EXPECT(buf.stats.world_size == 1 && buf.stats.trainable_numel == 12 &&
         buf.stats.global_step >= 1);
  EXPECT(all(kFirstStats, size + EXTRA, 0xAB));
  /* Today's size. */
  fill(&init, size, size, size + EXTRA, 0);
  EXPECT(zero_engine_stats(engine, &buf.stats) == ZERO_OK);
  EXPECT(buf.stats.global_step >= 1 && buf.stats.sent_bytes_allgather == 0 &&
         buf.stats.nvme_uring == 0);
  EXPECT(all(size, size + EXTRA, 0xAB));
  /* A newer client. */
  fill(&init, size, size + EXTRA, 0, 0);
  EXPECT(zero_engine_stats(engine, &buf.stats) == ZERO_OK);
  EXPECT(buf.stats.struct_size == size + EXTRA && buf.stats.global_step >= 1);
  EXPECT(all(size, size + EXTRA, 0));
  fill(&init, size, size + EXTRA, 0, 1);
  EXPECT(refused(zero_engine_stats(engine, &buf.stats), "zero_stats", size + EXTRA));
  EXPECT(buf.stats.world_size == 0); /* not written */
  fill(&init, size, kFirstStats - 1, 0, 0);
  EXPECT(refused(zero_engine_stats(engine, &buf.stats), "zero_stats", kFirstStats - 1));
  fill(&init, size, 8, 0, 0);
  EXPECT(refused(zero_engine_stats(engine, &buf.stats), "zero_stats", 8));
}

static void test_link_stats(void) {
  const zero_link_stats init = ZERO_LINK_STATS_INIT;
  const size_t size = sizeof(zero_link_stats);
  EXPECT(kFirstLinks == size);
  fill(&init, size, size, size + EXTRA, 0);
  EXPECT(zero_engine_link_stats(engine, &buf.links) == ZERO_OK);
  /* One rank: one node of one rank, nothing sent. */
  EXPECT(buf.links.nodes == 1 && buf.links.node == 0 && buf.links.ranks_per_node == 1 &&
         buf.links.replicas == 1 && buf.links.inter_bytes_allgather == 0);
  EXPECT(all(size, size + EXTRA, 0xAB));
  fill(&init, size, size + EXTRA, 0, 0);
  EXPECT(zero_engine_link_stats(engine, &buf.links) == ZERO_OK && buf.links.nodes == 1);
  EXPECT(all(size, size + EXTRA, 0));
  fill(&init, size, size + EXTRA, 0, 1);
  EXPECT(refused(zero_engine_link_stats(engine, &buf.links), "zero_link_stats", size + EXTRA));
  EXPECT(buf.links.nodes == 0); /* not written */
  fill(&init, size, kFirstLinks - 1, 0, 0);
  EXPECT(refused(zero_engine_link_stats(engine, &buf.links), "zero_link_stats",
                 kFirstLinks - 1));
}

static void test_device_info(void) {
  const zero_device_info init = ZERO_DEVICE_INFO_INIT;
  const size_t size = sizeof(zero_device_info);
  EXPECT(kFirstDevice == 24 && size == 56); /* the memory fields appended in 1.5 */
  /* The first published size gets its prefix only. */
  fill(&init, size, kFirstDevice, size + EXTRA, 0);
  EXPECT(zero_engine_device(engine, &buf.device) == ZERO_OK && buf.device.host_accessible == 1);
  EXPECT(all(kFirstDevice, size + EXTRA, 0xAB));
  fill(&init, size, size, size + EXTRA, 0);
  buf.device.kind = 77;
  EXPECT(zero_engine_device(engine, &buf.device) == ZERO_OK);
  /* The default device: host memory, DLPack's kDLCPU. */
  EXPECT(buf.device.kind == ZERO_DEVICE_CPU && buf.device.ordinal == 0 &&
         buf.device.host_accessible == 1 && buf.device.dlpack_device_type == 1);
  /* A finalized engine holds memory; nothing pinned on the CPU device. */
  EXPECT(buf.device.device_bytes > 0 && buf.device.device_peak_bytes >= buf.device.device_bytes &&
         buf.device.pinned_host_bytes == 0);
  EXPECT(all(size, size + EXTRA, 0xAB));
  fill(&init, size, size + EXTRA, 0, 0);
  EXPECT(zero_engine_device(engine, &buf.device) == ZERO_OK && buf.device.host_accessible == 1);
  EXPECT(all(size, size + EXTRA, 0));
  fill(&init, size, size + EXTRA, 0, 1);
  EXPECT(refused(zero_engine_device(engine, &buf.device), "zero_device_info", size + EXTRA));
  EXPECT(buf.device.host_accessible == 0); /* not written */
  fill(&init, size, kFirstDevice - 1, 0, 0);
  EXPECT(refused(zero_engine_device(engine, &buf.device), "zero_device_info", kFirstDevice - 1));
}

static void test_param_info(void) {
  const zero_param_info init = ZERO_PARAM_INFO_INIT;
  const size_t size = sizeof(zero_param_info);
  fill(&init, size, kFirstInfo, kFirstInfo + EXTRA, 0);
  EXPECT(zero_engine_param_info(engine, 0, &buf.info) == ZERO_OK);
  EXPECT(buf.info.ndim == 2 && buf.info.shape[1] == 3 && buf.info.shape[2] == 0 &&
         buf.info.trainable == 1 && strcmp(buf.info.name, "w") == 0);
  EXPECT(all(kFirstInfo, kFirstInfo + EXTRA, 0xAB));
  fill(&init, size, size + EXTRA, 0, 0);
  EXPECT(zero_engine_param_info(engine, 0, &buf.info) == ZERO_OK && buf.info.ndim == 2);
  EXPECT(all(size, size + EXTRA, 0));
  fill(&init, size, size + EXTRA, 0, 1);
  EXPECT(refused(zero_engine_param_info(engine, 0, &buf.info), "zero_param_info", size + EXTRA));
  EXPECT(buf.info.ndim == 0 && buf.info.name == NULL); /* not written */
  fill(&init, size, kFirstInfo - 1, 0, 0);
  EXPECT(refused(zero_engine_param_info(engine, 0, &buf.info), "zero_param_info",
                 kFirstInfo - 1));
}

int main(void) {
  zero_config cfg = ZERO_CONFIG_INIT;
  zero_param_desc d = ZERO_PARAM_DESC_INIT;
  int64_t shape[2] = {4, 3};
  int32_t id = -1;
  void* g = NULL;

  EXPECT(sizeof(buf) >= sizeof(zero_stats) + EXTRA);
  EXPECT(ZERO_MAX_DIMS == 8);
  EXPECT(sizeof(((zero_param_info*)0)->shape) == ZERO_MAX_DIMS * sizeof(int64_t));
  EXPECT(zero_comm_create_self(&comm) == ZERO_OK);
  EXPECT(zero_engine_create(&cfg, comm, &fresh_engine) == ZERO_OK);
  EXPECT(zero_engine_create(&cfg, comm, &engine) == ZERO_OK);
  d.name = "w";
  d.ndim = 2;
  d.shape = shape;
  EXPECT(zero_engine_register_param(engine, &d, &id) == ZERO_OK);
  EXPECT(zero_engine_finalize(engine) == ZERO_OK);
  EXPECT(zero_engine_grad_buffer(engine, 0, &g) == ZERO_OK);
  ((float*)g)[0] = 1.0f;
  EXPECT(zero_engine_grad_ready(engine, 0) == ZERO_OK);

  test_config();
  test_param_desc();
  test_step_info(); /* ends the accumulation the gradient above began */
  test_load_options();
  test_save_options();
  test_preemption_options();
  test_safetensors_options();
  test_stats();
  test_link_stats();
  test_device_info();
  test_param_info();
  test_init_spec();

  zero_engine_destroy(fresh_engine);
  zero_engine_destroy(engine);
  zero_comm_destroy(comm);
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
