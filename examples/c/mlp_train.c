/* Trains a small MLP through the zero C ABI only: the program owns the math
 * (hand-written forward and backward), zero owns the model state.
 *
 *   mlp_train [--config ds_config.json] [--stage S] [--steps N]
 *             [--hidden H] [--lr LR] [--dump FILE] [--quiet]
 *             [--save-dir DIR --save-at K] [--resume DIR]
 *             [--init-spec] [--load FILE.safetensors]
 *
 * --save-at K saves a checkpoint DIR/stepK after K steps; --resume DIR loads
 * DIR/latest (any world size or stage) and runs the steps that remain.
 *
 * Models larger than one rank (C ABI 1.4): --init-spec registers the params
 * with init specs (torch's nn.Linear defaults: kaiming_uniform(a=sqrt(5))
 * weights, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) biases) instead of host
 * arrays, so no rank ever materializes the model; each rank draws only the
 * elements it holds, the same at every world size. --load FILE.safetensors
 * sets the params from pretrained weights after finalize (each rank reads
 * only what it holds).
 *
 * Under mpirun every rank takes its slice of each global batch. The data, the
 * initial values and the arithmetic (double precision, fixed loop order) are
 * specified exactly so that the Python and Rust examples reproduce the same
 * bits: see "Reproducible parts" below.
 */
/* clock_gettime under -std=c99 (without -fopenmp, which implies it). */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zero_c.h"

/* Init specs and zero_engine_load_safetensors came with 1.4; built against
 * an older header the example is the 1.0 one. */
#if ZERO_VERSION_MAJOR > 1 || (ZERO_VERSION_MAJOR == 1 && ZERO_VERSION_MINOR >= 4)
#define MLP_HAS_1_4 1
#else
#define MLP_HAS_1_4 0
#endif

