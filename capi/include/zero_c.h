/* zero_c.h - the C ABI of the zero runtime (ZeRO sharded data parallelism).
 *
 * This header is the only public interface; Python and Rust bind to it.
 * Conventions (read these first):
 *  1. Handles are opaque (zero_comm_t, zero_engine_t). Every handle has a
 *     create and a destroy call; destroy accepts NULL and does nothing.
 *  2. Every call returns a zero_status. ZERO_OK is 0. On any other value,
 *     zero_last_error() holds a message naming the problem; it is
 *     thread-local and valid until the next zero_* call on that thread.
 *  3. Every public struct begins with `size_t struct_size`; fill it from its
 *     ZERO_*_INIT macro (or zero all of it and set struct_size to its
 *     sizeof). One rule for every struct, read by the library (zero_config,
 *     zero_param_desc, zero_load_options, zero_safetensors_options,
 *     zero_init_spec) or filled by it (zero_step_info, zero_stats,
 *     zero_param_info):
 *     a. struct_size below the struct's first published size (noted at each
 *        struct; its size in the version that introduced it) is
 *        ZERO_INVALID_ARGUMENT.
 *     b. A struct_size below this library's sizeof (a client built against
 *        an older header) is a prefix: fields past it take their defaults,
 *        and the library writes only the first struct_size bytes.
 *     c. A struct_size above this library's sizeof (a client built against
 *        a newer header) is accepted only when every byte past this
 *        library's sizeof is zero, i.e. the fields this library does not
 *        know are at their defaults (as Linux's extensible-struct system
 *        calls do); otherwise ZERO_INVALID_ARGUMENT naming the struct and
 *        the size. The library never writes those bytes.
 *     Fields are only ever appended, each starting at or past the previous
 *     version's sizeof (never in its tail padding); enum values never change.
 *  4. Pointer arguments must not be NULL unless the contract says so; a NULL
 *     is reported as ZERO_INVALID_ARGUMENT, never a crash.
 *  5. Booleans are int32_t: 0 is false, anything else true.
 *  6. Memory handed out by the engine (param and gradient buffers) belongs to
 *     the engine; each call says how long the pointer stays valid.
 *  7. Calls marked COLLECTIVE must be made by every rank of the communicator,
 *     in the same order; a peer that never arrives yields ZERO_TIMEOUT after
 *     comm_timeout_seconds on every rank that did arrive.
 *  8. No C++ exception ever crosses this boundary.
 *  9. Threads: distinct engines may be used concurrently from distinct
 *     threads; calls on one engine are not thread-safe (use it from one
 *     thread at a time). Communicators likewise: one thread at a time per
 *     handle, distinct handles concurrently (zero_comm_create_threads hands
 *     out one per thread). zero_last_error is thread-local (see 2);
 *     zero_version and zero_status_string are thread-safe.
 */
#ifndef ZERO_C_H_
#define ZERO_C_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define ZERO_API __declspec(dllexport)
#else
#define ZERO_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this header. zero_version() returns the library's; a program
 * should refuse to run when the majors differ. */
#define ZERO_VERSION_MAJOR 1
#define ZERO_VERSION_MINOR 16
#define ZERO_VERSION_PATCH 0
#define ZERO_VERSION_CODE \
  (ZERO_VERSION_MAJOR * 10000 + ZERO_VERSION_MINOR * 100 + ZERO_VERSION_PATCH)

/* Most dimensions of a param (zero_param_desc.ndim, zero_param_info). */
#define ZERO_MAX_DIMS 8

/* ---- Types -------------------------------------------------------------- */

typedef struct zero_comm_t zero_comm_t;     /* a group of ranks */
typedef struct zero_engine_t zero_engine_t; /* one sharded training state */

typedef enum zero_status {
  ZERO_OK = 0,
  ZERO_INVALID_ARGUMENT = 1,   /* bad value: config key, shape, NULL, id */
  ZERO_FAILED_PRECONDITION = 2,/* call in the wrong state or order */
  ZERO_NOT_FOUND = 3,          /* unknown param name, missing file */
  ZERO_OUT_OF_MEMORY = 4,      /* allocation or live-parameter budget */
  ZERO_TIMEOUT = 5,            /* a collective's peer did not arrive */
  ZERO_IO_ERROR = 6,           /* file system failure */
  ZERO_DATA_LOSS = 7,          /* corrupt or truncated data */
  ZERO_UNIMPLEMENTED = 8,      /* feature not built in (e.g. CUDA) */
  ZERO_INTERNAL = 9,           /* a bug in zero: please report */
  ZERO_ABORTED = 10,           /* the communicator broke earlier */
  ZERO_MISMATCH = 11,          /* ranks disagree (params, config) */
  ZERO_CANCELLED = 12          /* 1.6: a progress callback asked to stop */
} zero_status;

typedef enum zero_dtype {
  ZERO_DTYPE_F32 = 0,
  ZERO_DTYPE_F16 = 1, /* IEEE half */
  ZERO_DTYPE_BF16 = 2 /* bfloat16 */
} zero_dtype;

typedef enum zero_optimizer {
  ZERO_OPTIMIZER_ADAM = 0,    /* decoupled weight decay unless adam_w_mode=0 */
  ZERO_OPTIMIZER_ADAMW = 1,   /* always decoupled weight decay */
  ZERO_OPTIMIZER_SGD = 2,     /* momentum, nesterov, L2 weight decay */
  ZERO_OPTIMIZER_LION = 3,    /* 1.13: DeepSpeed's Lion; betas from beta1, beta2 */
  ZERO_OPTIMIZER_ADAGRAD = 4, /* 1.13: DeepSpeed's Adagrad; lr 1e-2, eps 1e-10 */
  ZERO_OPTIMIZER_MUON = 5     /* 1.13: Muon on the params zero_param_desc.use_muon
                                 selects, AdamW on the rest; `momentum` is
                                 Muon's (default 0.95), lr both halves' */
} zero_optimizer;

/* Which half of the Muon optimizer updates a param (1.13,
 * zero_param_desc.use_muon); without Muon nothing changes. */
typedef enum zero_muon_use {
  ZERO_MUON_AUTO = 0, /* DeepSpeed's rule: at least 2-D, and the name holds
                         neither "embed" nor "lm_head" (any case) */
  ZERO_MUON_ON = 1,   /* Muon; the param must be at least 2-D */
  ZERO_MUON_OFF = 2   /* AdamW */
} zero_muon_use;

/* ---- Library ------------------------------------------------------------ */

/* The library's version as ZERO_VERSION_CODE would spell it. */
ZERO_API int32_t zero_version(void);

/* A static description of a status code; never NULL. */
ZERO_API const char* zero_status_string(zero_status status);

/* The message of the last failed call on this thread ("" if none). */
ZERO_API const char* zero_last_error(void);

/* ---- Communicators ------------------------------------------------------ */

/* A one-rank communicator that needs no MPI. */
ZERO_API zero_status zero_comm_create_self(zero_comm_t** out);

/* An MPI communicator. `mpi_comm` points to an MPI_Comm owned by the caller
 * (it must outlive the handle) or is NULL for MPI_COMM_WORLD. Initializes MPI
 * (MPI_THREAD_MULTIPLE) if nobody has; then zero finalizes it at exit.
 * ZERO_UNIMPLEMENTED if the library was built without MPI. */
ZERO_API zero_status zero_comm_create_mpi(const void* mpi_comm,
                                          zero_comm_t** out);

/* `world_size` communicators of one in-process group, one per thread:
 * out[r] is rank r. Each handle must be used from one thread at a time. */
