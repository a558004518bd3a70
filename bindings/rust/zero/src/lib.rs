//! Safe Rust API of zero, a ZeRO (DeepSpeed-style sharded data parallel)
//! training runtime, over its C ABI (`capi/include/zero_c.h`, raw bindings in
//! the `zero-sys` crate).
//!
//! * [`Communicator`]: the ranks to shard over: one process
//!   ([`Communicator::new_self`]), MPI ([`Communicator::mpi_world`]) or threads
//!   of this process ([`Communicator::threads`]); NCCL on a GPU
//!   ([`Communicator::nccl`]).
//! * Devices: [`Engine::set_device`] puts the state on a GPU; its buffers are
//!   then read and written through [`DeviceSlice`] / [`DeviceSliceMut`]
//!   (never as host slices).
//! * [`Config`]: a DeepSpeed `ds_config.json` text or file, or
//!   [`Config::builder`].
//! * [`Engine`]: registers params ([`ParamDesc`] → [`ParamId`]), gathers them
//!   ([`Gathered`], released on drop), takes gradients ([`GradBuffer`]) and
//!   steps the optimizer ([`StepInfo`]); [`Stats`] reports memory and traffic,
//!   [`ParamInfo`] what was registered.
//! * Checkpoints: [`Engine::save`], [`Engine::load`] ([`LoadOptions`]), and
//!   [`export_safetensors`] of a saved checkpoint.
//! * Observing: [`Engine::step_breakdown`] ([`StepBreakdown`]),
//!   [`Engine::comm_log`] ([`CommLogEntry`]), [`Engine::comm_log_summary`];
//!   before launching, [`estimate_memory`] ([`MemoryEstimate`]).
//!
//! Every fallible call returns [`Result`]; an [`Error`] carries the C status
//! ([`Status`]) and the library's message. Handles are freed on drop, and
//! lifetimes make misuse a compile error: a communicator outlives its engines,
//! and an engine outlives (and is not stepped during) its gathered params.
//!
//! The crate links `libzero_c.so` built by Bazel (`bazel build
//! //capi:libzero_c.so`); set `ZERO_LIB_DIR` to use another directory.
#![deny(missing_docs)]

mod checkpoint;
mod comm;
mod config;
pub mod convert;
mod device;
mod engine;
mod error;
mod estimate;
mod generated;
mod progress;

pub use checkpoint::{
    export_safetensors, export_safetensors_with_progress, reshard, reshard_with_progress,
    LoadOptions, SaveOptions,
};
pub use progress::ProgressFn;
pub use comm::Communicator;
pub use config::{Config, ConfigBuilder, DType, Optimizer};
pub use device::{DeviceInfo, DeviceKind, DeviceSlice, DeviceSliceMut, Element};
pub use engine::{CommLogEntry, StepBreakdown};
pub use engine::{
    Engine, Gathered, GatheredInto, GatheredIntoMany, GradBuffer, InitSpec, LoadSafetensorsOptions, ParamData,
    ParamDataMut, ParamDesc, ParamId, ParamInfo, Stats, StepInfo,
};
pub use error::{Error, Result, Status};
pub use estimate::{estimate_memory, estimate_memory_params, Topology};
pub use generated::MemoryEstimate;

/// The version of the header these bindings were generated from, as
/// `ZERO_VERSION_CODE` spells it (major * 10000 + minor * 100 + patch).
pub const HEADER_VERSION: i32 = zero_sys::ZERO_VERSION_CODE as i32;

/// The loaded library's version, spelled like [`HEADER_VERSION`].
pub fn version() -> i32 {
    // SAFETY: no arguments, no state.
    unsafe { zero_sys::zero_version() }
}

/// Fails with [`Status::FailedPrecondition`] when the library's major version
/// differs from the header's (the header asks programs to refuse to run).
pub(crate) fn check_version() -> Result<()> {
    let lib = version();
    if lib / 10000 != HEADER_VERSION / 10000 {
        return Err(Error::new(
            Status::FailedPrecondition,
            format!("libzero_c version {lib} does not match the bindings' header version {HEADER_VERSION}"),
        ));
    }
    Ok(())
}
