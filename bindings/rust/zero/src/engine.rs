//! The engine: one sharded training state, its params, gradients and steps.
use std::ffi::CString;
use std::ptr::{self, NonNull};

use zero_sys as sys;

use crate::comm::Communicator;
use crate::config::{Config, DType, Source};
use crate::device::{device_info, DeviceInfo, DeviceSlice, DeviceSliceMut, Element};
use crate::error::{check, Error, Result, Status};

/// Identifies a registered parameter of one [`Engine`]: 0, 1, ... in
/// registration order, and the engine it belongs to: an id handed to another
/// engine is refused ([`Status::InvalidArgument`]), never read as that
/// engine's param of the same index. Get them from
/// [`register_param`](Engine::register_param),
/// [`find_param`](Engine::find_param), [`params`](Engine::params) or
/// [`param_id`](Engine::param_id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamId(i32, u64);

impl ParamId {
    /// The position in registration order.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Each engine's tag, carried by its [`ParamId`]s.
static NEXT_ENGINE_TAG: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Describes one parameter for [`Engine::register_param`].
///
/// ```
/// let init = [0.5f32; 6];
/// let desc = zero::ParamDesc::new("fc.weight", &[2, 3]).init(&init);
/// # let _ = desc;
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ParamDesc<'a> {
    name: &'a str,
    shape: &'a [usize],
    dtype: Option<DType>,
    init: Option<&'a [f32]>,
    init_spec: Option<InitSpec>,
    trainable: bool,
}

/// Initial values described, not copied (C ABI 1.4, `zero_init_spec`):
/// element i of a param is a function of (seed, the param's name, i) alone
/// (Philox4x32-10), the same at every world size and stage; each rank
/// computes only the elements it holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InitSpec {
    /// All zeros (also what a param with no init gets).
    Zeros,
    /// All ones (LayerNorm's weight).
    Ones,
    /// Every element `value`.
    Constant(f64),
    /// U(low, high).
    Uniform {
        /// Lower bound.
        low: f64,
        /// Upper bound.
        high: f64,
        /// Philox key.
        seed: u64,
    },
    /// N(mean, std); nn.Embedding's weight is N(0, 1).
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
        /// Philox key.
        seed: u64,
    },
    /// N(mean, std) restricted to [low, high].
    TruncNormal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
        /// Lower bound.
        low: f64,
        /// Upper bound.
        high: f64,
        /// Philox key.
        seed: u64,
    },
    /// U(-b, b), b = sqrt(6 / ((1 + a^2) fan_in)); a = sqrt(5) is
    /// nn.Linear's weight default.
    KaimingUniform {
        /// Negative slope.
        a: f64,
        /// Inputs per output; 0 takes it from the shape.
        fan_in: i64,
        /// Philox key.
        seed: u64,
    },
    /// U(-1/sqrt(fan_in), 1/sqrt(fan_in)): nn.Linear's bias default.
    FanInUniform {
        /// Inputs of the layer.
        fan_in: i64,
        /// Philox key.
        seed: u64,
    },
}

impl InitSpec {
    /// torch's nn.Linear weight default.
    pub fn linear_weight(seed: u64) -> InitSpec {
        InitSpec::KaimingUniform {
            a: 5f64.sqrt(),
            fan_in: 0,
            seed,
        }
    }

    /// torch's nn.Linear bias default for a layer of `fan_in` inputs.
    pub fn linear_bias(fan_in: i64, seed: u64) -> InitSpec {
        InitSpec::FanInUniform { fan_in, seed }
    }

    fn raw(&self) -> sys::zero_init_spec {
        let mut r = sys::zero_init_spec_init();
        match *self {
            InitSpec::Zeros => r.kind = sys::ZERO_INIT_ZEROS,
            InitSpec::Ones => r.kind = sys::ZERO_INIT_ONES,
            InitSpec::Constant(v) => {
                r.kind = sys::ZERO_INIT_CONSTANT;
                r.value = v;
            }
            InitSpec::Uniform { low, high, seed } => {
                r.kind = sys::ZERO_INIT_UNIFORM;
                r.low = low;
                r.high = high;
                r.seed = seed;
            }
            InitSpec::Normal { mean, std, seed } => {
                r.kind = sys::ZERO_INIT_NORMAL;
                r.mean = mean;
                r.std = std;
                r.seed = seed;
            }
            InitSpec::TruncNormal {
                mean,
                std,
                low,
                high,
                seed,
            } => {
                r.kind = sys::ZERO_INIT_TRUNC_NORMAL;
                r.mean = mean;
                r.std = std;
                r.low = low;
                r.high = high;
                r.seed = seed;
            }
            InitSpec::KaimingUniform { a, fan_in, seed } => {
                r.kind = sys::ZERO_INIT_KAIMING_UNIFORM;
                r.a = a;
                r.fan_in = fan_in;
                r.seed = seed;
            }
            InitSpec::FanInUniform { fan_in, seed } => {
                r.kind = sys::ZERO_INIT_FAN_IN_UNIFORM;
                r.fan_in = fan_in;
                r.seed = seed;
            }
        }
        r
    }
}

