/* A C port that gathers its params once and never releases them (pointers
 * set up front, as in an llm.c-style trainer) must not train on stale
 * weights: zero_engine_step at the accumulation boundary refuses, naming
 * the params, while a stage-3 gather (or a gather_into copy, any stage) is
 * outstanding; it changes nothing, so releasing and stepping again gives
 * exactly what a release/gather loop gives. Stages 0-2's plain gather is the
 * resident copy, updated in place: holding it is right there. Frozen params
 * never change and never block. Thread ranks 1, 2 and 3; plain C99 against
 * zero_c.h only. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero_c.h"

#define N 1200 /* "w": above the persistence threshold below */
#define NB 8   /* "b": persistent at stage 3 */
#define NF 16  /* "f": frozen */

static int g_failed = 0;

#define FAIL(...)                                 \
  do {                                            \
    fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                 \
    fprintf(stderr, "\n");                        \
    return 1;                                     \
  } while (0)

#define OK(call)                                                            \
  do {                                                                      \
    zero_status s_ = (call);                                                \
    if (s_ != ZERO_OK) FAIL("%s: %s: %s", #call, zero_status_string(s_),   \
                            zero_last_error());                             \
  } while (0)

static const char* Config(char* out, int stage, int gas) {
  snprintf(out, 256,
           "{\"steps_per_print\": 0, \"gradient_accumulation_steps\": %d, "
           "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.05}}, "
           "\"zero_optimization\": {\"stage\": %d, "
           "\"stage3_param_persistence_threshold\": 100}}",
           gas, stage);
  return out;
}

/* Registers w, b (trainable) and f (frozen) with fixed init values. */
static int Make(zero_comm_t* comm, const char* json, zero_engine_t** e) {
  float init_w[N], init_b[NB], init_f[NF];
  int64_t shape_w[2] = {40, 30}, shape_b[1] = {NB}, shape_f[1] = {NF};
  zero_param_desc d = ZERO_PARAM_DESC_INIT;
  int32_t id = -1;
  int i;
  for (i = 0; i < N; ++i) init_w[i] = (float)((i * 37) % 101 - 50) / 64.0f;
  for (i = 0; i < NB; ++i) init_b[i] = (float)i / 8.0f;
  for (i = 0; i < NF; ++i) init_f[i] = (float)i;
  OK(zero_engine_create_json(json, comm, e));
  d.name = "w"; d.ndim = 2; d.shape = shape_w; d.init = init_w;
  OK(zero_engine_register_param(*e, &d, &id));
  d.name = "b"; d.ndim = 1; d.shape = shape_b; d.init = init_b;
  OK(zero_engine_register_param(*e, &d, &id));
  d.name = "f"; d.shape = shape_f; d.init = init_f; d.trainable = 0;
  OK(zero_engine_register_param(*e, &d, &id));
  OK(zero_engine_finalize(*e));
  return 0;
}

/* A gradient for param id at step t on rank r (fp32 engine). */
static int HandIn(zero_engine_t* e, int32_t id, int64_t n, int t, int r) {
  float* g = NULL;
  int64_t i;
  OK(zero_engine_grad_buffer(e, id, (void**)&g));
  for (i = 0; i < n; ++i) g[i] = (float)((i * 13 + t * 7 + r * 3 + id) % 17 - 8) / 32.0f;
  OK(zero_engine_grad_ready(e, id));
  return 0;
}

static int Grads(zero_engine_t* e, int t, int r) {
  return HandIn(e, 0, N, t, r) || HandIn(e, 1, NB, t, r);
}

static int ExpectStep(zero_engine_t* e, zero_status want, const char* needle) {
  zero_status s = zero_engine_step(e, NULL);
  if (s != want) FAIL("step: %s, wanted %s (%s)", zero_status_string(s),
                      zero_status_string(want), zero_last_error());
  if (needle != NULL && strstr(zero_last_error(), needle) == NULL) {
    FAIL("step's error '%s' lacks '%s'", zero_last_error(), needle);
  }
  return 0;
}

/* Stage 3: the port (gather once, never release, step) is refused, naming
 * both trainable params (the persistent one too: which params persist is the
 * engine's choice, so the rule does not depend on it), not the frozen one.
 * After releasing, the same step runs, and the values equal engine B's, a
 * release/gather loop's, bit for bit, over three steps. */