ZERO_API zero_status zero_comm_create_threads(int32_t world_size,
                                              zero_comm_t** out);

ZERO_API zero_status zero_comm_rank(const zero_comm_t* comm, int32_t* rank);
ZERO_API zero_status zero_comm_size(const zero_comm_t* comm, int32_t* size);

/* COLLECTIVE. Waits for every rank. */
ZERO_API zero_status zero_comm_barrier(zero_comm_t* comm);

/* COLLECTIVE. In-place sum of `count` floats over all ranks (for losses and
 * metrics in examples; the engine does its own communication). */
ZERO_API zero_status zero_comm_allreduce_sum_f32(zero_comm_t* comm,
                                                 float* data, size_t count);

/* COLLECTIVE (1.3). Copies `bytes` bytes at `data` from rank `root` to
 * every rank (for broadcasting initial weights from one rank). */
ZERO_API zero_status zero_comm_broadcast(zero_comm_t* comm, void* data,
                                         size_t bytes, int32_t root);

/* NOT collective (1.3). This rank gives up, e.g. an exception escaped its
 * training step: every peer fails promptly with "rank N failed: <reason>"
 * instead of waiting comm_timeout_seconds. Thread communicators break their
 * group (and the engines' duplicates of it) and return; MPI and NCCL
 * communicators abort the whole job (MPI_Abort) and do not return. */
ZERO_API void zero_comm_abort(zero_comm_t* comm, const char* reason);

/* Destroys a communicator; engines using it must be destroyed first. */
ZERO_API void zero_comm_destroy(zero_comm_t* comm);

/* ---- Configuration ------------------------------------------------------ */

/* Engine options from C. A DeepSpeed ds_config.json text is the other way
 * (zero_engine_create_json); both produce the same internal config. Integer
 * fields set to -1 and float fields set to a negative value take the
 * DeepSpeed default, as ZERO_CONFIG_INIT does. First published size (1.0):
 * through comm_timeout_seconds. */
typedef struct zero_config {
  size_t struct_size;
  int32_t stage;                       /* ZeRO stage 0..3 */
  zero_dtype dtype;                    /* working params and gradients */
  zero_optimizer optimizer;
  float lr;                            /* default 1e-3 */
  float beta1, beta2, eps;             /* Adam: 0.9, 0.999, 1e-8 */
  float weight_decay;                  /* default 0 */
  float momentum;                      /* SGD: default 0 */
  int32_t gradient_accumulation_steps; /* default 1 */
  float gradient_clipping;             /* global L2 norm; 0 = off */
  int64_t reduce_bucket_size;          /* elements; -1: hidden^2, hidden the
                                          smaller dimension of the largest
                                          2-D param (5e8 without one; at most
                                          5e8); a larger param gets a
                                          gradient buffer of its own */
  int64_t allgather_bucket_size;       /* elements; default 5e8 */
  int32_t overlap_comm;                /* -1 = default (on for stage 3) */
  int64_t sub_group_size;              /* elements; default 1e9 */
  int64_t stage3_max_live_parameters;  /* elements; default 1e9 */
  int64_t stage3_prefetch_bucket_size; /* elements; -1: 0.9 hidden^2 */
  int64_t stage3_param_persistence_threshold; /* elements; -1: 10 hidden */
  float loss_scale;                    /* fp16: 0 = dynamic, else static */
  int32_t initial_scale_power;         /* fp16: default 16 */
  int32_t loss_scale_window;           /* fp16: default 1000 */
  int32_t hysteresis;                  /* fp16: default 2 */
  float min_loss_scale;                /* fp16: default 1 */
  int32_t steps_per_print;             /* default 10; 0 = never */
  double comm_timeout_seconds;         /* default 300 */
} zero_config;

#define ZERO_CONFIG_INIT                                                     \
  {                                                                          \
    sizeof(zero_config), 0, ZERO_DTYPE_F32, ZERO_OPTIMIZER_ADAMW, -1.0f,     \
        -1.0f, -1.0f, -1.0f, -1.0f, -1.0f, -1, 0.0f, -1, -1, -1, -1, -1, -1, \
        -1, -1.0f, -1, -1, -1, -1.0f, -1, -1.0                               \
  }

/* ---- Engine ------------------------------------------------------------- */

/* Description of one parameter for zero_engine_register_param. First
 * published size (1.0): through trainable. */
typedef struct zero_param_desc {
  size_t struct_size;
  const char* name;     /* unique; copied */
  int32_t ndim;         /* 0..ZERO_MAX_DIMS */
  const int64_t* shape; /* ndim sizes, each >= 1; copied */
  zero_dtype dtype;     /* trainable params: the engine's dtype */
  const float* init;    /* numel fp32 initial values, copied; NULL = zeros */
  int32_t trainable;    /* 0: frozen, no gradient or optimizer state */
  /* Appended in 1.13, past 1.0's size (not in its tail padding). */
  int32_t reserved_1_13;  /* 1.0's tail padding, named; ignored */
  zero_muon_use use_muon; /* optimizer Muon: which half; default AUTO */
} zero_param_desc;

#define ZERO_PARAM_DESC_INIT \
  { sizeof(zero_param_desc), NULL, 0, NULL, ZERO_DTYPE_F32, NULL, 1, 0, ZERO_MUON_AUTO }

/* What zero_engine_step did. First published size (1.0): through lr. */
typedef struct zero_step_info {
  size_t struct_size;
  int32_t boundary;      /* 1: last micro-step, the optimizer ran or skipped */
  int32_t skipped;       /* 1: fp16 overflow, step skipped on every rank */
  int64_t global_step;   /* optimizer steps taken, skipped ones excluded */
  int64_t skipped_steps; /* overflow skips so far */
  double loss_scale;     /* scale for the next backward (1 unless fp16) */
  double grad_norm;      /* global L2 norm of unscaled gradients */
  double lr;             /* learning rate the optimizer used */
} zero_step_info;

#define ZERO_STEP_INFO_INIT {sizeof(zero_step_info), 0, 0, 0, 0, 0.0, 0.0, 0.0}

/* Memory and traffic of this rank: bytes held per category, and elements
 * this rank sent per collective kind (counted as in the ZeRO paper:
 * all-gather and reduce-scatter of n elements send n(W-1)/W, all-reduce
 * 2n(W-1)/W). First published size (1.0): through micro_step. */