impl<'a> ParamDesc<'a> {
    /// A trainable param named `name` (unique) of `shape` (0 to 8 sizes, each
    /// at least 1), of the engine's working dtype, initialized to zeros.
    pub fn new(name: &'a str, shape: &'a [usize]) -> ParamDesc<'a> {
        ParamDesc {
            name,
            shape,
            dtype: None,
            init: None,
            init_spec: None,
            trainable: true,
        }
    }

    /// Initial values described by `spec` instead of copied (C ABI 1.4);
    /// not with [`ParamDesc::init`].
    pub fn init_spec(mut self, spec: InitSpec) -> ParamDesc<'a> {
        self.init_spec = Some(spec);
        self
    }

    /// The param's dtype (default: the engine's, [`Engine::dtype`]); a
    /// trainable param must use the engine's dtype, a frozen one may differ.
    pub fn dtype(mut self, dtype: DType) -> ParamDesc<'a> {
        self.dtype = Some(dtype);
        self
    }

    /// Initial values, fp32, one per element in row-major order (copied).
    pub fn init(mut self, values: &'a [f32]) -> ParamDesc<'a> {
        self.init = Some(values);
        self
    }

    /// `false` freezes the param: no gradient and no optimizer state.
    pub fn trainable(mut self, trainable: bool) -> ParamDesc<'a> {
        self.trainable = trainable;
        self
    }

    fn numel(&self) -> Result<usize> {
        let invalid = |msg: String| Error::new(Status::InvalidArgument, msg);
        if self.shape.len() > sys::ZERO_MAX_DIMS as usize {
            return Err(invalid(format!(
                "param '{}': ndim must be 0..{}, got {}",
                self.name,
                sys::ZERO_MAX_DIMS,
                self.shape.len()
            )));
        }
        let mut numel: usize = 1;
        for &d in self.shape {
            if d == 0 || i64::try_from(d).is_err() {
                return Err(invalid(format!(
                    "param '{}': every size must be >= 1, shape is {:?}",
                    self.name, self.shape
                )));
            }
            numel = numel
                .checked_mul(d)
                .filter(|&n| i64::try_from(n).is_ok())
                .ok_or_else(|| {
                    invalid(format!(
                        "param '{}': shape {:?} overflows",
                        self.name, self.shape
                    ))
                })?;
        }
        Ok(numel)
    }
}

// StepInfo and Stats mirror zero_step_info and zero_stats field for field;
// they are generated from the header (src/generated.rs).
pub use crate::generated::{CommLogEntry, Stats, StepBreakdown, StepInfo};

/// What was registered for a param ([`Engine::param_info`],
/// `zero_param_info`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamInfo {
    /// The param's id.
    pub id: ParamId,
    /// Its unique name.
    pub name: String,
    /// Its full (unsharded) shape; empty for a 0-d param.
    pub shape: Vec<usize>,
    /// The dtype of its working copy.
    pub dtype: DType,
    /// `false`: frozen, no gradient or optimizer state.
    pub trainable: bool,
}

#[derive(Clone, Copy, Debug)]
struct ParamMeta {
    numel: usize,
    dtype: DType,
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

/// The closure type of [`Engine::register_param_fill`].
type FillFn<'c> = dyn FnMut(&str, i64, &mut [f32]) -> std::result::Result<(), String> + 'c;

struct FillState<'c> {
    name: String,
    fill: Box<FillFn<'c>>,
    // The first error or panic message, reported by finalize.
    error: Option<String>,
}

