//! The engine: one sharded training state, its params, gradients and steps.
use std::ffi::CString;
use std::ptr::{self, NonNull};

use zero_sys as sys;

use crate::comm::Communicator;
use crate::config::{Config, DType, Source};
use crate::device::{device_info, DeviceInfo};
use crate::error::{check, Error, Result, Status};

mod fill;
mod gather;
mod gather_many;
mod grads;
mod observe;
mod param_desc;
mod pretrained;

use fill::{fill_trampoline, FillState};
pub use gather::{Gathered, GatheredInto, ParamData, ParamDataMut};
pub use gather_many::GatheredIntoMany;
pub use grads::GradBuffer;
pub use param_desc::{InitSpec, ParamDesc, ParamId, ParamInfo};
pub use pretrained::LoadSafetensorsOptions;

// StepInfo and Stats mirror zero_step_info and zero_stats field for field;
// they are generated from the header (src/generated.rs).
pub use crate::generated::{CommLogEntry, Stats, StepBreakdown, StepInfo};

/// Each engine's tag, carried by its [`ParamId`]s.
static NEXT_ENGINE_TAG: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

#[derive(Clone, Copy, Debug)]
struct ParamMeta {
    numel: usize,
    dtype: DType,
}

fn wrong_dtype(id: ParamId, have: DType, want: &str) -> Error {
    Error::new(
        Status::InvalidArgument,
        format!("param id {}: dtype is {have:?}, not {want}", id.0),
    )
}

/// One sharded training state (`zero_engine_t`).
///
/// Lifecycle: [`new`](Engine::new), [`register_param`](Engine::register_param)
/// for every param, [`finalize`](Engine::finalize); then per micro-step
/// [`gather`](Engine::gather) params for the forward and backward passes,
/// write gradients through [`grad_buffer`](Engine::grad_buffer) and call
/// [`step`](Engine::step). Calls marked COLLECTIVE must be made by every rank
/// in the same order.
///
/// The engine borrows its [`Communicator`], so the communicator outlives it,
/// and it is used on the communicator's thread only (the engine is neither
/// `Send` nor `Sync`).
///
/// ```
/// use zero::{Communicator, Config, Engine, ParamDesc};
/// # fn main() -> zero::Result<()> {
/// let comm = Communicator::new_self()?;
/// let mut engine = Engine::new(&Config::builder().stage(3).build(), &comm)?;
/// let init = [0.1f32, 0.2, 0.3];
/// let w = engine.register_param(ParamDesc::new("w", &[3]).init(&init))?;
/// engine.finalize()?;
/// let loss = {
///     let guard = engine.gather(w)?;
///     let values = guard.as_f32()?;
///     values.iter().map(|v| v * v).sum::<f32>()
/// }; // the guard releases the gathered copy here
/// let mut grad = engine.grad_buffer(w)?;
/// for (g, v) in grad.as_f32_mut()?.iter_mut().zip(init) {
///     *g = 2.0 * v;
/// }
/// grad.ready()?;
/// let info = engine.step()?;
/// println!("loss {loss} global step {}", info.global_step);
/// # Ok(()) }
/// ```
///
/// A gathered param borrows the engine, so the engine can be neither dropped
/// nor stepped while the guard lives:
///
/// ```compile_fail,E0505
/// # fn main() -> zero::Result<()> {
/// let comm = zero::Communicator::new_self()?;
/// let mut engine = zero::Engine::new(&zero::Config::builder().build(), &comm)?;
/// let w = engine.register_param(zero::ParamDesc::new("w", &[3]))?;
/// engine.finalize()?;
/// let guard = engine.gather(w)?;
/// drop(engine); // error[E0505]: cannot move out of `engine` because it is borrowed
/// println!("{:?}", guard.as_f32()?);
/// # Ok(()) }
/// ```
///
/// ```compile_fail,E0502
/// # fn main() -> zero::Result<()> {
/// let comm = zero::Communicator::new_self()?;
/// let mut engine = zero::Engine::new(&zero::Config::builder().build(), &comm)?;
/// let w = engine.register_param(zero::ParamDesc::new("w", &[3]))?;
/// engine.finalize()?;
/// let guard = engine.gather(w)?;
/// engine.step()?; // error[E0502]: the optimizer would change gathered values
/// println!("{:?}", guard.as_f32()?);
/// # Ok(()) }
/// ```
///
/// And a slice read from a guard cannot outlive it (the release):
///
/// ```compile_fail,E0505
/// # fn main() -> zero::Result<()> {
/// let comm = zero::Communicator::new_self()?;
/// let mut engine = zero::Engine::new(&zero::Config::builder().build(), &comm)?;
/// let w = engine.register_param(zero::ParamDesc::new("w", &[3]))?;
/// engine.finalize()?;
/// let guard = engine.gather(w)?;
/// let values = guard.as_f32()?;
/// drop(guard); // releases the param
/// println!("{}", values[0]); // error[E0505]: `guard` moved while borrowed
/// # Ok(()) }
/// ```
pub struct Engine<'c> {
    raw: NonNull<sys::zero_engine_t>,
    comm: &'c Communicator,
    params: Vec<ParamMeta>,
    // Whether gathered params and gradient buffers are host memory (the CPU
    // device); if not, they are reached through DeviceSlice only.
    host_accessible: bool,
    // Fill closures of register_param_fill, boxed so the pointers handed to
    // the runtime stay put; kept until finalize returns (or the engine drops).
    #[allow(clippy::vec_box)] // the Vec may move; each Box must not
    fills: Vec<Box<FillState<'c>>>,
    // Params held by a live GatheredInto: the runtime may read that guard's
    // buffer until the param's last release, so a second gather_into of the
    // same param (whose guard could outlive the first) is refused here.
    held_into: std::cell::RefCell<std::collections::HashSet<i32>>,
    // Carried by this engine's ParamIds (ParamId::1).
    tag: u64,
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("rank", &self.comm.rank())
            .field("world_size", &self.comm.size())
            .field("num_params", &self.params.len())
            .finish()
    }
}