typedef struct zero_stats {
  size_t struct_size;
  int32_t rank;              /* this rank */
  int32_t world_size;        /* number of ranks */
  int32_t stage;             /* ZeRO stage 0..3 */
  int64_t trainable_numel;   /* Psi: trainable elements, unpadded */
  int64_t padded_numel;      /* trainable elements after group padding */
  int64_t master_bytes;      /* fp32 masters held here (0: the fp32 working copy) */
  int64_t optimizer_bytes;   /* optimizer states held here */
  int64_t grad_bytes;        /* gradient storage held here */
  int64_t param_bytes;       /* working params held here, resident */
  int64_t frozen_bytes;      /* frozen params (whole on every rank) */
  int64_t buffer_bytes;      /* buckets and stage-3 gathered params now */
  int64_t live_gathered_bytes;      /* stage 3: bytes gathered now */
  int64_t live_gathered_high_water; /* stage 3: most bytes gathered at once */
  int64_t sent_allgather;      /* elements sent by all-gathers */
  int64_t sent_reduce_scatter; /* elements sent by reduce-scatters */
  int64_t sent_allreduce;      /* elements sent by all-reduces */
  int64_t sent_broadcast;      /* elements sent by broadcasts */
  int64_t sent_control;        /* scalars sent (norm, overflow, checks) */
  int64_t collective_calls;    /* collectives issued */
  int64_t global_step;         /* optimizer steps, skipped ones excluded */
  int64_t skipped_steps;       /* fp16 overflow skips so far */
  int64_t micro_step;          /* micro-steps into this accumulation */
  int64_t sent_bytes_allgather;      /* bytes sent by all-gathers */
  int64_t sent_bytes_reduce_scatter; /* bytes sent by reduce-scatters */
  int64_t sent_bytes_allreduce;      /* bytes sent by all-reduces */
  /* Appended for NVMe optimizer offload (zero when off). With it,
   * master_bytes is 0 and optimizer_bytes counts the host staging buffers. */
  int64_t nvme_bytes;        /* NVMe: state files on disk, both slots */
  int64_t nvme_read_bytes;   /* NVMe: bytes read so far */
  int64_t nvme_write_bytes;  /* NVMe: bytes written so far */
  int32_t nvme_direct_io;    /* 1: O_DIRECT; 0: the file system refused it */
  int32_t nvme_uring;        /* 1: io_uring; 0: blocking pread/pwrite */
} zero_stats;

#define ZERO_STATS_INIT                                                       \
  {                                                                           \
    sizeof(zero_stats), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0                                    \
  }

/* Creates an engine from a zero_config. The engine keeps a reference to
 * `comm`, which must outlive it. */
ZERO_API zero_status zero_engine_create(const zero_config* config,
                                        zero_comm_t* comm,
                                        zero_engine_t** out);

/* Creates an engine from the text of a DeepSpeed ds_config.json. Unknown keys,
 * wrong types and values out of range fail with the key path in the message. */
ZERO_API zero_status zero_engine_create_json(const char* json_text,
                                             zero_comm_t* comm,
                                             zero_engine_t** out);

/* Registers a parameter before finalize; *out_id receives its id (0, 1, ...
 * in registration order). Every rank registers the same params in the same
 * order with the same initial values. */
ZERO_API zero_status zero_engine_register_param(zero_engine_t* engine,
                                                const zero_param_desc* desc,
                                                int32_t* out_id);

/* What a zero_init_spec draws (1.4). Values never change. */
typedef enum zero_init_kind {
  ZERO_INIT_ZEROS = 0,
  ZERO_INIT_ONES = 1,
  ZERO_INIT_CONSTANT = 2,        /* value */
  ZERO_INIT_UNIFORM = 3,         /* U(low, high) */
  ZERO_INIT_NORMAL = 4,          /* N(mean, std); nn.Embedding: N(0, 1) */
  ZERO_INIT_TRUNC_NORMAL = 5,    /* N(mean, std) within [low, high] */
  ZERO_INIT_KAIMING_UNIFORM = 6, /* U(-b, b), b = sqrt(6/((1+a^2) fan_in));
                                    a = sqrt(5): nn.Linear's weight default */
  ZERO_INIT_FAN_IN_UNIFORM = 7   /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)):
                                    nn.Linear's bias default */
} zero_init_kind;

/* Initial values described, not copied (1.4): element i of a param is a
 * function of (seed, the param's name, i) alone (Philox4x32-10), the same at
 * every world size and stage, and each rank computes only the elements it
 * holds. Fields a kind does not use are ignored. fan_in 0 takes it from the
 * shape as torch does (shape[1] * prod(shape[2:])); a 1-D param (a bias)
 * must give it. First published size (1.4): through fan_in. */
typedef struct zero_init_spec {
  size_t struct_size;
  zero_init_kind kind;
  uint64_t seed;
  double value;     /* CONSTANT */
  double low;       /* UNIFORM, TRUNC_NORMAL */
  double high;      /* UNIFORM, TRUNC_NORMAL */
  double mean;      /* NORMAL, TRUNC_NORMAL */
  double std;       /* NORMAL, TRUNC_NORMAL */
  double a;         /* KAIMING_UNIFORM's negative slope */
  int64_t fan_in;   /* KAIMING_UNIFORM, FAN_IN_UNIFORM; 0 = from the shape */
} zero_init_spec;

#define ZERO_INIT_SPEC_INIT                                                 \
  {                                                                         \
    sizeof(zero_init_spec), ZERO_INIT_ZEROS, 0, 0.0, 0.0, 1.0, 0.0, 1.0,    \
        2.23606797749978969641, 0                                           \
  }

/* Registers a parameter whose initial values `spec` describes (1.4);
 * desc->init must be NULL. As zero_engine_register_param otherwise. The
 * registry keeps the spec, never numel values. */
ZERO_API zero_status zero_engine_register_param_init(zero_engine_t* engine,
                                                     const zero_param_desc* desc,
                                                     const zero_init_spec* spec,
                                                     int32_t* out_id);

/* fill(user, name, offset, count, out): write elements [offset,
 * offset+count) of param `name` (flat, row-major) as fp32 into out[0..count);
 * return 0, or non-zero for an error. Called during zero_engine_finalize,
 * on the calling thread, in pieces of at most 2^20 elements, only for
 * elements this rank holds: its owned slices (stages 1-3), a whole param
 * for stages 0-2's working copy, stage 3's persistent params and frozen
 * params. A piece may be asked for twice on one rank (working copy and
 * fp32 master). */
typedef int32_t (*zero_fill_fn)(void* user, const char* name, int64_t offset,
                                int64_t count, float* out);

/* Registers a parameter whose initial values `fill` produces at finalize
 * (1.4); desc->init must be NULL; `user` is passed back and must stay valid
 * until finalize returns. A non-zero return fails zero_engine_finalize with
 * ZERO_INVALID_ARGUMENT on every rank, naming the param, the range and the
 * lowest failing rank (finalize then agrees once more over the ranks, when
 * any param has a fill callback; every rank must register it with one). */
ZERO_API zero_status zero_engine_register_param_fill(zero_engine_t* engine,
                                                     const zero_param_desc* desc,
                                                     zero_fill_fn fill, void* user,
                                                     int32_t* out_id);

/* COLLECTIVE. Lays out and allocates the shards. Fails with ZERO_MISMATCH on
 * every rank, naming the first differing param, if ranks registered
 * different params. */
ZERO_API zero_status zero_engine_finalize(zero_engine_t* engine);

/* Number of registered params and the id of a param by name. */
ZERO_API zero_status zero_engine_num_params(const zero_engine_t* engine,
                                            int32_t* count);
ZERO_API zero_status zero_engine_find_param(const zero_engine_t* engine,
                                            const char* name, int32_t* id);
/* The param's element count. */
ZERO_API zero_status zero_engine_param_numel(const zero_engine_t* engine,
                                             int32_t id, int64_t* numel);

/* COLLECTIVE in stage 3 (every rank gathers the same params in the same
 * order). *data receives the full working copy (the param's dtype), valid
 * until the matching zero_engine_release. Gathers nest (reference counted;
 * a release ends the innermost). Read-only: the optimizer owns the values.
 * In stages 0-2 (and for frozen params) the pointer is the resident copy
 * itself: it stays the same for the engine's life and zero_engine_step
 * updates it in place, so it may be held across steps. In stage 3 it is a
 * copy the optimizer step does not update: zero_engine_step at the
 * accumulation boundary refuses while any trainable param is still
 * gathered (see zero_engine_step). */
ZERO_API zero_status zero_engine_gather(zero_engine_t* engine, int32_t id,
                                        void** data);