// Called by the runtime during zero_engine_finalize, on the calling thread.
unsafe extern "C" fn fill_trampoline(
    user: *mut std::os::raw::c_void,
    name: *const std::os::raw::c_char,
    offset: i64,
    count: i64,
    out: *mut f32,
) -> i32 {
    // Nothing may unwind into C: a panic is caught and becomes an error.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if user.is_null() || (count > 0 && out.is_null()) || count < 0 {
            return 1;
        }
        // SAFETY: `user` is the FillState registered with this callback,
        // boxed and alive until finalize returns; finalize borrows the engine
        // mutably, so nothing else touches it meanwhile.
        let state = unsafe { &mut *(user as *mut FillState<'_>) };
        let name = if name.is_null() {
            state.name.clone()
        } else {
            // SAFETY: the runtime passes a NUL-terminated name.
            unsafe { std::ffi::CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        };
        let out: &mut [f32] = if count == 0 {
            &mut []
        } else {
            // SAFETY: the runtime passes `count` writable floats at `out`.
            unsafe { std::slice::from_raw_parts_mut(out, count as usize) }
        };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            (state.fill)(&name, offset, out)
        }));
        let msg = match r {
            Ok(Ok(())) => return 0,
            Ok(Err(msg)) => msg,
            Err(payload) => {
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string payload".to_string());
                format!("panicked: {what}")
            }
        };
        if state.error.is_none() {
            state.error = Some(format!(
                "fill for param '{name}' [{offset}, {}): {msg}",
                offset + count
            ));
        }
        1
    }));
    result.unwrap_or(1)
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
        let numel = desc.numel()?;
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
        let name = CString::new(desc.name).map_err(|_| {
            Error::new(
                Status::InvalidArgument,
                format!("param name {:?} contains a NUL byte", desc.name),
            )
        })?;
        let dtype = match desc.dtype {
            Some(dtype) => dtype,
            None => self.dtype()?,
        };
        let shape: Vec<i64> = desc.shape.iter().map(|&d| d as i64).collect();
        let mut raw_desc = sys::zero_param_desc_init();
        raw_desc.name = name.as_ptr();
        raw_desc.ndim = shape.len() as i32;
        raw_desc.shape = if shape.is_empty() {
            ptr::null()
        } else {
            shape.as_ptr()
        };
        raw_desc.dtype = dtype.raw();
        raw_desc.init = desc.init.map_or(ptr::null(), <[f32]>::as_ptr);
        raw_desc.trainable = desc.trainable as i32;
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

    /// COLLECTIVE (`zero_engine_load_safetensors`, C ABI 1.4). After
    /// [`finalize`](Engine::finalize), with no param gathered: sets params
    /// from `path`, a `.safetensors` file or a Hugging Face
    /// `*.safetensors.index.json`. F32, F16 and BF16 tensors load; each rank
    /// reads only the elements it holds. Every name, shape and dtype is
    /// checked before anything is written: a missing tensor is
    /// [`Status::NotFound`] naming the param (unless
    /// [`allow_missing`](LoadSafetensorsOptions::allow_missing)), a wrong
    /// shape or dtype [`Status::InvalidArgument`], a corrupt file
    /// [`Status::DataLoss`]. Returns the tensor bytes this rank read.
    pub fn load_safetensors(
        &mut self,
        path: impl AsRef<std::path::Path>,
        options: &LoadSafetensorsOptions,
    ) -> Result<i64> {
        let invalid = |what: &str, v: &str| {
            Error::new(
                Status::InvalidArgument,
                format!("{what} {v:?} contains a NUL byte"),
            )
        };
        let path_str = path.as_ref().to_string_lossy().into_owned();
        let c_path = CString::new(path_str.as_str()).map_err(|_| invalid("path", &path_str))?;
        let opt_c = |v: &Option<String>, what: &str| -> Result<Option<CString>> {
            v.as_deref()
                .map(|s| CString::new(s).map_err(|_| invalid(what, s)))
                .transpose()
        };
        let strip = opt_c(&options.prefix_strip, "prefix_strip")?;
        let add = opt_c(&options.prefix_add, "prefix_add")?;
        let mut bytes: i64 = 0;
        let mut raw = sys::zero_safetensors_options_init();
        raw.prefix_strip = strip.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        raw.prefix_add = add.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        raw.bytes_read = &mut bytes;
        raw.allow_missing = options.allow_missing as i32;
        // SAFETY: live handle; every pointer in `raw` is valid for the call.
        check(unsafe {
            sys::zero_engine_load_safetensors(self.raw.as_ptr(), c_path.as_ptr(), &raw)
        })?;
        Ok(bytes)
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

    /// COLLECTIVE in stage 3. Gathers the param's full working copy and
    /// returns a guard that reads it and releases it when dropped. Gathers may
    /// nest: several guards, of the same or different params, may live at once.
    pub fn gather(&self, id: ParamId) -> Result<Gathered<'_>> {
        let meta = self.meta(id)?;
        let mut data = ptr::null_mut();
        // SAFETY: live handle, valid out pointer. `&self` suffices: the engine
        // is not `Sync`, so no other call runs concurrently, and every call
        // that could change gathered values takes `&mut self`.
        check(unsafe { sys::zero_engine_gather(self.raw.as_ptr(), id.0, &mut data) })?;
        let guard = Gathered {
            engine: self,
            id,
            meta,
            data: data as *const u8,
            host: self.host_accessible,
        };
        guard.check_pointer()?;
        Ok(guard)
    }

    /// COLLECTIVE in stage 3 (C ABI 1.7, `zero_engine_gather_into`): gathers
    /// the param's full working copy into `out`, whose variant states the
    /// dtype (the param's: fp16 and bf16 bits are both `u16`, so it is
    /// checked) and whose length must be the param's. On a host device a
    /// param not gathered already is all-gathered straight into `out` (no
    /// copy out of a runtime buffer); a prefetched one is copied from its
    /// prefetch buffer. The guard reads `out` and releases the gather when
    /// dropped; it borrows `out` mutably meanwhile, because the runtime may
    /// read it until the release. It counts as a gather (live budget,
    /// prefetch), nests with [`gather`](Engine::gather) of the param taken
    /// first; a `gather` of a param held this way is refused by the runtime,
    /// and so (here) is a second `gather_into` of it while the guard lives.
    /// Stages 0-2 (C ABI 1.8): a copy of the resident working copy, so one
    /// code path serves every stage. A copy is not updated by the
    /// optimizer; the guard borrows the engine, so [`Engine::step`] cannot
    /// run while it lives, and a guard leaked with `std::mem::forget` makes
    /// the step at the accumulation boundary fail naming the param (as a
    /// leaked [`Gathered`] does at stage 3), never train on stale values.
    pub fn gather_into<'b>(
        &self,
        id: ParamId,
        out: ParamDataMut<'b>,
    ) -> Result<GatheredInto<'_, 'b>> {
        self.meta(id)?;
        let (dtype, ptr, len, bytes) = match out {
            ParamDataMut::F32(v) => (DType::F32, v.as_mut_ptr() as *mut u8, v.len(), v.len() * 4),
            ParamDataMut::F16(v) => (DType::F16, v.as_mut_ptr() as *mut u8, v.len(), v.len() * 2),
            ParamDataMut::BF16(v) => (DType::BF16, v.as_mut_ptr() as *mut u8, v.len(), v.len() * 2),
        };
        if self.held_into.borrow().contains(&id.0) {
            return Err(Error::new(
                Status::FailedPrecondition,
                format!(
                    "gather_into param id {}: already held by a GatheredInto (one buffer per param at a time)",
                    id.0
                ),
            ));
        }
        // SAFETY: live handle; `ptr` is `bytes` bytes the guard borrows
        // mutably until it releases the gather (the runtime writes them here
        // and may read them until then); the library checks bytes and dtype.
        check(unsafe {
            sys::zero_engine_gather_into(
                self.raw.as_ptr(),
                id.0,
                dtype.raw(),
                ptr as *mut std::ffi::c_void,
                bytes,
            )
        })?;
        self.held_into.borrow_mut().insert(id.0);
        Ok(GatheredInto {
            engine: self,
            id,
            dtype,
            ptr,
            len,
            _out: std::marker::PhantomData,
        })
    }

    /// The zero-filled gradient buffer of a trainable param for this
    /// micro-step. Write or add into it, then hand it over with
    /// [`GradBuffer::ready`].
    pub fn grad_buffer(&mut self, id: ParamId) -> Result<GradBuffer<'_, 'c>> {
        let meta = self.meta(id)?;
        let mut data = ptr::null_mut();
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::zero_engine_grad_buffer(self.raw.as_ptr(), id.0, &mut data) })?;
        let data = NonNull::new(data as *mut u8)
            .filter(|p| p.as_ptr() as usize % meta.dtype.size() == 0)
            .ok_or_else(|| {
                Error::new(
                    Status::Internal,
                    "zero_engine_grad_buffer returned a NULL or misaligned buffer",
                )
            })?;
        let host = self.host_accessible;
        Ok(GradBuffer {
            engine: self,
            id,
            meta,
            data,
            host,
        })
    }

    /// Hands in `grad` (fp32, the param's element count, host memory) as
    /// this micro-step's gradient (C ABI 1.8, `zero_engine_set_grad`): for a
    /// bf16 or fp16 param it is rounded inside with the runtime's own
    /// rounding, the same bits as [`crate::convert`] into
    /// [`grad_buffer`](Engine::grad_buffer) then [`GradBuffer::ready`].
    /// COLLECTIVE as `ready` is.
    pub fn set_grad(&mut self, id: ParamId, grad: &[f32]) -> Result<()> {
        self.set_grad_raw(id, DType::F32, grad.as_ptr() as *const u8, std::mem::size_of_val(grad))
    }

    /// [`set_grad`](Engine::set_grad) from 16-bit values: `dtype` says
    /// whether `grad` holds fp16 or bf16 bits (converted to the param's
    /// dtype inside when it differs).
    pub fn set_grad_u16(&mut self, id: ParamId, dtype: DType, grad: &[u16]) -> Result<()> {
        if dtype == DType::F32 {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("param id {}: u16 gradient values cannot be fp32", id.0),
            ));
        }
        self.set_grad_raw(id, dtype, grad.as_ptr() as *const u8, std::mem::size_of_val(grad))
    }

    fn set_grad_raw(&mut self, id: ParamId, dtype: DType, src: *const u8, bytes: usize) -> Result<()> {
        self.meta(id)?;
        // SAFETY: live handle; `src` holds `bytes` bytes for the call (the
        // library checks the size against the param and keeps no pointer).
        check(unsafe {
            sys::zero_engine_set_grad(self.raw.as_ptr(), id.0, dtype.raw(), src.cast(), bytes)
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

    /// The last optimizer step's wall time by phase
    /// (`zero_engine_step_breakdown`); [`Status::FailedPrecondition`] unless
    /// the config has `"wall_clock_breakdown": true` (or `"zero_trace"`).
    pub fn step_breakdown(&self) -> Result<StepBreakdown> {
        let mut b = sys::zero_step_breakdown_init();
        // SAFETY: live handle, valid out pointer with struct_size set.
        check(unsafe { sys::zero_engine_step_breakdown(self.raw.as_ptr(), &mut b) })?;
        Ok(StepBreakdown::from_raw(&b))
    }

    /// The collective log (`zero_engine_comm_log`): one entry per collective
    /// and message-size bucket; [`Status::FailedPrecondition`] unless the
    /// config has `"comms_logger": {"enabled": true}`.
    pub fn comm_log(&self) -> Result<Vec<CommLogEntry>> {
        let mut n: i32 = 0;
        // SAFETY: live handle; capacity 0 asks for the count only.
        check(unsafe { sys::zero_engine_comm_log(self.raw.as_ptr(), ptr::null_mut(), 0, &mut n) })?;
        let mut raw = vec![sys::zero_comm_log_entry_init(); n.max(0) as usize];
        // SAFETY: `raw` holds `n` entries, each with struct_size set.
        check(unsafe {
            sys::zero_engine_comm_log(self.raw.as_ptr(), raw.as_mut_ptr(), n, &mut n)
        })?;
        raw.truncate(n.max(0) as usize);
        Ok(raw.iter().map(CommLogEntry::from_raw).collect())
    }

    /// The collective log as DeepSpeed's `log_summary` table
    /// (`zero_engine_comm_log_summary`, what rank 0 prints when the engine is
    /// dropped); [`Status::FailedPrecondition`] when the log is off.
    pub fn comm_log_summary(&self) -> Result<String> {
        let mut len: usize = 0;
        // SAFETY: live handle; capacity 0 asks for the length only.
        check(unsafe {
            sys::zero_engine_comm_log_summary(self.raw.as_ptr(), ptr::null_mut(), 0, &mut len)
        })?;
        let mut buf = vec![0u8; len + 1];
        // SAFETY: `buf` holds len + 1 bytes, room for the text and its NUL.
        check(unsafe {
            sys::zero_engine_comm_log_summary(
                self.raw.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut len,
            )
        })?;
        buf.truncate(len.min(buf.len() - 1));
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// This rank's last collectives, oldest first, one JSON object per line
    /// (`zero_engine_flight_record`): kind, size, params or bucket, engine
    /// call, step, micro-step and outcome. Readable after an error: where the
    /// ranks diverged the last line's outcome is `"diverged"` (README.md,
    /// "When ranks disagree").
    pub fn flight_record(&self) -> Result<String> {
        let mut len: usize = 0;
        // SAFETY: live handle; capacity 0 asks for the length only.
        check(unsafe {
            sys::zero_engine_flight_record(self.raw.as_ptr(), ptr::null_mut(), 0, &mut len)
        })?;
        loop {
            let mut buf = vec![0u8; len + 1];
            // SAFETY: `buf` holds len + 1 bytes, room for the text and its NUL.
            check(unsafe {
                sys::zero_engine_flight_record(
                    self.raw.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    &mut len,
                )
            })?;
            // It may have grown between the calls (a reduction still running).
            if len < buf.len() {
                buf.truncate(len);
                return Ok(String::from_utf8_lossy(&buf).into_owned());
            }
        }
    }

    /// Memory and traffic counters of this rank.
    pub fn stats(&self) -> Result<Stats> {
        let mut s = sys::zero_stats_init();
        // SAFETY: live handle, valid out pointer with struct_size set.
        check(unsafe { sys::zero_engine_stats(self.raw.as_ptr(), &mut s) })?;
        Ok(Stats::from_raw(&s))
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

/// Options of [`Engine::load_safetensors`] (`zero_safetensors_options`).
///
/// ```
/// let opts = zero::LoadSafetensorsOptions {
///     prefix_strip: Some("model.".into()),
///     ..Default::default()
/// };
/// # let _ = opts;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadSafetensorsOptions {
    /// `true`: params the file lacks keep their values (default `false`).
    pub allow_missing: bool,
    /// A file tensor's name loses this leading text (`"model."` for Hugging
    /// Face checkpoints).
    pub prefix_strip: Option<String>,
    /// Then gains this one; the result is the param name it loads into.
    pub prefix_add: Option<String>,
}

/// A param's values, typed by its dtype.
#[derive(Clone, Copy, Debug)]
pub enum ParamData<'a> {
    /// fp32 values.
    F32(&'a [f32]),
    /// IEEE half bits.
    F16(&'a [u16]),
    /// bfloat16 bits.
    BF16(&'a [u16]),
}

fn wrong_dtype(id: ParamId, have: DType, want: &str) -> Error {
    Error::new(
        Status::InvalidArgument,
        format!("param id {}: dtype is {have:?}, not {want}", id.0),
    )
}

/// A gathered param (from [`Engine::gather`]): its full working copy, read
/// only, released when the guard drops. Borrows the engine, so the engine can
/// be neither dropped nor mutated (stepped) while the guard lives.
pub struct Gathered<'e> {
    engine: &'e Engine<'e>,
    id: ParamId,
    meta: ParamMeta,
    data: *const u8,
    host: bool,
}

impl std::fmt::Debug for Gathered<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gathered")
            .field("id", &self.id)
            .field("len", &self.meta.numel)
            .finish()
    }
}

impl<'e> Gathered<'e> {
    fn check_pointer(&self) -> Result<()> {
        if self.data.is_null() || self.data as usize % self.meta.dtype.size() != 0 {
            return Err(Error::new(
                Status::Internal,
                "zero_engine_gather returned a NULL or misaligned buffer",
            ));
        }
        Ok(())
    }

    /// Which param this is.
    pub fn id(&self) -> ParamId {
        self.id
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.meta.numel
    }

    /// Always false: params have at least one element.
    pub fn is_empty(&self) -> bool {
        self.meta.numel == 0
    }

    /// The param's dtype.
    pub fn dtype(&self) -> DType {
        self.meta.dtype
    }

    /// Whether the values are device memory (an engine on a GPU): then only
    /// [`device_f32`](Gathered::device_f32) / [`device_u16`](Gathered::device_u16)
    /// reach them.
    pub fn is_device(&self) -> bool {
        !self.host
    }

    fn device_slice<T: Element>(&self, want: &str, ok: bool) -> Result<DeviceSlice<'_, T>> {
        if !ok {
            return Err(wrong_dtype(self.id, self.meta.dtype, want));
        }
        Ok(DeviceSlice::new(
            self.engine.raw,
            self.data as *const T,
            self.meta.numel,
        ))
    }

    /// The values of an fp32 param as a [`DeviceSlice`] (any device).
    pub fn device_f32(&self) -> Result<DeviceSlice<'_, f32>> {
        self.device_slice("F32", self.meta.dtype == DType::F32)
    }

    /// The bits of an fp16 or bf16 param as a [`DeviceSlice`] (any device).
    pub fn device_u16(&self) -> Result<DeviceSlice<'_, u16>> {
        self.device_slice("F16 or BF16", self.meta.dtype != DType::F32)
    }

    /// The values, typed by dtype.
    ///
    /// # Panics
    /// On device memory ([`is_device`](Gathered::is_device)): the host cannot
    /// read it; use [`device_f32`](Gathered::device_f32). (`as_f32` /
    /// `as_u16` return an error instead.)
    pub fn data(&self) -> ParamData<'_> {
        assert!(
            self.host,
            "Gathered::data: param id {} is device memory; use device_f32()/device_u16()",
            self.id.0
        );
        // SAFETY: the library keeps `numel` elements of the param's dtype at
        // `data` until the matching release, which happens when `self` drops;
        // the returned slice borrows `self`. Alignment checked in gather.
        unsafe {
            match self.meta.dtype {
                DType::F32 => ParamData::F32(std::slice::from_raw_parts(
                    self.data as *const f32,
                    self.meta.numel,
                )),
                DType::F16 => ParamData::F16(std::slice::from_raw_parts(
                    self.data as *const u16,
                    self.meta.numel,
                )),
                DType::BF16 => ParamData::BF16(std::slice::from_raw_parts(
                    self.data as *const u16,
                    self.meta.numel,
                )),
            }
        }
    }

    fn check_host(&self) -> Result<()> {
        if self.host {
            return Ok(());
        }
        Err(Error::new(
            Status::FailedPrecondition,
            format!(
                "param id {}: the engine keeps it in device memory; read it with device_f32()/device_u16()",
                self.id.0
            ),
        ))
    }

    /// The values of an fp32 param; [`Status::InvalidArgument`] otherwise,
    /// [`Status::FailedPrecondition`] on device memory.
    pub fn as_f32(&self) -> Result<&[f32]> {
        self.check_host()?;
        match self.data() {
            ParamData::F32(v) => Ok(v),
            _ => Err(wrong_dtype(self.id, self.meta.dtype, "F32")),
        }
    }

    /// The bits of an fp16 or bf16 param; [`Status::InvalidArgument`] for fp32.
    pub fn as_u16(&self) -> Result<&[u16]> {
        self.check_host()?;
        match self.data() {
            ParamData::F16(v) | ParamData::BF16(v) => Ok(v),
            ParamData::F32(_) => Err(wrong_dtype(self.id, self.meta.dtype, "F16 or BF16")),
        }
    }

    /// Releases now and reports the library's status (dropping the guard
    /// releases too, but cannot report a failure).
    pub fn release(self) -> Result<()> {
        let this = std::mem::ManuallyDrop::new(self);
        this.release_raw()
    }

    fn release_raw(&self) -> Result<()> {
        // SAFETY: the engine is alive (borrowed) and this gather is unmatched.
        check(unsafe { sys::zero_engine_release(self.engine.raw.as_ptr(), self.id.0) })
    }
}