#define CHECK(call)                                                        \
  do {                                                                     \
    zero_status st_ = (call);                                              \
    if (st_ != ZERO_OK) {                                                  \
      fprintf(stderr, "mlp_train: %s failed: %s: %s\n", #call,             \
              zero_status_string(st_), zero_last_error());                 \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

/* ---- Reproducible parts -------------------------------------------------
 * splitmix64; uniform(-1, 1) = ((x >> 11) * 2^-53) * 2 - 1 in double.
 * Inputs: N_SAMPLES x IN, drawn row-major from seed 7.
 * Targets: t[j] = sin(0.3 * sum_i x[i] * (((i + j) % 5) - 2)), i ascending.
 * Params, in order fc1.weight [H, IN], fc1.bias [H], fc2.weight [OUT, H],
 * fc2.bias [OUT], drawn from seed 42 as uniform(-1, 1) / sqrt(fan_in),
 * rounded to float.
 * Step s uses global batch rows (s * GLOBAL_BATCH + k) % N_SAMPLES for
 * k in [0, GLOBAL_BATCH); rank r of W takes k in [r*B/W, (r+1)*B/W).
 * Loss per sample: 0.5 * sum_j (y_j - t_j)^2; the rank's loss is the mean
 * over its rows; gradients are of that mean, divided by the accumulation
 * steps, times the loss scale, rounded to the working dtype. */
#define IN 16
#define OUT 4
#define N_SAMPLES 240
#define GLOBAL_BATCH 48

static uint64_t splitmix64(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double uniform(uint64_t* s) {
  return (double)(splitmix64(s) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;
}

/* fp16 / bf16 <-> float for the working copy (round to nearest even). */
static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  float f;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp == 0) {
    f = (float)man * 5.9604644775390625e-08f;
    return sign ? -f : f;
  } else {
    u = sign | ((exp + 112) << 23) | (man << 13);
  }
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t float_to_half(float f) {
  uint32_t u, sign, abs;
  memcpy(&u, &f, 4);
  sign = (u >> 16) & 0x8000u;
  abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    uint32_t e = abs >> 23, m = (abs & 0x7fffffu) | 0x800000u, d = 126 - e, q, rem, hf;
    if (abs < 0x33000000u) return (uint16_t)sign;
    q = m >> d;
    rem = m & ((1u << d) - 1);
    hf = 1u << (d - 1);
    if (rem > hf || (rem == hf && (q & 1))) q++;
    return (uint16_t)(sign | q);
  } else {
    uint32_t h = (abs - 0x38000000u) >> 13, rem = abs & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
}
static float bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
static double load(const void* p, zero_dtype t, int64_t i) {
  if (t == ZERO_DTYPE_F32) return ((const float*)p)[i];
  if (t == ZERO_DTYPE_F16) return half_to_float(((const uint16_t*)p)[i]);
  return bf16_to_float(((const uint16_t*)p)[i]);
}
static void store(void* p, zero_dtype t, int64_t i, double v) {
  if (t == ZERO_DTYPE_F32) ((float*)p)[i] = (float)v;
  else if (t == ZERO_DTYPE_F16) ((uint16_t*)p)[i] = float_to_half((float)v);
  else ((uint16_t*)p)[i] = float_to_bf16((float)v);
}

static char* read_file(const char* path) {
  FILE* f = fopen(path, "rb");
  long n;
  char* s;
  if (!f) {
    fprintf(stderr, "mlp_train: cannot open %s\n", path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  s = (char*)malloc((size_t)n + 1);
  if (fread(s, 1, (size_t)n, f) != (size_t)n) exit(1);
  s[n] = 0;
  fclose(f);
  return s;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const char *config_path = NULL, *dump = NULL, *save_dir = NULL, *resume = NULL;
  int stage = 0, steps = 30, hidden = 32, quiet = 0, save_at = -1, start = 0, i;
  float lr = 1e-2f;
  zero_comm_t* comm = NULL;
  zero_engine_t* engine = NULL;
  int32_t rank, world, ids[4];
  zero_dtype dtype;
  static double x[N_SAMPLES][IN], t[N_SAMPLES][OUT];
  uint64_t seed = 7;
  double first_loss = 0, last_loss = 0, t0 = 0, step_time = 0;
  int64_t shapes[4][2];
  int64_t numel[4];
  const char* names[4] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
  int ndims[4] = {2, 1, 2, 1};
  int gas;
  int init_spec = 0;
  const char* load_path = NULL;

  for (i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc) config_path = argv[++i];
    else if (!strcmp(argv[i], "--stage") && i + 1 < argc) stage = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--hidden") && i + 1 < argc) hidden = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--lr") && i + 1 < argc) lr = (float)atof(argv[++i]);
    else if (!strcmp(argv[i], "--dump") && i + 1 < argc) dump = argv[++i];
    else if (!strcmp(argv[i], "--quiet")) quiet = 1;
    else if (!strcmp(argv[i], "--save-dir") && i + 1 < argc) save_dir = argv[++i];
    else if (!strcmp(argv[i], "--save-at") && i + 1 < argc) save_at = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--resume") && i + 1 < argc) resume = argv[++i];
#if MLP_HAS_1_4
    else if (!strcmp(argv[i], "--init-spec")) init_spec = 1;
    else if (!strcmp(argv[i], "--load") && i + 1 < argc) load_path = argv[++i];
#endif
    else {
      fprintf(stderr, "usage: %s [--config F] [--stage S] [--steps N] [--hidden H] [--lr LR] [--dump F] [--quiet] [--save-dir D --save-at K] [--resume D]%s\n", argv[0],
              MLP_HAS_1_4 ? " [--init-spec] [--load F.safetensors]" : "");
      return 2;
    }
  }
  if (zero_version() / 10000 != ZERO_VERSION_MAJOR) {
    fprintf(stderr, "mlp_train: libzero_c major version %d, header %d\n",
            zero_version() / 10000, ZERO_VERSION_MAJOR);
    return 1;
  }
  if (getenv("OMPI_COMM_WORLD_SIZE")) {
    CHECK(zero_comm_create_mpi(NULL, &comm));
  } else {
    CHECK(zero_comm_create_self(&comm));
  }
  CHECK(zero_comm_rank(comm, &rank));
  CHECK(zero_comm_size(comm, &world));
  if (GLOBAL_BATCH % world != 0) {
    fprintf(stderr, "mlp_train: world size %d must divide %d\n", world, GLOBAL_BATCH);
    return 1;
  }
  if (config_path) {
    char* text = read_file(config_path);
    CHECK(zero_engine_create_json(text, comm, &engine));
    free(text);
  } else {
    zero_config cfg = ZERO_CONFIG_INIT;
    cfg.stage = stage;
    cfg.lr = lr;
    cfg.steps_per_print = quiet ? 0 : 10;
    CHECK(zero_engine_create(&cfg, comm, &engine));
  }
  gas = 1; /* this example does not accumulate: one micro-step per step */
  CHECK(zero_engine_dtype(engine, &dtype));

  /* Data. */
  for (i = 0; i < N_SAMPLES; ++i) {
    int a, j;
    for (a = 0; a < IN; ++a) x[i][a] = uniform(&seed);
    for (j = 0; j < OUT; ++j) {
      double s = 0;
      for (a = 0; a < IN; ++a) s += x[i][a] * (double)(((a + j) % 5) - 2);
      t[i][j] = sin(0.3 * s);
    }
  }
  /* Params. */
  shapes[0][0] = hidden; shapes[0][1] = IN;
  shapes[1][0] = hidden;
  shapes[2][0] = OUT; shapes[2][1] = hidden;
  shapes[3][0] = OUT;
  numel[0] = (int64_t)hidden * IN; numel[1] = hidden;
  numel[2] = (int64_t)OUT * hidden; numel[3] = OUT;
  {
    uint64_t ps = 42;
    double fan_in[4] = {IN, IN, 0, 0};
    fan_in[2] = hidden; fan_in[3] = hidden;
    for (i = 0; i < 4; ++i) {
      int64_t k;
      float* init;
      zero_param_desc d = ZERO_PARAM_DESC_INIT;
      d.name = names[i];
      d.ndim = ndims[i];
      d.shape = shapes[i];
      d.dtype = dtype;
#if MLP_HAS_1_4
      if (init_spec) {
        /* Described, not copied: nothing of numel size on any rank. */
        zero_init_spec spec = ZERO_INIT_SPEC_INIT;
        spec.seed = 42;
        if (ndims[i] == 2) {
          spec.kind = ZERO_INIT_KAIMING_UNIFORM; /* a = sqrt(5), fan_in = shape[1] */
        } else {
          spec.kind = ZERO_INIT_FAN_IN_UNIFORM;
          spec.fan_in = (int64_t)fan_in[i];
        }
        CHECK(zero_engine_register_param_init(engine, &d, &spec, &ids[i]));
        continue;
      }
#endif
      init = (float*)malloc(sizeof(float) * (size_t)numel[i]);
      for (k = 0; k < numel[i]; ++k) init[k] = (float)(uniform(&ps) / sqrt(fan_in[i]));
      d.init = init;
      CHECK(zero_engine_register_param(engine, &d, &ids[i]));
      free(init);
    }
  }
  CHECK(zero_engine_finalize(engine));
#if MLP_HAS_1_4
  if (load_path) {
    /* Pretrained weights: names must match the params (fc1.weight, ...). */
    CHECK(zero_engine_load_safetensors(engine, load_path, NULL)); /* collective */
  }
#else
  (void)init_spec;
  (void)load_path;
#endif
  if (resume) {
    zero_stats st = ZERO_STATS_INIT;
    CHECK(zero_engine_load(engine, resume, NULL, NULL)); /* latest, defaults */
    CHECK(zero_engine_stats(engine, &st));
    start = (int)((st.global_step + st.skipped_steps) * gas);
  }

  {
    const int local = GLOBAL_BATCH / world;
    double* h = (double*)malloc(sizeof(double) * (size_t)local * hidden);
    double* dh = (double*)malloc(sizeof(double) * (size_t)hidden);
    double* dy = (double*)malloc(sizeof(double) * (size_t)local * OUT);
    double* g[4];
    int s;
    for (i = 0; i < 4; ++i) g[i] = (double*)malloc(sizeof(double) * (size_t)numel[i]);
    t0 = now_s();
    for (s = start; s < steps; ++s) {
      void *w1, *b1, *w2, *b2;
      double loss = 0, scale;
      float lsum;
      int m, j, a, k;
      zero_step_info info = ZERO_STEP_INFO_INIT;
      CHECK(zero_engine_loss_scale(engine, &scale));
      CHECK(zero_engine_gather(engine, ids[0], &w1));
      CHECK(zero_engine_gather(engine, ids[1], &b1));
      CHECK(zero_engine_gather(engine, ids[2], &w2));
      CHECK(zero_engine_gather(engine, ids[3], &b2));
      for (i = 0; i < 4; ++i) memset(g[i], 0, sizeof(double) * (size_t)numel[i]);
      /* Forward. */
      for (m = 0; m < local; ++m) {
        int row = (s * GLOBAL_BATCH + rank * local + m) % N_SAMPLES;
        for (j = 0; j < hidden; ++j) {
          double z = load(b1, dtype, j);
          for (a = 0; a < IN; ++a) z += load(w1, dtype, (int64_t)j * IN + a) * x[row][a];
          h[m * hidden + j] = tanh(z);
        }
        for (k = 0; k < OUT; ++k) {
          double y = load(b2, dtype, k);
          for (j = 0; j < hidden; ++j) y += load(w2, dtype, (int64_t)k * hidden + j) * h[m * hidden + j];
          dy[m * OUT + k] = y - t[row][k];
          loss += 0.5 * dy[m * OUT + k] * dy[m * OUT + k];
        }
      }
      loss /= local;
      /* Backward of the mean loss. */
      for (m = 0; m < local; ++m) {
        int row = (s * GLOBAL_BATCH + rank * local + m) % N_SAMPLES;
        for (k = 0; k < OUT; ++k) {
          double d = dy[m * OUT + k] / local;
          g[3][k] += d;
          for (j = 0; j < hidden; ++j) g[2][(int64_t)k * hidden + j] += d * h[m * hidden + j];
        }
        for (j = 0; j < hidden; ++j) {
          double d = 0;
          for (k = 0; k < OUT; ++k) d += dy[m * OUT + k] / local * load(w2, dtype, (int64_t)k * hidden + j);
          dh[j] = d * (1.0 - h[m * hidden + j] * h[m * hidden + j]);
          g[1][j] += dh[j];
          for (a = 0; a < IN; ++a) g[0][(int64_t)j * IN + a] += dh[j] * x[row][a];
        }
      }
      for (i = 0; i < 4; ++i) CHECK(zero_engine_release(engine, ids[i]));
      /* Hand gradients in as autograd would produce them: last layer first. */
      for (i = 3; i >= 0; --i) {
        void* gb;
        int64_t e;
        CHECK(zero_engine_grad_buffer(engine, ids[i], &gb));
        for (e = 0; e < numel[i]; ++e) store(gb, dtype, e, g[i][e] * scale / gas);
        CHECK(zero_engine_grad_ready(engine, ids[i]));
      }
      CHECK(zero_engine_report_samples(engine, GLOBAL_BATCH));
      CHECK(zero_engine_step(engine, &info));
      lsum = (float)loss;
      CHECK(zero_comm_allreduce_sum_f32(comm, &lsum, 1));
      last_loss = lsum / world;
      if (s == start) first_loss = last_loss;
      if (save_dir && s + 1 == save_at) {
        char tag[32];
        snprintf(tag, sizeof(tag), "step%d", save_at);
        CHECK(zero_engine_save(engine, save_dir, tag)); /* collective */
      }
      if (!quiet && rank == 0 && (s % 10 == 0 || s == steps - 1)) {
        printf("step %d loss %.6f lr %.3g grad_norm %.4g%s\n", s, last_loss, info.lr,
               info.grad_norm, info.skipped ? " (skipped: overflow)" : "");
      }
    }
    step_time = (now_s() - t0) / (steps > start ? steps - start : 1);
    free(h); free(dh); free(dy);
    for (i = 0; i < 4; ++i) free(g[i]);
  }

  {
    zero_stats st;
    memset(&st, 0, sizeof(st));
    st.struct_size = sizeof(st);
    CHECK(zero_engine_stats(engine, &st));
    if (rank == 0) {
      printf("{\"example\": \"mlp_train\", \"stage\": %d, \"world\": %d, \"params\": %lld, "
             "\"first_loss\": %.6f, \"final_loss\": %.6f, \"step_ms\": %.3f, "
             "\"model_state_bytes_per_rank\": %lld, \"sent_elems_per_step\": %.0f}\n",
             st.stage, st.world_size, (long long)st.trainable_numel, first_loss, last_loss,
             step_time * 1e3,
             (long long)(st.master_bytes + st.optimizer_bytes + st.grad_bytes + st.param_bytes),
             (double)(st.sent_allgather + st.sent_reduce_scatter + st.sent_allreduce) / steps);
    }
  }
  if (dump) {
    FILE* f = NULL;
    if (rank == 0) {
      f = fopen(dump, "wb");
      if (!f) {
        fprintf(stderr, "mlp_train: cannot write %s\n", dump);
        return 1;
      }
    }
    for (i = 0; i < 4; ++i) {
      float* out = (float*)malloc(sizeof(float) * (size_t)numel[i]);
      CHECK(zero_engine_read_master(engine, ids[i], out)); /* collective */
      if (f) fwrite(out, sizeof(float), (size_t)numel[i], f);
      free(out);
    }
    if (f) fclose(f);
  }
  zero_engine_destroy(engine);
  zero_comm_destroy(comm);
  return 0;
}