impl<'c> Engine<'c> {
    /// Creates an engine over `comm` (`zero_engine_create` or
    /// `zero_engine_create_json`). A bad configuration fails with
    /// [`Status::InvalidArgument`] and the key path in the message.
    pub fn new(config: &Config, comm: &'c Communicator) -> Result<Engine<'c>> {
        let mut raw = ptr::null_mut();
        // SAFETY: the config pointers are valid for the call (the library
        // copies what it keeps); `comm` outlives the engine by the borrow.
        check(unsafe {
            match &config.source {
                Source::Json(text) => {
                    sys::zero_engine_create_json(text.as_ptr(), comm.as_ptr(), &mut raw)
                }
                Source::Struct(c) => sys::zero_engine_create(c, comm.as_ptr(), &mut raw),
            }
        })?;
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::new(
                Status::Internal,
                "zero_engine_create returned OK and a NULL handle",
            )
        })?;
        let mut engine = Engine {
            raw,
            comm,
            params: Vec::new(),
            host_accessible: true,
            fills: Vec::new(),
            held_into: Default::default(),
            tag: NEXT_ENGINE_TAG.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        };
        engine.host_accessible = engine.device()?.host_accessible;
        Ok(engine)
    }

    /// Before any param is registered: keeps the state on device `kind`
    /// (`"cpu"` or `"cuda"`) `ordinal` (`zero_engine_set_device`). With
    /// `"cuda"`, gathered params and gradient buffers are device memory
    /// ([`Gathered::device_f32`], [`GradBuffer::device_f32_mut`]); a host
    /// communicator (MPI, threads) is staged through host memory.
    pub fn set_device(&mut self, kind: &str, ordinal: i32) -> Result<()> {
        let kind = CString::new(kind).map_err(|_| {
            Error::new(
                Status::InvalidArgument,
                "set_device: kind contains a NUL byte",
            )
        })?;
        // SAFETY: live handle; `kind` is NUL-terminated for the call.
        check(unsafe { sys::zero_engine_set_device(self.raw.as_ptr(), kind.as_ptr(), ordinal) })?;
        self.host_accessible = self.device()?.host_accessible;
        Ok(())
    }

    /// Where the state lives (`zero_engine_device`).
    pub fn device(&self) -> Result<DeviceInfo> {
        device_info(self.raw.as_ptr())
    }

    /// The communicator this engine shards over.
    pub fn communicator(&self) -> &'c Communicator {
        self.comm
    }

    /// The working dtype of trainable params and gradients (`zero_engine_dtype`;
    /// from `fp16`/`bf16` in a JSON config).
    pub fn dtype(&self) -> Result<DType> {
        let mut raw = sys::ZERO_DTYPE_F32;
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::zero_engine_dtype(self.raw.as_ptr(), &mut raw) })?;
        DType::from_raw(raw).ok_or_else(|| {
            Error::new(
                Status::Internal,
                format!("zero_engine_dtype returned unknown dtype {raw}"),
            )
        })
    }

    /// Registers a parameter before [`finalize`](Engine::finalize). Every rank
    /// registers the same params in the same order with the same values.
    pub fn register_param(&mut self, desc: ParamDesc<'_>) -> Result<ParamId> {
        self.register(desc, None)
    }

    /// Registers a parameter whose initial values `fill` produces during
    /// [`finalize`](Engine::finalize) (`zero_engine_register_param_fill`, C
    /// ABI 1.4), so no rank ever holds the whole model unless it must.
    ///
    /// `fill(name, offset, out)` writes elements `[offset, offset +
    /// out.len())` of the param (flat, row-major) as fp32. The runtime asks
    /// only for the elements this rank holds, in pieces of at most 2^20
    /// elements, and may ask for a piece twice. Returning `Err` (or
    /// panicking: the panic is caught, never unwinding into C) fails
    /// `finalize` on every rank with an error naming the param and the
    /// closure's message. The closure is dropped when `finalize` returns.
    /// `desc` must have neither [`ParamDesc::init`] nor
    /// [`ParamDesc::init_spec`]. Every rank registers the param with a fill.
    ///
    /// ```
    /// # fn main() -> zero::Result<()> {
    /// let comm = zero::Communicator::new_self()?;
    /// let mut engine = zero::Engine::new(&zero::Config::builder().stage(3).build(), &comm)?;
    /// let w = engine.register_param_fill(zero::ParamDesc::new("w", &[2, 3]), |_name, offset, out| {
    ///     for (i, v) in out.iter_mut().enumerate() {
    ///         *v = (offset + i as i64) as f32;
    ///     }
    ///     Ok(())
    /// })?;
    /// engine.finalize()?;
    /// assert_eq!(engine.master(w)?, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    /// # Ok(()) }
    /// ```
    pub fn register_param_fill<F>(&mut self, desc: ParamDesc<'_>, fill: F) -> Result<ParamId>
    where
        F: FnMut(&str, i64, &mut [f32]) -> std::result::Result<(), String> + 'c,
    {
        if desc.init.is_some() || desc.init_spec.is_some() {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "param '{}': a fill closure excludes init and init_spec",
                    desc.name
                ),
            ));
        }
        let state = Box::new(FillState {
            name: desc.name.to_string(),
            fill: Box::new(fill),
            error: None,
        });
        self.register(desc, Some(state))
    }

    fn register(
        &mut self,
        desc: ParamDesc<'_>,
        fill: Option<Box<FillState<'c>>>,
    ) -> Result<ParamId> {
        let dtype = match desc.dtype {
            Some(dtype) => dtype,
            None => self.dtype()?,
        };
        let built = desc.to_raw(dtype)?;
        let numel = built.numel;
        if let Some(init) = desc.init {
            if init.len() != numel {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!(
                        "param '{}': init has {} values, shape {:?} needs {numel}",
                        desc.name,
                        init.len(),
                        desc.shape
                    ),
                ));
            }
        }
        let mut raw_desc = built.raw;
        raw_desc.init = desc.init.map_or(ptr::null(), <[f32]>::as_ptr);
        let mut id = -1;
        // SAFETY: every pointer in `raw_desc` is valid for the call; `init`
        // holds exactly numel floats (checked above). The library copies.
        match (fill, desc.init_spec) {
            (Some(mut state), _) => {
                let user = &mut *state as *mut FillState<'c> as *mut std::os::raw::c_void;
                // SAFETY: as above; `user` points into a Box kept in
                // `self.fills` until finalize returns or the engine drops.
                check(unsafe {
                    sys::zero_engine_register_param_fill(
                        self.raw.as_ptr(),
                        &raw_desc,
                        Some(fill_trampoline),
                        user,
                        &mut id,
                    )
                })?;
                self.fills.push(state);
            }
            (None, Some(spec)) => {
                let raw_spec = spec.raw();
                // SAFETY: as above; `raw_spec` is a full zero_init_spec.
                check(unsafe {
                    sys::zero_engine_register_param_init(
                        self.raw.as_ptr(),
                        &raw_desc,
                        &raw_spec,
                        &mut id,
                    )
                })?
            }
            (None, None) => check(unsafe {
                sys::zero_engine_register_param(self.raw.as_ptr(), &raw_desc, &mut id)
            })?,
        }
        if id != self.params.len() as i32 {
            return Err(Error::new(
                Status::Internal,
                format!(
                    "param '{}' got id {id}, expected {}",
                    desc.name,
                    self.params.len()
                ),
            ));
        }
        self.params.push(ParamMeta { numel, dtype });
        Ok(ParamId(id, self.tag))
    }

    /// [`finalize`](Engine::finalize) reporting the NVMe tier's preallocation
    /// and first write (`"nvme preallocate"`, `"nvme initialize"`) to `f`
    /// (see [`ProgressFn`](crate::ProgressFn)); a cancel fails it with
    /// [`Status::Cancelled`] and leaves the engine unusable.
    pub fn finalize_with_progress(&mut self, f: &mut crate::ProgressFn<'_>) -> Result<()> {
        let raw = self.as_ptr();
        crate::progress::with_progress(f, |cb, user| {
            // SAFETY: live handle; the callback state outlives finalize, and
            // is unset before with_progress returns.
            check(unsafe { sys::zero_engine_set_progress(raw, cb, user) })?;
            let r = self.finalize();
            // SAFETY: live handle.
            check(unsafe { sys::zero_engine_set_progress(raw, None, ptr::null_mut()) })?;
            r
        })
    }

    /// COLLECTIVE. Lays out and allocates the shards. Fails with
    /// [`Status::Mismatch`] on every rank if ranks registered different params.
    /// Fill closures ([`register_param_fill`](Engine::register_param_fill))
    /// run here; a failing one fails finalize on every rank, and on the rank
    /// where it failed the message also carries the closure's error.
    pub fn finalize(&mut self) -> Result<()> {
        // SAFETY: the handle is live and used by this thread only; the fill
        // states in `self.fills` outlive the call.
        let r = check(unsafe { sys::zero_engine_finalize(self.raw.as_ptr()) });
        let fills = std::mem::take(&mut self.fills);
        match r {
            Ok(()) => Ok(()),
            Err(e) => {
                let local: Vec<String> = fills.into_iter().filter_map(|f| f.error).collect();
                if local.is_empty() {
                    Err(e)
                } else {
                    Err(Error::new(
                        e.status(),
                        format!("{} ({})", e.message(), local.join("; ")),
                    ))
                }
            }
        }
    }

    /// Number of registered params.
    pub fn num_params(&self) -> Result<usize> {
        let mut count = 0;
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::zero_engine_num_params(self.raw.as_ptr(), &mut count) })?;
        Ok(count as usize)
    }

    /// The id of the param registered as `name`; [`Status::NotFound`] if none.
    pub fn find_param(&self, name: &str) -> Result<ParamId> {
        let cname = CString::new(name).map_err(|_| {
            Error::new(
                Status::InvalidArgument,
                format!("param name {name:?} contains a NUL byte"),
            )
        })?;
        let mut id = -1;
        // SAFETY: live handle, NUL-terminated name, valid out pointer.
        check(unsafe { sys::zero_engine_find_param(self.raw.as_ptr(), cname.as_ptr(), &mut id) })?;
        let id = ParamId(id, self.tag);
        self.meta(id)?;
        Ok(id)
    }

    /// The ids of every registered param, in registration order.
    pub fn params(&self) -> impl Iterator<Item = ParamId> + '_ {
        let tag = self.tag;
        (0..self.params.len()).map(move |i| ParamId(i as i32, tag))
    }

    /// The id of the param registered `index`-th; [`Status::InvalidArgument`]
    /// past the last.
    pub fn param_id(&self, index: usize) -> Result<ParamId> {
        let id = ParamId(i32::try_from(index).unwrap_or(i32::MAX), self.tag);
        self.meta(id)?;
        Ok(id)
    }

    /// Optimizer steps taken, skipped ones excluded (`zero_stats`'
    /// global_step; a loaded checkpoint's count included).
    pub fn global_step(&self) -> Result<u64> {
        Ok(u64::try_from(self.stats()?.global_step).unwrap_or(0))
    }

    /// The param's element count.
    pub fn param_numel(&self, id: ParamId) -> Result<usize> {
        self.meta(id)?;
        let mut numel = 0;
        // SAFETY: live handle, valid out pointer; the library checks `id`.
        check(unsafe { sys::zero_engine_param_numel(self.raw.as_ptr(), id.0, &mut numel) })?;
        Ok(numel as usize)
    }

    /// The dtype the param was registered with.
    pub fn param_dtype(&self, id: ParamId) -> Result<DType> {
        Ok(self.meta(id)?.dtype)
    }

    fn meta(&self, id: ParamId) -> Result<ParamMeta> {
        if id.1 != self.tag {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "param id {} belongs to another engine (tag {}), not this one (tag {})",
                    id.0, id.1, self.tag
                ),
            ));
        }
        usize::try_from(id.0)
            .ok()
            .and_then(|i| self.params.get(i).copied())
            .ok_or_else(|| {
                Error::new(
                    Status::InvalidArgument,
                    format!(
                        "param id {} out of range: {} params registered",
                        id.0,
                        self.params.len()
                    ),
                )
            })
    }

    /// The loss scale to multiply the loss by before backward (1 unless fp16).
    pub fn loss_scale(&self) -> Result<f64> {
        let mut scale = 0.0;
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::zero_engine_loss_scale(self.raw.as_ptr(), &mut scale) })?;
        Ok(scale)
    }

    /// The learning rate of 0-based optimizer step `step` (skipped steps not
    /// counted, as [`StepInfo::global_step`]) from the runtime's schedule
    /// (the config's `scheduler`, else the optimizer's lr); the next update's
    /// is `lr_for_step(global_step)`. Not collective.
    pub fn lr_for_step(&self, step: i64) -> Result<f64> {
        let mut lr = 0.0;
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::zero_engine_lr_for_step(self.raw.as_ptr(), step, &mut lr) })?;
        Ok(lr)
    }

    /// COLLECTIVE. Ends a micro-step; every `gradient_accumulation_steps`-th
    /// call reduces gradients and applies the optimizer. Gradients not handed
    /// in count as zero. A live guard borrows the engine, so this cannot run
    /// while a param is gathered; at stage 3 a guard leaked with
    /// `std::mem::forget` makes the boundary step fail
    /// ([`Status::FailedPrecondition`], naming the param) instead of
    /// leaving its values stale (C ABI 1.8).
    pub fn step(&mut self) -> Result<StepInfo> {
        let mut info = sys::zero_step_info_init();
        // SAFETY: live handle, valid out pointer with struct_size set.
        check(unsafe { sys::zero_engine_step(self.raw.as_ptr(), &mut info) })?;
        Ok(StepInfo::from_raw(&info))
    }

    /// Adds to the sample count behind the samples/s of the periodic print.
    pub fn report_samples(&mut self, samples: u64) -> Result<()> {
        let samples = i64::try_from(samples).unwrap_or(i64::MAX);
        // SAFETY: live handle.
        check(unsafe { sys::zero_engine_report_samples(self.raw.as_ptr(), samples) })
    }

    /// COLLECTIVE in stages 1-3. Copies the param's full fp32 master weights
    /// into `out`, which must hold exactly its element count.
    pub fn read_master(&mut self, id: ParamId, out: &mut [f32]) -> Result<()> {
        let meta = self.meta(id)?;
        if out.len() != meta.numel {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "param id {}: output holds {} floats, param has {}",
                    id.0,
                    out.len(),
                    meta.numel
                ),
            ));
        }
        // SAFETY: live handle; `out` holds numel floats.
        check(unsafe { sys::zero_engine_read_master(self.raw.as_ptr(), id.0, out.as_mut_ptr()) })
    }

    /// NOT collective. Sets the param to `values` (numel floats, the same
    /// on every rank): the fp32 master weights this rank owns and every
    /// working copy it holds (`zero_engine_write_master`). Refused while the
    /// param is gathered or mid-accumulation.
    pub fn write_master(&mut self, id: ParamId, values: &[f32]) -> Result<()> {
        let meta = self.meta(id)?;
        if values.len() != meta.numel {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "param id {}: {} values given, param has {}",
                    id.0,
                    values.len(),
                    meta.numel
                ),
            ));
        }
        // SAFETY: live handle; `values` holds numel floats.
        check(unsafe { sys::zero_engine_write_master(self.raw.as_ptr(), id.0, values.as_ptr()) })
    }

    /// NOT collective (C ABI 1.5). Like [`Engine::write_master`] for the
    /// `values.len()` elements starting at flat element `offset` of the
    /// param only (`zero_engine_write_master_range`): no rank needs the whole
    /// param, e.g. one row of a stage-3 embedding. A range outside the param
    /// is [`Status::InvalidArgument`] naming it.
    pub fn write_master_range(&mut self, id: ParamId, offset: usize, values: &[f32]) -> Result<()> {
        self.meta(id)?;
        // SAFETY: live handle; `values` holds values.len() floats, and the
        // library checks the range against the param.
        check(unsafe {
            sys::zero_engine_write_master_range(
                self.raw.as_ptr(),
                id.0,
                offset as i64,
                values.len() as i64,
                values.as_ptr(),
            )
        })
    }

    /// COLLECTIVE in stages 1-3. The param's full fp32 master weights.
    pub fn master(&mut self, id: ParamId) -> Result<Vec<f32>> {
        let mut out = vec![0.0; self.meta(id)?.numel];
        self.read_master(id, &mut out)?;
        Ok(out)
    }

    /// What the runtime registered for a param: name, shape, dtype,
    /// trainable (`zero_engine_param_info`). [`Status::InvalidArgument`] for
    /// an unknown id.
    pub fn param_info(&self, id: ParamId) -> Result<ParamInfo> {
        self.meta(id)?;
        let mut raw = sys::zero_param_info_init();
        // SAFETY: live handle, valid out pointer with struct_size set.
        check(unsafe { sys::zero_engine_param_info(self.raw.as_ptr(), id.0, &mut raw) })?;
        let internal = |what: String| Error::new(Status::Internal, what);
        let max_dims = sys::ZERO_MAX_DIMS as i32;
        if raw.name.is_null() || !(0..=max_dims).contains(&raw.ndim) {
            return Err(internal(format!(
                "zero_engine_param_info({}) returned no name or ndim {}",
                id.0, raw.ndim
            )));
        }
        // SAFETY: non-NULL, NUL-terminated, owned by the engine, which lives;
        // copied at once.
        let name = unsafe { std::ffi::CStr::from_ptr(raw.name) }
            .to_string_lossy()
            .into_owned();
        let shape = raw.shape[..raw.ndim as usize]
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<Vec<usize>, _>>()
            .map_err(|_| internal(format!("param '{name}': negative size in {:?}", raw.shape)))?;
        let dtype = DType::from_raw(raw.dtype)
            .ok_or_else(|| internal(format!("param '{name}': unknown dtype {}", raw.dtype)))?;
        Ok(ParamInfo {
            id,
            name,
            shape,
            dtype,
            trainable: raw.trainable != 0,
        })
    }

    /// How many [`step`](Engine::step) calls make one optimizer step, as the
    /// runtime resolved it (`"auto"` and batch arithmetic applied).
    pub fn gradient_accumulation_steps(&self) -> Result<u32> {
        let mut steps = 0;
        // SAFETY: live handle, valid out pointer.
        check(unsafe {
            sys::zero_engine_gradient_accumulation_steps(self.raw.as_ptr(), &mut steps)
        })?;
        u32::try_from(steps).map_err(|_| {
            Error::new(
                Status::Internal,
                format!("gradient_accumulation_steps is {steps}"),
            )
        })
    }

    /// The C handle, for the other modules of this crate.
    pub(crate) fn as_ptr(&self) -> *mut sys::zero_engine_t {
        self.raw.as_ptr()
    }
}

impl Drop for Engine<'_> {
    fn drop(&mut self) {
        // SAFETY: we own the handle; guards borrow `self`, so none is alive.
        unsafe { sys::zero_engine_destroy(self.raw.as_ptr()) }
    }
}