impl Drop for Gathered<'_> {
    fn drop(&mut self) {
        let _ = self.release_raw();
    }
}

/// A caller's buffer to gather into ([`Engine::gather_into`]), typed by dtype.
#[derive(Debug)]
pub enum ParamDataMut<'a> {
    /// fp32 values.
    F32(&'a mut [f32]),
    /// IEEE half bits.
    F16(&'a mut [u16]),
    /// bfloat16 bits.
    BF16(&'a mut [u16]),
}

/// A gather into the caller's buffer (from [`Engine::gather_into`]): reads
/// it, and releases the gather when dropped (the buffer is the caller's
/// again then).
pub struct GatheredInto<'e, 'b> {
    engine: &'e Engine<'e>,
    id: ParamId,
    dtype: DType,
    ptr: *mut u8,
    len: usize,
    _out: std::marker::PhantomData<&'b mut [u8]>,
}

impl std::fmt::Debug for GatheredInto<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatheredInto")
            .field("id", &self.id)
            .field("len", &self.len)
            .finish()
    }
}

impl GatheredInto<'_, '_> {
    /// Which param this is.
    pub fn id(&self) -> ParamId {
        self.id
    }

    /// The gathered values in the caller's buffer, typed by dtype.
    pub fn data(&self) -> ParamData<'_> {
        // SAFETY: `ptr` is the caller's buffer of `len` elements of `dtype`,
        // borrowed mutably by `self`; the runtime finished writing it before
        // gather_into returned and only reads it until the release.
        unsafe {
            match self.dtype {
                DType::F32 => {
                    ParamData::F32(std::slice::from_raw_parts(self.ptr as *const f32, self.len))
                }
                DType::F16 => {
                    ParamData::F16(std::slice::from_raw_parts(self.ptr as *const u16, self.len))
                }
                DType::BF16 => {
                    ParamData::BF16(std::slice::from_raw_parts(self.ptr as *const u16, self.len))
                }
            }
        }
    }

    /// Releases now and reports the library's status (dropping the guard
    /// releases too, but cannot report a failure).
    pub fn release(self) -> Result<()> {
        let this = std::mem::ManuallyDrop::new(self);
        this.release_raw()
    }

    fn release_raw(&self) -> Result<()> {
        self.engine.held_into.borrow_mut().remove(&self.id.0);
        // SAFETY: the engine is alive (borrowed) and this gather is unmatched.
        check(unsafe { sys::zero_engine_release(self.engine.raw.as_ptr(), self.id.0) })
    }
}