static int Stage3Port(zero_comm_t* ca, zero_comm_t* cb, int rank) {
  char json[256];
  zero_engine_t *a = NULL, *b = NULL;
  void *w = NULL, *bias = NULL, *f = NULL, *wb = NULL;
  float wa_vals[N];
  int t;
  if (Make(ca, Config(json, 3, 1), &a) || Make(cb, Config(json, 3, 1), &b)) return 1;
  OK(zero_engine_gather(a, 0, &w));
  OK(zero_engine_gather(a, 1, &bias));
  OK(zero_engine_gather(a, 2, &f));
  for (t = 0; t < 3; ++t) {
    if (Grads(a, t, rank)) return 1;
    if (ExpectStep(a, ZERO_FAILED_PRECONDITION, "'w' (1), 'b' (1)")) return 1;
    if (strstr(zero_last_error(), "'f'") != NULL) FAIL("names the frozen param: %s", zero_last_error());
    /* The fix: release, step, gather again. */
    OK(zero_engine_release(a, 0));
    OK(zero_engine_release(a, 1));
    OK(zero_engine_step(a, NULL));
    OK(zero_engine_gather(a, 0, &w));
    OK(zero_engine_gather(a, 1, &bias));
    /* B: the release/gather loop. */
    OK(zero_engine_gather(b, 0, &wb));
    OK(zero_engine_release(b, 0));
    if (Grads(b, t, rank)) return 1;
    OK(zero_engine_step(b, NULL));
    OK(zero_engine_gather(b, 0, &wb));
    memcpy(wa_vals, w, sizeof wa_vals);
    if (memcmp(wa_vals, wb, sizeof wa_vals) != 0) FAIL("step %d: A's weights differ from B's", t);
    OK(zero_engine_release(b, 0));
    if (t == 0) {
      float start = (float)((5 * 37) % 101 - 50) / 64.0f;
      if (wa_vals[5] == start) FAIL("w[5] did not move from its init value");
    }
  }
  zero_engine_destroy(a);
  zero_engine_destroy(b);
  return 0;
}

/* Mid-accumulation a held gather is right (nothing changes until the
 * boundary); the boundary refuses it. */
static int Stage3Accumulation(zero_comm_t* c, int rank) {
  char json[256];
  zero_engine_t* e = NULL;
  void* w = NULL;
  if (Make(c, Config(json, 3, 2), &e)) return 1;
  OK(zero_engine_gather(e, 0, &w));
  if (Grads(e, 0, rank)) return 1;
  OK(zero_engine_step(e, NULL));
  if (Grads(e, 1, rank)) return 1;
  if (ExpectStep(e, ZERO_FAILED_PRECONDITION, "still gathered")) return 1;
  OK(zero_engine_release(e, 0));
  OK(zero_engine_step(e, NULL));
  zero_engine_destroy(e);
  return 0;
}

/* Stages 0-2: a held gather is the resident copy, updated in place (equal
 * to the masters after the step, fp32); a held gather_into copy is refused. */
static int BelowStage3(zero_comm_t* c, int stage, int rank) {
  char json[256];
  zero_engine_t* e = NULL;
  float *w = NULL, master[N], copy[N];
  if (Make(c, Config(json, stage, 1), &e)) return 1;
  OK(zero_engine_gather(e, 0, (void**)&w));
  if (Grads(e, 0, rank)) return 1;
  OK(zero_engine_step(e, NULL));
  OK(zero_engine_read_master(e, 0, master));
  if (memcmp(w, master, sizeof master) != 0) FAIL("stage %d: the held pointer is stale", stage);
  OK(zero_engine_gather_into(e, 0, ZERO_DTYPE_F32, copy, sizeof copy));
  if (Grads(e, 1, rank)) return 1;
  if (ExpectStep(e, ZERO_FAILED_PRECONDITION, "'w' (1)")) return 1;
  OK(zero_engine_release(e, 0)); /* ends the gather_into (the innermost) */
  OK(zero_engine_step(e, NULL));
  OK(zero_engine_release(e, 0));
  zero_engine_destroy(e);
  return 0;
}

typedef struct {
  zero_comm_t *a, *b;
  int rank;
  int failed;
} Rank;

static void* RunRank(void* arg) {
  Rank* r = (Rank*)arg;
  int stage;
  r->failed = Stage3Port(r->a, r->b, r->rank) || Stage3Accumulation(r->a, r->rank);
  for (stage = 0; stage < 3 && !r->failed; ++stage) r->failed = BelowStage3(r->a, stage, r->rank);
  return NULL;
}

int main(void) {
  int world, r;
  for (world = 1; world <= 3; ++world) {
    zero_comm_t *ca[3], *cb[3];
    pthread_t th[3];
    Rank ranks[3];
    if (zero_comm_create_threads(world, ca) != ZERO_OK ||
        zero_comm_create_threads(world, cb) != ZERO_OK) {
      fprintf(stderr, "zero_comm_create_threads: %s\n", zero_last_error());
      return 1;
    }
    for (r = 0; r < world; ++r) {
      ranks[r].a = ca[r];
      ranks[r].b = cb[r];
      ranks[r].rank = r;
      ranks[r].failed = 0;
      pthread_create(&th[r], NULL, RunRank, &ranks[r]);
    }
    for (r = 0; r < world; ++r) {
      pthread_join(th[r], NULL);
      if (ranks[r].failed) {
        fprintf(stderr, "world %d rank %d failed\n", world, r);
        g_failed = 1;
      }
      zero_comm_destroy(ca[r]);
      zero_comm_destroy(cb[r]);
    }
  }
  if (!g_failed) printf("stale gathers refused at worlds 1-3, stages 0-3\n");
  return g_failed;
}