/* Ends one gather of `id`; in stage 3 frees the full copy when unused. */
ZERO_API zero_status zero_engine_release(zero_engine_t* engine, int32_t id);

/* *grad receives a zero-filled buffer of numel elements (the param's dtype)
 * for this micro-step's gradient of a trainable param: write or add into it,
 * then call zero_engine_grad_ready. Valid until zero_engine_grad_ready;
 * asking again before grad_ready returns the same buffer.
 * The engine averages gradients over ranks and sums them over micro-steps:
 * divide each micro-step's loss by gradient_accumulation_steps (as
 * DeepSpeed's backward does) and multiply it by zero_engine_loss_scale. */
ZERO_API zero_status zero_engine_grad_buffer(zero_engine_t* engine,
                                             int32_t id, void** grad);

/* COLLECTIVE in stages 2-3 and at the boundary micro-step in stage 0 (ranks
 * hand in the same params in the same order). Hands the gradient over. */
ZERO_API zero_status zero_engine_grad_ready(zero_engine_t* engine,
                                            int32_t id);

/* The working dtype of trainable params (from fp16/bf16 in the config). */
ZERO_API zero_status zero_engine_dtype(const zero_engine_t* engine,
                                       zero_dtype* dtype);

/* The loss scale to multiply the loss by before backward (1 unless fp16). */
ZERO_API zero_status zero_engine_loss_scale(const zero_engine_t* engine,
                                            double* scale);

/* COLLECTIVE. Ends a micro-step; on every gradient_accumulation_steps-th
 * call, reduces, unscales, clips and applies the optimizer (or skips on fp16
 * overflow). Gradients not handed in count as zero. `info` may be NULL.
 * No stale weights (1.8): on that boundary call, a trainable param still
 * gathered as a copy the update would not reach -- any stage-3 gather, a
 * zero_engine_gather_into at any stage -- is ZERO_FAILED_PRECONDITION
 * naming the params (with their outstanding gathers), before anything
 * moves: release them and call zero_engine_step again, then gather again.
 * Holding a gather across the other micro-steps is fine (nothing changes
 * there), and so are stages 0-2's zero_engine_gather and frozen params.
 * Gathers are collective, so every rank refuses alike. */
ZERO_API zero_status zero_engine_step(zero_engine_t* engine,
                                      zero_step_info* info);

/* Adds to the sample count behind the samples/s of the periodic print. */
ZERO_API zero_status zero_engine_report_samples(zero_engine_t* engine,
                                                int64_t samples);

/* COLLECTIVE (every rank calls it; stage 0 copies locally). Copies the
 * param's full fp32 master weights into `out` (numel floats). */
ZERO_API zero_status zero_engine_read_master(zero_engine_t* engine,
                                             int32_t id, float* out);

/* NOT collective (1.3). Sets the param to `values` (numel floats, the same
 * on every rank, e.g. broadcast from one): the fp32 master weights this rank
 * owns and every working copy it holds. Refused while the param is gathered
 * or while gradients of an accumulation are pending. */
ZERO_API zero_status zero_engine_write_master(zero_engine_t* engine,
                                              int32_t id, const float* values);

/* Fills `stats` (struct_size set by ZERO_STATS_INIT; convention 3). */
ZERO_API zero_status zero_engine_stats(const zero_engine_t* engine,
                                       zero_stats* stats);

/* Frees the engine and everything it allocated. First completes the
 * collectives in flight (a stage-3 prefetch): call it on every rank, and
 * without holding a lock a peer rank needs to reach its side of them. */
ZERO_API void zero_engine_destroy(zero_engine_t* engine);

/* ---- Checkpoints -------------------------------------------------------- */

/* Options of zero_engine_load; fill from ZERO_LOAD_OPTIONS_INIT. First
 * published size (1.0): through allow_missing. */
typedef struct zero_load_options {
  size_t struct_size;
  int32_t load_optimizer_states; /* default 1; 0: moments start at zero */
  int32_t allow_missing; /* default 0; 1: params the checkpoint lacks keep
                            their values */
} zero_load_options;

#define ZERO_LOAD_OPTIONS_INIT {sizeof(zero_load_options), 1, 0}

/* COLLECTIVE. Writes DIR/TAG atomically, then points DIR/latest at it; a
 * failed save leaves earlier tags whole. Refused mid-accumulation. */
ZERO_API zero_status zero_engine_save(zero_engine_t* engine, const char* dir,
                                      const char* tag);

/* COLLECTIVE. Loads DIR/TAG (NULL: latest; any world size or stage) with
 * steps and loss scale; options NULL = defaults; fails alike on every rank. */
ZERO_API zero_status zero_engine_load(zero_engine_t* engine, const char* dir,
                                      const char* tag,
                                      const zero_load_options* options);

/* Writes every param of DIR/TAG (NULL: latest) as one safetensors file of
 * `dtype` (fp32 master values, or rounded); needs no engine. */
ZERO_API zero_status zero_checkpoint_export_safetensors(const char* dir,
                                                        const char* tag,
                                                        const char* out_path,
                                                        zero_dtype dtype);

/* ---- Pretrained weights (1.4) ------------------------------------------ */

/* Options of zero_engine_load_safetensors; fill from
 * ZERO_SAFETENSORS_OPTIONS_INIT. First published size (1.4): through
 * allow_missing. */
typedef struct zero_safetensors_options {
  size_t struct_size;
  const char* prefix_strip; /* NULL: none; a file tensor's name loses this
                               leading text ("model." for HF checkpoints) */
  const char* prefix_add;   /* NULL: none; then gains this one; the result is
                               the param name it loads into */
  int64_t* bytes_read;      /* NULL, or receives the tensor bytes this rank
                               read (only the elements it holds) */
  int32_t allow_missing;    /* default 0; 1: params the file lacks keep their
                               values */
} zero_safetensors_options;

#define ZERO_SAFETENSORS_OPTIONS_INIT \
  { sizeof(zero_safetensors_options), NULL, NULL, NULL, 0 }

/* COLLECTIVE (1.4). After finalize, every param released, not
 * mid-accumulation: sets params from `path`, a .safetensors file or a
 * Hugging Face *.safetensors.index.json ("weight_map": tensor -> shard file
 * beside it). F32, F16 and BF16 tensors load (widened to fp32 exactly); each
 * rank reads only the elements it holds (its owned fp32 master range, and its
 * working copy: whole in stages 0-2, its slice in stage 3, whole for
 * persistent and frozen params). Validates every name, shape and dtype on
 * every rank before writing anything, and fails alike on every rank: a
 * missing tensor is ZERO_NOT_FOUND naming the param, a wrong shape or dtype
 * ZERO_INVALID_ARGUMENT naming tensor, file and both shapes, a corrupt or
 * truncated file ZERO_DATA_LOSS naming it. Tensors no param takes are listed
 * in one warning line on rank 0. options NULL = defaults. */
ZERO_API zero_status zero_engine_load_safetensors(zero_engine_t* engine, const char* path,
                                                  const zero_safetensors_options* options);

/* ---- Introspection (1.1) ------------------------------------------------ */

/* What was registered for a param. First published size (1.1): through
 * trainable. */
typedef struct zero_param_info {
  size_t struct_size;
  const char* name;  /* owned by the engine; valid while it lives */
  int32_t ndim;
  int64_t shape[ZERO_MAX_DIMS]; /* ndim sizes, then zeros */
  zero_dtype dtype;
  int32_t trainable;            /* 1: trainable; 0: frozen */
} zero_param_info;

