//! What describes a param: its id, its registration (shape, dtype, init)
//! and what the runtime registered.
use std::ffi::CString;
use std::ptr;

use zero_sys as sys;

#[allow(unused_imports)] // the doc links
use super::Engine;
use crate::config::DType;
use crate::error::{Error, Result, Status};

/// Identifies a registered parameter of one [`Engine`]: 0, 1, ... in
/// registration order, and the engine it belongs to: an id handed to another
/// engine is refused ([`Status::InvalidArgument`]), never read as that
/// engine's param of the same index. Get them from
/// [`register_param`](Engine::register_param),
/// [`find_param`](Engine::find_param), [`params`](Engine::params) or
/// [`param_id`](Engine::param_id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamId(pub(super) i32, pub(super) u64);

impl ParamId {
    /// The position in registration order.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Describes one parameter for [`Engine::register_param`].
///
/// ```
/// let init = [0.5f32; 6];
/// let desc = zero::ParamDesc::new("fc.weight", &[2, 3]).init(&init);
/// # let _ = desc;
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ParamDesc<'a> {
    pub(super) name: &'a str,
    pub(super) shape: &'a [usize],
    pub(super) dtype: Option<DType>,
    pub(super) init: Option<&'a [f32]>,
    pub(super) init_spec: Option<InitSpec>,
    pub(super) trainable: bool,
    pub(super) use_muon: Option<bool>,
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

    pub(super) fn raw(&self) -> sys::zero_init_spec {
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
            use_muon: None,
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

    /// With [`Optimizer::Muon`](crate::Optimizer::Muon) (C ABI 1.13):
    /// `true` puts the param on Muon (it must be at least 2-D), `false` on
    /// AdamW; unset, DeepSpeed's rule (at least 2-D, no "embed" or
    /// "lm_head" in the name).
    pub fn use_muon(mut self, on: bool) -> ParamDesc<'a> {
        self.use_muon = Some(on);
        self
    }

    pub(super) fn raw_use_muon(&self) -> sys::zero_muon_use {
        match self.use_muon {
            None => sys::ZERO_MUON_AUTO,
            Some(true) => sys::ZERO_MUON_ON,
            Some(false) => sys::ZERO_MUON_OFF,
        }
    }

    pub(super) fn numel(&self) -> Result<usize> {
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

/// A description as the C ABI reads it (`zero_param_desc`, `init` unset),
/// holding the name and shape its pointers point into: moving it keeps them
/// valid (their heap buffers do not move).
pub(crate) struct RawParamDesc {
    _name: CString,
    _shape: Vec<i64>,
    pub(crate) raw: sys::zero_param_desc,
    pub(crate) numel: usize,
}

impl<'a> ParamDesc<'a> {
    /// The name given to [`ParamDesc::new`].
    pub(crate) fn name(&self) -> &'a str {
        self.name
    }

    /// Whether it is trainable ([`ParamDesc::trainable`]).
    pub(crate) fn is_trainable(&self) -> bool {
        self.trainable
    }

    /// The dtype set with [`ParamDesc::dtype`], if any.
    pub(crate) fn dtype_set(&self) -> Option<DType> {
        self.dtype
    }

    /// The C description, its dtype `dtype` when none was set; refuses a
    /// name with a NUL byte and a shape the C ABI cannot hold.
    pub(crate) fn to_raw(&self, dtype: DType) -> Result<RawParamDesc> {
        let numel = self.numel()?;
        let name = CString::new(self.name).map_err(|_| {
            Error::new(
                Status::InvalidArgument,
                format!("param name {:?} contains a NUL byte", self.name),
            )
        })?;
        let shape: Vec<i64> = self.shape.iter().map(|&d| d as i64).collect();
        let mut raw = sys::zero_param_desc_init();
        raw.name = name.as_ptr();
        raw.ndim = shape.len() as i32;
        raw.shape = if shape.is_empty() {
            ptr::null()
        } else {
            shape.as_ptr()
        };
        raw.dtype = self.dtype.unwrap_or(dtype).raw();
        raw.trainable = self.trainable as i32;
        raw.use_muon = self.raw_use_muon();
        Ok(RawParamDesc {
            _name: name,
            _shape: shape,
            raw,
            numel,
        })
    }
}

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
