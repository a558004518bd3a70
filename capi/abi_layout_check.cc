// The layout of every public struct of zero_c.h, pinned (as ONNX Runtime pins
// its API tables): a field moved, resized or inserted, or a struct resized,
// fails the build here instead of breaking clients built against an older
// header. Appending a field to a struct means adding its lines below (and
// updating the struct's sizeof); nothing that is here may change. Values are
// for LP64 (x86-64 and aarch64 Linux), the platforms zero is built for.
#include <cstddef>

#include "capi/abi_struct.h"
#include "zero_c.h"

static_assert(sizeof(size_t) == 8 && sizeof(void*) == 8, "zero_c.h layouts are pinned for LP64");
static_assert(sizeof(zero_status) == 4 && sizeof(zero_dtype) == 4 && sizeof(zero_optimizer) == 4,
              "C enums are int-sized");
// ZERO_MAX_DIMS sizes zero_param_info.shape. The engine has its own limit
// (kMaxDims in core/engine, also 8) that it cannot export; zero_c.cc refuses
// ndim > ZERO_MAX_DIMS before the engine sees a param, so the ABI's limit is
// this one, and the engine's must not be lower.
static_assert(ZERO_MAX_DIMS == 8, "ZERO_MAX_DIMS is part of the ABI (zero_param_info.shape)");
static_assert(sizeof(static_cast<zero_param_info*>(nullptr)->shape) ==
                  ZERO_MAX_DIMS * sizeof(int64_t),
              "zero_param_info.shape holds ZERO_MAX_DIMS sizes");