#define ZERO_PARAM_INFO_INIT \
  { sizeof(zero_param_info), NULL, 0, {0, 0, 0, 0, 0, 0, 0, 0}, ZERO_DTYPE_F32, 0 }

/* Fills `info` for param `id`. */
ZERO_API zero_status zero_engine_param_info(const zero_engine_t* engine,
                                            int32_t id, zero_param_info* info);

/* The resolved gradient_accumulation_steps ("auto" and batch arithmetic
 * applied): how many zero_engine_step calls make one optimizer step. */
ZERO_API zero_status zero_engine_gradient_accumulation_steps(
    const zero_engine_t* engine, int32_t* steps);

/* ---- Devices (1.1) ------------------------------------------------------ */

/* An NCCL communicator over the ranks of `mpi_comm` (an MPI_Comm*, or NULL
 * for MPI_COMM_WORLD), one GPU per rank: CUDA device `cuda_device`. Engines
 * on it keep their state on that GPU. ZERO_UNIMPLEMENTED in builds without
 * CUDA (bazel --config=cuda). */
ZERO_API zero_status zero_comm_create_nccl(const void* mpi_comm,
                                           int32_t cuda_device,
                                           zero_comm_t** out);

/* Before any register_param: keep the engine's state on `kind` ("cpu" or
 * "cuda") device `ordinal`. With "cuda", gather and grad_buffer hand out
 * device pointers, and a host communicator (mpi, thread) is staged through
 * host memory. Default: "cpu", or the GPU of an NCCL communicator. */
ZERO_API zero_status zero_engine_set_device(zero_engine_t* engine,
                                            const char* kind, int32_t ordinal);

/* ---- 1.5: write a range of a param ----------------------------------- */

/* NOT collective (1.5). Like zero_engine_write_master for elements
 * [offset, offset + count) of param `id` only (`values` holds count fp32, in
 * the param's row-major order; the same on every rank that calls it): the
 * fp32 master of that range this rank owns and the part of every working
 * copy it holds, so no rank needs the whole param (e.g. one row of a stage-3
 * embedding). A range outside the param is ZERO_INVALID_ARGUMENT naming it;
 * count 0 does nothing. Refused while the param is gathered or while
 * gradients of an accumulation are pending. */
ZERO_API zero_status zero_engine_write_master_range(zero_engine_t* engine,
                                                    int32_t id, int64_t offset,
                                                    int64_t count,
                                                    const float* values);

/* ---- 1.5: observing a run (wall_clock_breakdown, comms_logger) -------- */

/* One optimizer step's wall time by phase, in milliseconds, on this rank
 * (docs/ARCHITECTURE.md, "Observing a run"). forward + backward +
 * optimizer tile step_ms. First published size (1.5): through
 * nvme_write_bytes; the nvme_*_ms fields were appended in 1.6. */
typedef struct zero_step_breakdown {
  size_t struct_size;
  int64_t global_step;       /* optimizer steps (skipped ones too) after it; 0: none yet */
  int32_t micro_steps;       /* micro-steps in it */
  double step_ms;            /* first call of its first micro-step to its step's return */
  double forward_ms;         /* first gather/grad_buffer to first grad_ready, per micro-step */
  double backward_ms;        /* first grad_ready to zero_engine_step, per micro-step */
  double optimizer_ms;       /* inside zero_engine_step (the update on the last micro-step) */
  double reduce_ms;          /* gradient bucket reductions, on whichever thread ran them */
  double reduce_exposed_ms;  /* the caller waiting for or running reductions */
  double reduce_hidden_ms;   /* reduce_ms the caller did not wait for (overlapped) */
  double gather_ms;          /* stage 3: gathers and prefetches */
  double gather_exposed_ms;  /* stage 3: the caller inside zero_engine_gather */
  double gather_hidden_ms;   /* stage 3: gather_ms the caller did not wait for */
  double boundary_reduce_ms; /* stage 0 leftovers, stage 1's flat reduce-scatter */
  double norm_ms;            /* fp32 cast, sum of squares, norm all-reduce */
  double update_ms;          /* unscale+clip factor, optimizer, working-copy cast (fused) */
  double publish_ms;         /* all-gather of the updated working copy */
  int64_t nvme_read_bytes;   /* NVMe bytes read in the step */
  int64_t nvme_write_bytes;  /* NVMe bytes written in the step */
  /* 1.6: NVMe time: wall time with IO submitted and not complete,
   * overlapping pieces counted once. */
  double nvme_read_ms;       /* reads outstanding */
  double nvme_write_ms;      /* writes outstanding */
  double nvme_exposed_ms;    /* a thread of the engine blocked waiting for NVMe IO */
  double nvme_hidden_ms;     /* reads or writes outstanding that nobody waited for */
} zero_step_breakdown;

#define ZERO_STEP_BREAKDOWN_INIT                                              \
  {                                                                           \
    sizeof(zero_step_breakdown), 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, \
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0.0, 0.0, 0.0, 0.0                \
  }

/* The last optimizer step's breakdown. ZERO_FAILED_PRECONDITION unless the
 * config turned on "wall_clock_breakdown" (or "zero_trace"). */
ZERO_API zero_status zero_engine_step_breakdown(const zero_engine_t* engine,
                                                zero_step_breakdown* out);

/* One line of the collective log: a collective and a message-size bucket
 * (sizes in (bucket_bytes/2, bucket_bytes]). Bandwidths as nccl-tests
 * defines them, in GB/s (1e9 bytes). First published size (1.5): through
 * busbw_gbs. */
typedef struct zero_comm_log_entry {
  size_t struct_size;
  int32_t op;            /* 0 all_gather, 1 reduce_scatter, 2 all_reduce, 3 broadcast */
  int32_t control;       /* 1: bookkeeping (norms, agreement), zero_stats' control traffic */
  int64_t bucket_bytes;  /* upper end of the message-size bucket */
  int64_t count;         /* collectives */
  int64_t bytes;         /* sum of their sizes (the data each moves) */
  int64_t sent_bytes;    /* bytes this rank sent, as zero_stats counts them */
  double total_ms;       /* total time */
  double mean_ms;        /* total_ms / count */
  double algbw_gbs;      /* bytes / total time */
  double busbw_gbs;      /* algbw x (W-1)/W; x 2(W-1)/W for all_reduce; x 1 broadcast */
} zero_comm_log_entry;

#define ZERO_COMM_LOG_ENTRY_INIT \
  { sizeof(zero_comm_log_entry), 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0 }

/* The collective log ("comms_logger": {"enabled": true}). Writes up to
 * `capacity` entries (each one's struct_size set by the caller, as
 * ZERO_COMM_LOG_ENTRY_INIT does) and sets *count to the number there are
 * (call with capacity 0 to ask). ZERO_FAILED_PRECONDITION when the log is
 * off. */
ZERO_API zero_status zero_engine_comm_log(const zero_engine_t* engine,
                                          zero_comm_log_entry* entries,
                                          int32_t capacity, int32_t* count);

/* The log as DeepSpeed's log_summary table (what rank 0 prints when the
 * engine is destroyed), NUL-terminated in `buf` when it fits in `capacity`
 * bytes; *length gets strlen of the whole text either way. */
ZERO_API zero_status zero_engine_comm_log_summary(const zero_engine_t* engine,
                                                  char* buf, size_t capacity,
                                                  size_t* length);

/* ---- 1.5: nodes, hybrid sharding, ZeRO++: traffic per link ------------- */