impl Drop for GatheredInto<'_, '_> {
    fn drop(&mut self) {
        let _ = self.release_raw();
    }
}

/// The gradient buffer of one param for this micro-step (from
/// [`Engine::grad_buffer`]). Zero-filled; write or add into it, then call
/// [`ready`](GradBuffer::ready). Dropping it without `ready` leaves the
/// buffer out (the runtime cannot tell a gradient still being written from
/// a forgotten one): the next [`Engine::step`] fails with
/// [`Status::FailedPrecondition`] ("has a grad buffer out without
/// grad_ready"). Ask [`Engine::grad_buffer`] again (the same buffer, with
/// what was written) and call `ready`; a gradient never asked for counts as
/// zero.
pub struct GradBuffer<'e, 'c> {
    engine: &'e mut Engine<'c>,
    id: ParamId,
    meta: ParamMeta,
    data: NonNull<u8>,
    host: bool,
}

impl std::fmt::Debug for GradBuffer<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GradBuffer")
            .field("id", &self.id)
            .field("len", &self.meta.numel)
            .finish()
    }
}

impl GradBuffer<'_, '_> {
    /// Which param this gradient belongs to.
    pub fn id(&self) -> ParamId {
        self.id
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.meta.numel
    }

    /// Always false: params have at least one element.
    pub fn is_empty(&self) -> bool {
        self.meta.numel == 0
    }