#define ZERO_PIN_SIZE(T, size, align)                                  \
  static_assert(sizeof(T) == (size), #T ": sizeof changed");           \
  static_assert(alignof(T) == (align), #T ": alignment changed")
#define ZERO_PIN_FIELD(T, f, offset, size)                               \
  static_assert(offsetof(T, f) == (offset), #T "." #f ": offset changed"); \
  static_assert(sizeof(static_cast<T*>(nullptr)->f) == (size), #T "." #f ": size changed")


ZERO_PIN_SIZE(zero_config, 144, 8);
ZERO_PIN_FIELD(zero_config, struct_size, 0, 8);
ZERO_PIN_FIELD(zero_config, stage, 8, 4);
ZERO_PIN_FIELD(zero_config, dtype, 12, 4);
ZERO_PIN_FIELD(zero_config, optimizer, 16, 4);
ZERO_PIN_FIELD(zero_config, lr, 20, 4);
ZERO_PIN_FIELD(zero_config, beta1, 24, 4);
ZERO_PIN_FIELD(zero_config, beta2, 28, 4);
ZERO_PIN_FIELD(zero_config, eps, 32, 4);
ZERO_PIN_FIELD(zero_config, weight_decay, 36, 4);
ZERO_PIN_FIELD(zero_config, momentum, 40, 4);
ZERO_PIN_FIELD(zero_config, gradient_accumulation_steps, 44, 4);
ZERO_PIN_FIELD(zero_config, gradient_clipping, 48, 4);
ZERO_PIN_FIELD(zero_config, reduce_bucket_size, 56, 8);
ZERO_PIN_FIELD(zero_config, allgather_bucket_size, 64, 8);
ZERO_PIN_FIELD(zero_config, overlap_comm, 72, 4);
ZERO_PIN_FIELD(zero_config, sub_group_size, 80, 8);
ZERO_PIN_FIELD(zero_config, stage3_max_live_parameters, 88, 8);
ZERO_PIN_FIELD(zero_config, stage3_prefetch_bucket_size, 96, 8);
ZERO_PIN_FIELD(zero_config, stage3_param_persistence_threshold, 104, 8);
ZERO_PIN_FIELD(zero_config, loss_scale, 112, 4);
ZERO_PIN_FIELD(zero_config, initial_scale_power, 116, 4);
ZERO_PIN_FIELD(zero_config, loss_scale_window, 120, 4);
ZERO_PIN_FIELD(zero_config, hysteresis, 124, 4);
ZERO_PIN_FIELD(zero_config, min_loss_scale, 128, 4);
ZERO_PIN_FIELD(zero_config, steps_per_print, 132, 4);
ZERO_PIN_FIELD(zero_config, comm_timeout_seconds, 136, 8);

ZERO_PIN_SIZE(zero_param_desc, 64, 8);  // 1.13 (1.0: 56)
ZERO_PIN_FIELD(zero_param_desc, struct_size, 0, 8);
ZERO_PIN_FIELD(zero_param_desc, name, 8, 8);
ZERO_PIN_FIELD(zero_param_desc, ndim, 16, 4);
ZERO_PIN_FIELD(zero_param_desc, shape, 24, 8);
ZERO_PIN_FIELD(zero_param_desc, dtype, 32, 4);
ZERO_PIN_FIELD(zero_param_desc, init, 40, 8);
ZERO_PIN_FIELD(zero_param_desc, trainable, 48, 4);
ZERO_PIN_FIELD(zero_param_desc, reserved_1_13, 52, 4);  // 1.13
ZERO_PIN_FIELD(zero_param_desc, use_muon, 56, 4);       // 1.13

ZERO_PIN_SIZE(zero_step_info, 56, 8);
ZERO_PIN_FIELD(zero_step_info, struct_size, 0, 8);
ZERO_PIN_FIELD(zero_step_info, boundary, 8, 4);
ZERO_PIN_FIELD(zero_step_info, skipped, 12, 4);
ZERO_PIN_FIELD(zero_step_info, global_step, 16, 8);
ZERO_PIN_FIELD(zero_step_info, skipped_steps, 24, 8);
ZERO_PIN_FIELD(zero_step_info, loss_scale, 32, 8);
ZERO_PIN_FIELD(zero_step_info, grad_norm, 40, 8);
ZERO_PIN_FIELD(zero_step_info, lr, 48, 8);

ZERO_PIN_SIZE(zero_stats, 232, 8);
ZERO_PIN_FIELD(zero_stats, struct_size, 0, 8);
ZERO_PIN_FIELD(zero_stats, rank, 8, 4);
ZERO_PIN_FIELD(zero_stats, world_size, 12, 4);
ZERO_PIN_FIELD(zero_stats, stage, 16, 4);
ZERO_PIN_FIELD(zero_stats, trainable_numel, 24, 8);
ZERO_PIN_FIELD(zero_stats, padded_numel, 32, 8);
ZERO_PIN_FIELD(zero_stats, master_bytes, 40, 8);
ZERO_PIN_FIELD(zero_stats, optimizer_bytes, 48, 8);
ZERO_PIN_FIELD(zero_stats, grad_bytes, 56, 8);
ZERO_PIN_FIELD(zero_stats, param_bytes, 64, 8);
ZERO_PIN_FIELD(zero_stats, frozen_bytes, 72, 8);
ZERO_PIN_FIELD(zero_stats, buffer_bytes, 80, 8);
ZERO_PIN_FIELD(zero_stats, live_gathered_bytes, 88, 8);
ZERO_PIN_FIELD(zero_stats, live_gathered_high_water, 96, 8);
ZERO_PIN_FIELD(zero_stats, sent_allgather, 104, 8);
ZERO_PIN_FIELD(zero_stats, sent_reduce_scatter, 112, 8);
ZERO_PIN_FIELD(zero_stats, sent_allreduce, 120, 8);
ZERO_PIN_FIELD(zero_stats, sent_broadcast, 128, 8);
ZERO_PIN_FIELD(zero_stats, sent_control, 136, 8);
ZERO_PIN_FIELD(zero_stats, collective_calls, 144, 8);
ZERO_PIN_FIELD(zero_stats, global_step, 152, 8);
ZERO_PIN_FIELD(zero_stats, skipped_steps, 160, 8);
ZERO_PIN_FIELD(zero_stats, micro_step, 168, 8);
ZERO_PIN_FIELD(zero_stats, sent_bytes_allgather, 176, 8);
ZERO_PIN_FIELD(zero_stats, sent_bytes_reduce_scatter, 184, 8);
ZERO_PIN_FIELD(zero_stats, sent_bytes_allreduce, 192, 8);
ZERO_PIN_FIELD(zero_stats, nvme_bytes, 200, 8);
ZERO_PIN_FIELD(zero_stats, nvme_read_bytes, 208, 8);
ZERO_PIN_FIELD(zero_stats, nvme_write_bytes, 216, 8);
ZERO_PIN_FIELD(zero_stats, nvme_direct_io, 224, 4);
ZERO_PIN_FIELD(zero_stats, nvme_uring, 228, 4);

ZERO_PIN_SIZE(zero_load_options, 16, 8);
ZERO_PIN_FIELD(zero_load_options, struct_size, 0, 8);
ZERO_PIN_FIELD(zero_load_options, load_optimizer_states, 8, 4);
ZERO_PIN_FIELD(zero_load_options, allow_missing, 12, 4);
ZERO_PIN_SIZE(zero_save_options, 24, 8);
ZERO_PIN_FIELD(zero_save_options, asynchronous, 8, 4);
ZERO_PIN_FIELD(zero_save_options, keep_last, 12, 4);
ZERO_PIN_FIELD(zero_save_options, exclude_frozen, 16, 4);  // 1.14
ZERO_PIN_SIZE(zero_preemption_options, 40, 8);
ZERO_PIN_FIELD(zero_preemption_options, signal, 8, 4);
ZERO_PIN_FIELD(zero_preemption_options, dir, 16, 8);
ZERO_PIN_FIELD(zero_preemption_options, tag, 24, 8);
ZERO_PIN_FIELD(zero_preemption_options, exit, 32, 4);
ZERO_PIN_FIELD(zero_preemption_options, exit_code, 36, 4);

ZERO_PIN_SIZE(zero_param_info, 96, 8);
ZERO_PIN_FIELD(zero_param_info, struct_size, 0, 8);
ZERO_PIN_FIELD(zero_param_info, name, 8, 8);
ZERO_PIN_FIELD(zero_param_info, ndim, 16, 4);
ZERO_PIN_FIELD(zero_param_info, shape, 24, 64);
ZERO_PIN_FIELD(zero_param_info, dtype, 88, 4);
ZERO_PIN_FIELD(zero_param_info, trainable, 92, 4);

ZERO_PIN_SIZE(zero_safetensors_options, 40, 8);
ZERO_PIN_FIELD(zero_safetensors_options, struct_size, 0, 8);
ZERO_PIN_FIELD(zero_safetensors_options, prefix_strip, 8, 8);
ZERO_PIN_FIELD(zero_safetensors_options, prefix_add, 16, 8);
ZERO_PIN_FIELD(zero_safetensors_options, bytes_read, 24, 8);
ZERO_PIN_FIELD(zero_safetensors_options, allow_missing, 32, 4);
ZERO_PIN_SIZE(zero_init_spec, 80, 8);
ZERO_PIN_FIELD(zero_init_spec, struct_size, 0, 8);
ZERO_PIN_FIELD(zero_init_spec, kind, 8, 4);
ZERO_PIN_FIELD(zero_init_spec, seed, 16, 8);
ZERO_PIN_FIELD(zero_init_spec, value, 24, 8);
ZERO_PIN_FIELD(zero_init_spec, low, 32, 8);
ZERO_PIN_FIELD(zero_init_spec, high, 40, 8);
ZERO_PIN_FIELD(zero_init_spec, mean, 48, 8);
ZERO_PIN_FIELD(zero_init_spec, std, 56, 8);
ZERO_PIN_FIELD(zero_init_spec, a, 64, 8);
ZERO_PIN_FIELD(zero_init_spec, fan_in, 72, 8);

ZERO_PIN_SIZE(zero_link_stats, 192, 8);
ZERO_PIN_FIELD(zero_link_stats, struct_size, 0, 8);
ZERO_PIN_FIELD(zero_link_stats, nodes, 8, 4);
ZERO_PIN_FIELD(zero_link_stats, replicas, 20, 4);
ZERO_PIN_FIELD(zero_link_stats, hpz_secondary_bytes, 24, 8);
ZERO_PIN_FIELD(zero_link_stats, intra_bytes_allgather, 32, 8);
ZERO_PIN_FIELD(zero_link_stats, inter_values_control, 184, 8);

ZERO_PIN_SIZE(zero_device_info, 56, 8);
ZERO_PIN_FIELD(zero_device_info, struct_size, 0, 8);
ZERO_PIN_FIELD(zero_device_info, kind, 8, 4);
ZERO_PIN_FIELD(zero_device_info, ordinal, 12, 4);
ZERO_PIN_FIELD(zero_device_info, host_accessible, 16, 4);
ZERO_PIN_FIELD(zero_device_info, dlpack_device_type, 20, 4);
ZERO_PIN_FIELD(zero_device_info, device_bytes, 24, 8);
ZERO_PIN_FIELD(zero_device_info, pinned_host_bytes, 48, 8);

// First published sizes (zero_c.h convention 3a): struct_size below these is
// refused; they never change.

static_assert(zero_capi::AbiStruct<zero_config>::kFirstSize == 144, "zero_config 1.0");
static_assert(zero_capi::AbiStruct<zero_param_desc>::kFirstSize == 56, "zero_param_desc 1.0");
static_assert(zero_capi::AbiStruct<zero_step_info>::kFirstSize == 56, "zero_step_info 1.0");
static_assert(zero_capi::AbiStruct<zero_stats>::kFirstSize == 176, "zero_stats 1.0");
static_assert(zero_capi::AbiStruct<zero_load_options>::kFirstSize == 16, "zero_load_options 1.0");
static_assert(zero_capi::AbiStruct<zero_param_info>::kFirstSize == 96, "zero_param_info 1.1");
static_assert(zero_capi::AbiStruct<zero_safetensors_options>::kFirstSize == 40,
              "zero_safetensors_options 1.4");
static_assert(zero_capi::AbiStruct<zero_init_spec>::kFirstSize == 80, "zero_init_spec 1.4");
static_assert(zero_capi::AbiStruct<zero_link_stats>::kFirstSize == 192, "zero_link_stats 1.5");
static_assert(zero_capi::AbiStruct<zero_device_info>::kFirstSize == 24, "zero_device_info 1.5");
static_assert(zero_capi::AbiStruct<zero_save_options>::kFirstSize == 16, "zero_save_options 1.11");
static_assert(zero_capi::AbiStruct<zero_preemption_options>::kFirstSize == 40,
              "zero_preemption_options 1.11");
static_assert(ZERO_DEVICE_CPU == 0 && ZERO_DEVICE_CUDA == 1 && ZERO_DEVICE_STANDIN == 2,
              "zero_device_kind values changed");
static_assert(ZERO_INIT_ZEROS == 0 && ZERO_INIT_ONES == 1 && ZERO_INIT_CONSTANT == 2 &&
                  ZERO_INIT_UNIFORM == 3 && ZERO_INIT_NORMAL == 4 && ZERO_INIT_TRUNC_NORMAL == 5 &&
                  ZERO_INIT_KAIMING_UNIFORM == 6 && ZERO_INIT_FAN_IN_UNIFORM == 7,
              "zero_init_kind values changed");

// Enum values are ABI too.
static_assert(ZERO_OK == 0 && ZERO_INVALID_ARGUMENT == 1 && ZERO_FAILED_PRECONDITION == 2 &&
                  ZERO_NOT_FOUND == 3 && ZERO_OUT_OF_MEMORY == 4 && ZERO_TIMEOUT == 5 &&
                  ZERO_IO_ERROR == 6 && ZERO_DATA_LOSS == 7 && ZERO_UNIMPLEMENTED == 8 &&
                  ZERO_INTERNAL == 9 && ZERO_ABORTED == 10 && ZERO_MISMATCH == 11 &&
                  ZERO_CANCELLED == 12,
              "zero_status values changed");
static_assert(ZERO_DTYPE_F32 == 0 && ZERO_DTYPE_F16 == 1 && ZERO_DTYPE_BF16 == 2,
              "zero_dtype values changed");
static_assert(ZERO_OPTIMIZER_ADAM == 0 && ZERO_OPTIMIZER_ADAMW == 1 && ZERO_OPTIMIZER_SGD == 2 &&
                  ZERO_OPTIMIZER_LION == 3 && ZERO_OPTIMIZER_ADAGRAD == 4 &&
                  ZERO_OPTIMIZER_MUON == 5,
              "zero_optimizer values changed");
static_assert(ZERO_MUON_AUTO == 0 && ZERO_MUON_ON == 1 && ZERO_MUON_OFF == 2,
              "zero_muon_use values changed");

// 1.5: observing a run.
ZERO_PIN_SIZE(zero_step_breakdown, 184, 8);
ZERO_PIN_FIELD(zero_step_breakdown, struct_size, 0, 8);
ZERO_PIN_FIELD(zero_step_breakdown, global_step, 8, 8);
ZERO_PIN_FIELD(zero_step_breakdown, micro_steps, 16, 4);
ZERO_PIN_FIELD(zero_step_breakdown, step_ms, 24, 8);
ZERO_PIN_FIELD(zero_step_breakdown, forward_ms, 32, 8);
ZERO_PIN_FIELD(zero_step_breakdown, publish_ms, 128, 8);
ZERO_PIN_FIELD(zero_step_breakdown, nvme_read_bytes, 136, 8);
ZERO_PIN_FIELD(zero_step_breakdown, nvme_write_bytes, 144, 8);
// 1.6: NVMe time.
ZERO_PIN_FIELD(zero_step_breakdown, nvme_read_ms, 152, 8);
ZERO_PIN_FIELD(zero_step_breakdown, nvme_write_ms, 160, 8);
ZERO_PIN_FIELD(zero_step_breakdown, nvme_exposed_ms, 168, 8);
ZERO_PIN_FIELD(zero_step_breakdown, nvme_hidden_ms, 176, 8);

ZERO_PIN_SIZE(zero_comm_log_entry, 80, 8);
ZERO_PIN_FIELD(zero_comm_log_entry, struct_size, 0, 8);
ZERO_PIN_FIELD(zero_comm_log_entry, op, 8, 4);
ZERO_PIN_FIELD(zero_comm_log_entry, control, 12, 4);
ZERO_PIN_FIELD(zero_comm_log_entry, bucket_bytes, 16, 8);
ZERO_PIN_FIELD(zero_comm_log_entry, sent_bytes, 40, 8);
ZERO_PIN_FIELD(zero_comm_log_entry, total_ms, 48, 8);
ZERO_PIN_FIELD(zero_comm_log_entry, busbw_gbs, 72, 8);

ZERO_PIN_SIZE(zero_memory_estimate, 120, 8);
ZERO_PIN_FIELD(zero_memory_estimate, struct_size, 0, 8);
ZERO_PIN_FIELD(zero_memory_estimate, trainable_numel, 8, 8);
ZERO_PIN_FIELD(zero_memory_estimate, host_bytes_per_node, 112, 8);