/* Where this rank's traffic went (docs/ARCHITECTURE.md, "Traffic per link"):
 * what it sent, over links to ranks on its own node (intra) and on other
 * nodes (inter), per collective kind, in values carried and bytes on the
 * wire (quantized collectives carry fewer bytes than values x element size).
 * The sums over both links equal zero_stats' sent_* counters. Nodes come
 * from the launcher's environment or "zero_ranks_per_node". First published
 * size (1.5): through inter_values_control. */
typedef struct zero_link_stats {
  size_t struct_size;
  int32_t nodes;           /* nodes the ranks are grouped into */
  int32_t node;            /* this rank's node, numbered by lowest rank */
  int32_t ranks_per_node;  /* ranks on each node; -1 when nodes differ */
  int32_t replicas;        /* hybrid sharding: copies of each shard; 1 off */
  int64_t hpz_secondary_bytes;     /* hpZ: secondary param shards held */
  int64_t intra_bytes_allgather;   /* bytes to ranks on this node */
  int64_t inter_bytes_allgather;   /* bytes to ranks on other nodes */
  int64_t intra_bytes_reduce_scatter;
  int64_t inter_bytes_reduce_scatter;
  int64_t intra_bytes_allreduce;
  int64_t inter_bytes_allreduce;
  int64_t intra_bytes_broadcast;
  int64_t inter_bytes_broadcast;
  int64_t intra_bytes_control;
  int64_t inter_bytes_control;
  int64_t intra_values_allgather;  /* values carried to ranks on this node */
  int64_t inter_values_allgather;  /* values carried to other nodes */
  int64_t intra_values_reduce_scatter;
  int64_t inter_values_reduce_scatter;
  int64_t intra_values_allreduce;
  int64_t inter_values_allreduce;
  int64_t intra_values_broadcast;
  int64_t inter_values_broadcast;
  int64_t intra_values_control;
  int64_t inter_values_control;
} zero_link_stats;

#define ZERO_LINK_STATS_INIT                                                \
  {                                                                         \
    sizeof(zero_link_stats), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0                                        \
  }

/* Fills `stats` for this rank (1.5). */
ZERO_API zero_status zero_engine_link_stats(const zero_engine_t* engine,
                                            zero_link_stats* stats);

/* ---- 1.5: memory estimate ------------------------------------------------ */

/* Bytes per rank an engine would hold (zero-estimate, docs/ARCHITECTURE.md,
 * "Memory estimator"), in zero_stats' categories after one step. First
 * published size (1.5): through host_bytes_per_node. */
typedef struct zero_memory_estimate {
  size_t struct_size;
  int64_t trainable_numel;      /* Psi, unpadded */
  int64_t padded_numel;         /* after group padding */
  int64_t param_bytes;          /* working copy (+ stage-3 persistent params) */
  int64_t grad_bytes;           /* gradients */
  int64_t master_bytes;         /* fp32 master in memory (0 when it is the fp32 working copy) */
  int64_t optimizer_bytes;      /* moments in memory (NVMe: its staging buffers) */
  int64_t frozen_bytes;         /* frozen params */
  int64_t buffer_bytes;         /* buckets, pack, receive, staging, fp32 scratch */
  int64_t nvme_bytes;           /* swap files on disk */
  int64_t live_peak_bytes;      /* stage 3: most gathered params at once */
  int64_t device_bytes;         /* steady state in the device's memory */
  int64_t device_peak_bytes;    /* device_bytes + live_peak_bytes */
  int64_t host_bytes;           /* host memory apart from the device, per rank */
  int64_t host_bytes_per_node;  /* host memory per node, all ranks */
} zero_memory_estimate;