    /// The gradient's dtype (the param's).
    pub fn dtype(&self) -> DType {
        self.meta.dtype
    }

    /// Whether the buffer is device memory (an engine on a GPU): then only
    /// [`device_f32_mut`](GradBuffer::device_f32_mut) /
    /// [`device_u16_mut`](GradBuffer::device_u16_mut) reach it.
    pub fn is_device(&self) -> bool {
        !self.host
    }

    /// The buffer of an fp32 param as a [`DeviceSliceMut`] (any device).
    pub fn device_f32_mut(&mut self) -> Result<DeviceSliceMut<'_, f32>> {
        if self.meta.dtype != DType::F32 {
            return Err(wrong_dtype(self.id, self.meta.dtype, "F32"));
        }
        Ok(DeviceSliceMut::new(
            self.engine.raw,
            self.data.as_ptr() as *mut f32,
            self.meta.numel,
        ))
    }

    /// The bits of an fp16 or bf16 gradient as a [`DeviceSliceMut`] (any device).
    pub fn device_u16_mut(&mut self) -> Result<DeviceSliceMut<'_, u16>> {
        if self.meta.dtype == DType::F32 {
            return Err(wrong_dtype(self.id, self.meta.dtype, "F16 or BF16"));
        }
        Ok(DeviceSliceMut::new(
            self.engine.raw,
            self.data.as_ptr() as *mut u16,
            self.meta.numel,
        ))
    }

    fn check_host(&self) -> Result<()> {
        if self.host {
            return Ok(());
        }
        Err(Error::new(
            Status::FailedPrecondition,
            format!(
                "param id {}: the gradient buffer is device memory; write it with device_f32_mut()/device_u16_mut()",
                self.id.0
            ),
        ))
    }

    /// The buffer of an fp32 param; [`Status::InvalidArgument`] otherwise,
    /// [`Status::FailedPrecondition`] on device memory.
    pub fn as_f32_mut(&mut self) -> Result<&mut [f32]> {
        self.check_host()?;
        if self.meta.dtype != DType::F32 {
            return Err(wrong_dtype(self.id, self.meta.dtype, "F32"));
        }
        // SAFETY: the buffer holds numel elements of the param's dtype and
        // stays valid until grad_ready, which only `ready(self)` calls; the
        // slice borrows `self` mutably, so it is the only view.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(self.data.as_ptr() as *mut f32, self.meta.numel)
        })
    }

    /// The bits of an fp16 or bf16 gradient; [`Status::InvalidArgument`] for
    /// fp32.
    pub fn as_u16_mut(&mut self) -> Result<&mut [u16]> {
        self.check_host()?;
        if self.meta.dtype == DType::F32 {
            return Err(wrong_dtype(self.id, self.meta.dtype, "F16 or BF16"));
        }
        // SAFETY: as in `as_f32_mut`.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(self.data.as_ptr() as *mut u16, self.meta.numel)
        })
    }

    /// COLLECTIVE in stages 2-3 and at the boundary micro-step in stage 0.
    /// Hands the gradient over (`zero_engine_grad_ready`).
    pub fn ready(self) -> Result<()> {
        // SAFETY: live handle; the buffer is not used after this.
        check(unsafe { sys::zero_engine_grad_ready(self.engine.raw.as_ptr(), self.id.0) })
    }
}