#define ZERO_MEMORY_ESTIMATE_INIT \
  { sizeof(zero_memory_estimate), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/* NOT collective; no engine. Estimates an engine of the ds_config
 * `json_text` (stage, precision, offload, bucket sizes) over `num_params`
 * params (numel[i] elements, ndim[i] dimensions: 2-D ones size the "auto"
 * buckets; all trainable) on ranks_per_node x nodes ranks; gpu 1: device
 * memory apart from host memory, 0: the CPU device. Without names it cannot
 * apply Muon's name rule (every param of 2 or more dimensions counts as on
 * Muon, embeddings and heads too) nor describe frozen params:
 * zero_estimate_memory_params (1.16) can. */
ZERO_API zero_status zero_estimate_memory(const char* json_text, int32_t num_params,
                                          const int64_t* numel, const int32_t* ndim,
                                          int32_t ranks_per_node, int32_t nodes,
                                          int32_t gpu, zero_memory_estimate* out);

/* ---- 1.5: devices from the bindings ----------------------------------- */

/* Where an engine keeps its state, so a binding can tell whether the
 * pointers gather and grad_buffer hand out may be read by the host. */
typedef enum zero_device_kind {
  ZERO_DEVICE_CPU = 0,     /* host memory: read it directly */
  ZERO_DEVICE_CUDA = 1,    /* a CUDA GPU: device pointers */
  ZERO_DEVICE_STANDIN = 2  /* the CPU stand-in for a GPU (tests): pointers
                              the host cannot touch (PROT_NONE) */
} zero_device_kind;

/* First published size (1.5): through dlpack_device_type; the memory
 * fields after it were appended in 1.5 (a caller's shorter struct gets its
 * prefix). */
typedef struct zero_device_info {
  size_t struct_size;
  int32_t kind;               /* zero_device_kind */
  int32_t ordinal;            /* the GPU's index; 0 for cpu and standin */
  int32_t host_accessible;    /* 1: the host may dereference the pointers */
  int32_t dlpack_device_type; /* DLPack's DLDeviceType for those pointers:
                                 1 kDLCPU, 2 kDLCUDA, 12 kDLExtDev (standin) */
  int64_t device_bytes;       /* allocated through the engine's device now */
  int64_t device_peak_bytes;  /* their high-water mark */
  int64_t device_reserved_bytes; /* held from the driver by the caching
                                    allocator (CUDA; 0 elsewhere) */
  int64_t pinned_host_bytes;  /* page-locked host staging now (pin_memory) */
} zero_device_info;

#define ZERO_DEVICE_INFO_INIT { sizeof(zero_device_info), 0, 0, 0, 0, 0, 0, 0, 0 }

/* Fills `info` with the engine's device (1.5). */
ZERO_API zero_status zero_engine_device(const zero_engine_t* engine,
                                        zero_device_info* info);

/* NOT collective (1.5). Copies `bytes` from `src` to `dst`, either of which
 * may be host memory or the engine's device memory (a pointer from gather or
 * grad_buffer), ordered after the engine's queued device work; returns when
 * the copy is complete. The way a binding reads or fills device buffers
 * without a device runtime of its own. A device error (a failed copy)
 * fails the call and the engine, as any device error does. */
ZERO_API zero_status zero_engine_copy(zero_engine_t* engine, void* dst,
                                      const void* src, size_t bytes);

/* ---- 1.6: progress of long work --------------------------------------- */

/* Called as long work goes: `what` names it ("save", "load", "export",
 * "reshard", "nvme preallocate", "nvme initialize"), `done` bytes of
 * `total` on this rank, rising to total (a call with done == total ends
 * each piece of work; some report only that). Return 0 to go on, nonzero to
 * cancel: the call then fails with ZERO_CANCELLED saying how far it got; a
 * save or load fails alike on every rank (a cancelled save leaves earlier
 * tags whole and the engine going on; a cancelled load, like any failed one,
 * leaves the engine unusable, its state partly overwritten: load into a new
 * engine); a cancelled finalize leaves the engine unusable. Runs on a thread of the engine, not
 * necessarily the caller's; it must not call zero_* functions on the engine. */
typedef int32_t (*zero_progress_fn)(void* user, const char* what, int64_t done,
                                    int64_t total);

/* NOT collective (1.6). Reports save and load, and, when set before
 * finalize, the NVMe tier's preallocation and first write ("nvme
 * preallocate", "nvme initialize"), to fn(user, ...). fn NULL: none (the
 * default). */
ZERO_API zero_status zero_engine_set_progress(zero_engine_t* engine, zero_progress_fn fn,
                                              void* user);

/* zero_checkpoint_export_safetensors reporting progress ("export") to
 * fn(user, ...) (1.6); fn NULL: none. */
ZERO_API zero_status zero_checkpoint_export_safetensors_progress(
    const char* dir, const char* tag, const char* out_path, zero_dtype dtype,
    zero_progress_fn fn, void* user);

/* Rewrites checkpoint DIR/TAG (NULL: latest) as OUT_DIR/TAG for `world`
 * ranks, cut as an engine of that world lays its shards out (loading
 * reshards by itself; this does it ahead of time, as `zero-ckpt reshard`),
 * reporting progress ("reshard") to fn(user, ...); fn NULL: none. Needs no
 * engine (1.6). */
ZERO_API zero_status zero_checkpoint_reshard(const char* dir, const char* tag,
                                             const char* out_dir, int32_t world,
                                             zero_progress_fn fn, void* user);

/* ---- 1.7: stage 3 gathers into the caller's memory -------------------- */

/* COLLECTIVE in stage 3, as zero_engine_gather (1.7; every stage since
 * 1.8): a gather of `id`
 * whose full working copy is written to the caller's `dst` (`bytes` bytes,
 * numel x the element size of `dtype`, which must be the param's dtype:
 * nothing is converted; fp16 and bf16 are both 2 bytes, so the dtype is
 * checked, not only the size). On a host device a param that is not
 * gathered already is all-gathered straight into `dst`, with no buffer of
 * the engine's and no copy; a prefetched one (or one another gather holds)
 * is copied into `dst` from the engine's buffer, which a prefetch then
 * gives back. On a GPU or the stand-in (dst may be host memory) the param is
 * gathered into the engine's buffer and copied, as zero_engine_copy would.
 * It is a gather in every other way: ended by zero_engine_release (one per
 * call; gathers nest, mixed with zero_engine_gather), it counts against
 * stage3_max_live_parameters and in zero_stats' live_gathered_bytes (not in
 * buffer_bytes) until then, it goes in the prefetch trace and starts the
 * prefetches a gather would, and write_master and the like refuse the
 * param until it is released. `dst` must stay valid and unwritten until
 * the param's last outstanding gather is released: a nested gather_into of
 * it copies from there, and (host device) zero_engine_gather of it is
 * refused (ZERO_FAILED_PRECONDITION: the engine holds no copy to hand out).
 * Frozen and persistent params are copied from their resident copy.
 * Stages 0-2 (1.8; refused before): a copy of the resident working copy,
 * held and released like a gather, so one code path serves every stage.
 * The optimizer does not update a copy: release it before the step at the
 * accumulation boundary (zero_engine_step refuses otherwise). A wrong
 * dtype or size is
 * ZERO_INVALID_ARGUMENT naming the param, its shape and dtype; dst NULL is
 * ZERO_INVALID_ARGUMENT. */
ZERO_API zero_status zero_engine_gather_into(zero_engine_t* engine, int32_t id,
                                             zero_dtype dtype, void* dst, size_t bytes);

/* ---- 1.8: conversions and gradients from the caller's memory --------- */

/* NOT collective; no engine (1.8). Converts `count` elements at `src` of
 * `src_dtype` into `dst` as `dst_dtype`, with the engine's own rounding
 * (kernels/cast_math.h): to fp16 and bf16 round to nearest even, NaN stays
 * NaN, fp16 overflows to infinity and keeps subnormals; widening is exact;
 * fp16 <-> bf16 goes through fp32 exactly (one rounding). Equal dtypes
 * copy. Host memory; src and dst must not overlap unless they are the same
 * pointer with equal element sizes. A dtype outside zero_dtype is
 * ZERO_INVALID_ARGUMENT; NULL pointers are allowed only with count 0. */
ZERO_API zero_status zero_convert(zero_dtype dst_dtype, void* dst, zero_dtype src_dtype,
                                  const void* src, size_t count);

/* COLLECTIVE as zero_engine_grad_ready (1.8). Hands in this micro-step's
 * gradient of trainable param `id` from the caller's own buffer: `bytes`
 * bytes at `src` of `dtype` (any zero_dtype: an fp32 gradient of a bf16 or
 * fp16 model is rounded inside, with zero_convert's rounding), numel
 * elements in the param's row-major order, host memory. The gradient
 * buffer's contents are replaced by it (as if zero_engine_grad_buffer,
 * zero_convert into the buffer, zero_engine_grad_ready -- bit for bit),
 * then it is handed over; `src` is not used after the call returns, so the
 * caller's backward may write its own buffer again at once (what a
 * zero_engine_grad_buffer of `id` left in the buffer this micro-step is
 * replaced too). A wrong size is ZERO_INVALID_ARGUMENT naming the param,
 * its shape and dtype; a frozen param, or a gradient handed in twice in a
 * micro-step, fails as zero_engine_grad_buffer/_grad_ready do. */
ZERO_API zero_status zero_engine_set_grad(zero_engine_t* engine, int32_t id, zero_dtype dtype,
                                          const void* src, size_t bytes);
/* ---- 1.9: ranks that disagree ------------------------------------------ */

/* Not collective; any time, also after the engine failed (1.9). The last
 * "zero_flight_recorder_size" (default 256) collectives of the engine on
 * this rank, oldest first, one JSON object per line: {"rank", "comm" (0 the
 * engine's data communicator, others its sub-groups), "seq" (the
 * collective's number on that communicator), "op" ("all-gather",
 * "reduce-scatter", "all-reduce", "broadcast", "barrier", "all-to-all",
 * "call entry"), "elems", "dtype", "call" (the engine call that issued it:
 * "gather", "grad_ready", "step", "save_checkpoint", ...), "step" (optimizer
 * steps taken), "micro_step", "param" (the first param it moves, "" none),
 * "params" (how many), "bucket" (the gradient bucket's number in the
 * micro-step, -1 none), "outcome" ("done", "pending", "failed",
 * "timed_out", "diverged")}. Every collective is checked across ranks
 * before its data moves: where the ranks differ (another param, size, call
 * or step) every rank fails with ZERO_MISMATCH naming each rank's side, and
 * that collective is the last record, "diverged" (README.md, "When ranks
 * disagree"). NUL-terminated in `buf` when it fits in `capacity` bytes;
 * *length gets strlen of the whole text either way (call with capacity 0
 * to ask). */
ZERO_API zero_status zero_engine_flight_record(const zero_engine_t* engine, char* buf,
                                               size_t capacity, size_t* length);

/* ---- 1.11: asynchronous checkpoints and preemption --------------------- */

/* Options of zero_engine_save_with; fill from ZERO_SAVE_OPTIONS_INIT. First
 * published size (1.11): through keep_last; exclude_frozen appended in 1.14. */
typedef struct zero_save_options {
  size_t struct_size;
  int32_t asynchronous; /* default 0; 1: return once this rank's state is copied
                        (a reused host buffer, page-locked beside a GPU); the
                        files are written and DIR/latest published in the
                        background while training goes on */
  int32_t keep_last; /* default 0 (keep all); K > 0: after the new tag is
                        published, delete the oldest tags of DIR (by global
                        step) beyond the newest K */
  int32_t exclude_frozen; /* 1.14; default 0; 1: leave the frozen params
                        (zero_param_desc.trainable 0) out of the files and
                        the manifest, as DeepSpeed's save_checkpoint(
                        exclude_frozen_parameters=True): an adapter's
                        checkpoint. Load it with allow_missing onto an
                        engine whose frozen params already hold the base
                        model; without allow_missing the load fails naming
                        them. */
} zero_save_options;

#define ZERO_SAVE_OPTIONS_INIT {sizeof(zero_save_options), 0, 0, 0}

/* COLLECTIVE (1.11). zero_engine_save with options (NULL = defaults, the same
 * as zero_engine_save). Every save, load, zero_engine_wait_checkpoint and
 * destroy first waits for an asynchronous save in flight; if that failed
 * (on any rank), the call returns its error on every rank, naming the tag
 * and the failing rank's file, and does nothing else (call it again); the
 * failed tag never becomes DIR/latest. An asynchronous save reports no
 * progress and cannot be cancelled. Refused with hybrid sharding
 * (mics_shard_size) when async. */
ZERO_API zero_status zero_engine_save_with(zero_engine_t* engine, const char* dir,
                                           const char* tag,
                                           const zero_save_options* options);

/* COLLECTIVE (1.11): waits for an asynchronous save in flight and returns
 * its status (ZERO_OK when none is in flight). */
ZERO_API zero_status zero_engine_wait_checkpoint(zero_engine_t* engine);

/* Options of zero_engine_set_preemption; fill from
 * ZERO_PREEMPTION_OPTIONS_INIT. First published size (1.11): through
 * exit_code. */
typedef struct zero_preemption_options {
  size_t struct_size;
  int32_t signal;    /* default 15 (SIGTERM): the scheduler's warning */
  const char* dir;   /* required: where the preemption checkpoint goes */
  const char* tag;   /* NULL: "global_step<N>" */
  int32_t exit;      /* default 1: exit the process after the save; 0: the
                        step returns ZERO_CANCELLED with the message */
  int32_t exit_code; /* default 0: 128 + signal */
} zero_preemption_options;

#define ZERO_PREEMPTION_OPTIONS_INIT \
  { sizeof(zero_preemption_options), 15, NULL, NULL, 1, 0 }

/* COLLECTIVE (1.11), after finalize. Watches options->signal (one engine of
 * a process at a time): when any rank receives it, every rank finishes the
 * step that ends the current accumulation, agrees on it (one control
 * all-reduce at each optimizer boundary while set), saves that step
 * synchronously to DIR/TAG and then, with `exit`, prints
 * "zero: rank R: preempted: ..." and exits with exit_code; without, that
 * step returns ZERO_CANCELLED with the message. options NULL turns it off
 * (the previous handler comes back, also at destroy). */
ZERO_API zero_status zero_engine_set_preemption(zero_engine_t* engine,
                                                const zero_preemption_options* options);
/* ---- 1.12: the learning-rate schedule -------------------------------- */

/* NOT collective (1.12). *lr receives the learning rate of 0-based
 * optimizer step `step` (skipped steps not counted: zero_step_info's
 * global_step) as the engine's scheduler computes it for its update: the
 * config's `scheduler` block (DeepSpeed's WarmupLR, WarmupDecayLR,
 * WarmupCosineLR) or, without one, the optimizer's lr. The lr of the next
 * update is zero_engine_lr_for_step(engine, global_step). Any step may be
 * asked, taken or not. A negative step is ZERO_INVALID_ARGUMENT. */
ZERO_API zero_status zero_engine_lr_for_step(const zero_engine_t* engine, int64_t step,
                                             double* lr);

/* ---- 1.15: a block's params in one call -------------------------------- */

/* COLLECTIVE as zero_engine_gather_into (1.15): the gathers of `count`
 * params in one call, as zero_engine_gather_into(engine, ids[k], dtype,
 * dsts[k], bytes[k]) for k = 0 .. count-1 in that order (every rank passes
 * the same ids in the same order) -- for a binding whose module hook gathers
 * a module's or a block's params together, one crossing instead of one per
 * param. Every entry is checked before anything moves: an unknown id, a
 * dtype other than the param's, a wrong size or a NULL dsts[k] is
 * ZERO_INVALID_ARGUMENT naming the entry ("gather_into_many, entry K: ...")
 * and its param, and nothing is gathered. A failure of the gathers
 * themselves (stage3_max_live_parameters, a collective, the device) names
 * the entry too, and the gathers this call made are released first, so the
 * caller holds none of the list either way. An id may appear more than once
 * (nested gathers, each ended by its own release). Each entry is a gather
 * in every other way (the prefetch trace, zero_stats, the flight record).
 * count 0 does nothing (ids, dsts and bytes may then be NULL). */
ZERO_API zero_status zero_engine_gather_into_many(zero_engine_t* engine, const int32_t* ids,
                                                  size_t count, zero_dtype dtype,
                                                  void* const* dsts, const size_t* bytes);

/* Not collective, as zero_engine_release (1.15): zero_engine_release of
 * ids[0 .. count-1] in that order. Refused with ZERO_FAILED_PRECONDITION
 * naming the entry and its param, before any is released, when a param is
 * not gathered as many times as the list names it (a release too many);
 * an unknown id is ZERO_INVALID_ARGUMENT, also before any is released.
 * count 0 does nothing (ids may then be NULL). */
ZERO_API zero_status zero_engine_release_many(zero_engine_t* engine, const int32_t* ids,
                                              size_t count);

/* ---- 1.16: the memory estimate of described params ---------------------- */

/* NOT collective; no engine. zero_estimate_memory over the params an engine
 * would be given: params[0 .. num_params-1] are the descriptions a caller
 * passes to zero_engine_register_param, in registration order (the order the
 * engine lays them out in). Each is checked and read as registration does
 * it -- the same code -- so the estimate counts what that engine would
 * hold: `trainable` 0 is a frozen param (its numel x its dtype's bytes on
 * every rank, no gradient or optimizer state); with optimizer Muon,
 * `use_muon` picks each param's half, ZERO_MUON_AUTO by DeepSpeed's rule
 * (at least 2-D, the name holds neither "embed" nor "lm_head"), so
 * embeddings and the LM head are estimated on AdamW. `init` is not read,
 * nor a trainable param's dtype (the engine holds those in the config's
 * working dtype); a frozen param's dtype is its bytes per element.
 * Refused with ZERO_INVALID_ARGUMENT as registration refuses, the message
 * naming the entry and its param ("zero_estimate_memory_params, param K
 * 'name': ..."): params NULL (num_params > 0) or num_params < 0; a
 * struct_size outside convention 3; name NULL or empty; a name given twice;
 * ndim outside 0..ZERO_MAX_DIMS, shape NULL with ndim > 0, a dimension < 1;
 * a dtype or use_muon outside its enum; ZERO_MUON_ON on a param of fewer
 * than 2 dimensions. The config, ranks_per_node, nodes, gpu and out as
 * zero_estimate_memory. */
ZERO_API zero_status zero_estimate_memory_params(const char* json_text, int32_t num_params,
                                                 const zero_param_desc* params,
                                                 int32_t ranks_per_node, int32_t nodes,
                                                 int32_t gpu, zero_memory_estimate* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ZERO_C_H_ */
