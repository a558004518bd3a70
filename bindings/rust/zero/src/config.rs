//! Engine configuration: a DeepSpeed ds_config.json text or file, or a
//! builder over the C ABI's `zero_config` struct.
use std::ffi::CString;
use std::path::Path;

use zero_sys as sys;

use crate::error::{Error, Result, Status};

/// Element type of working params and gradients (`zero_dtype`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE single precision; buffers are `[f32]`.
    #[default]
    F32,
    /// IEEE half precision; buffers are raw bits, `[u16]`.
    F16,
    /// bfloat16; buffers are raw bits, `[u16]`.
    BF16,
}

impl DType {
    pub(crate) fn raw(self) -> sys::zero_dtype {
        match self {
            DType::F32 => sys::ZERO_DTYPE_F32,
            DType::F16 => sys::ZERO_DTYPE_F16,
            DType::BF16 => sys::ZERO_DTYPE_BF16,
        }
    }

    pub(crate) fn from_raw(raw: sys::zero_dtype) -> Option<DType> {
        match raw {
            sys::ZERO_DTYPE_F32 => Some(DType::F32),
            sys::ZERO_DTYPE_F16 => Some(DType::F16),
            sys::ZERO_DTYPE_BF16 => Some(DType::BF16),
            _ => None,
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }
}

/// The optimizer the engine applies at each boundary step (`zero_optimizer`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Optimizer {
    /// Adam (decoupled weight decay unless the JSON sets `adam_w_mode: false`).
    Adam,
    /// AdamW: always decoupled weight decay.
    #[default]
    AdamW,
    /// SGD with momentum and L2 weight decay.
    Sgd,
    /// DeepSpeed's Lion (1.13).
    Lion,
    /// DeepSpeed's Adagrad (1.13).
    Adagrad,
    /// Muon on the hidden matrices, AdamW on the rest (1.13).
    Muon,
}

impl Optimizer {
    fn raw(self) -> sys::zero_optimizer {
        match self {
            Optimizer::Adam => sys::ZERO_OPTIMIZER_ADAM,
            Optimizer::AdamW => sys::ZERO_OPTIMIZER_ADAMW,
            Optimizer::Sgd => sys::ZERO_OPTIMIZER_SGD,
            Optimizer::Lion => sys::ZERO_OPTIMIZER_LION,
            Optimizer::Adagrad => sys::ZERO_OPTIMIZER_ADAGRAD,
            Optimizer::Muon => sys::ZERO_OPTIMIZER_MUON,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Source {
    Json(CString),
    Struct(sys::zero_config),
}

/// What an [`Engine`](crate::Engine) is created from.
///
/// The library validates a configuration when the engine is created: unknown
/// keys, wrong types and out-of-range values then fail with
/// [`Status::InvalidArgument`] and the key path in the message.
///
/// ```
/// let json = zero::Config::from_json(r#"{"train_batch_size": 8,
///     "zero_optimization": {"stage": 3}}"#).unwrap();
/// let built = zero::Config::builder().stage(3).lr(1e-2).build();
/// # let _ = (json, built);
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    pub(crate) source: Source,
}

impl Config {
    /// A configuration from the text of a DeepSpeed `ds_config.json`.
    /// Fails only if the text contains a NUL byte; keys are checked by
    /// [`Engine::new`](crate::Engine::new).
    pub fn from_json(text: &str) -> Result<Config> {
        let text = CString::new(text).map_err(|e| {
            Error::new(
                Status::InvalidArgument,
                format!(
                    "config JSON contains a NUL byte at offset {}",
                    e.nul_position()
                ),
            )
        })?;
        Ok(Config {
            source: Source::Json(text),
        })
    }

    /// A configuration read from a `ds_config.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| {
            let status = match e.kind() {
                std::io::ErrorKind::NotFound => Status::NotFound,
                std::io::ErrorKind::InvalidData => Status::InvalidArgument,
                _ => Status::IoError,
            };
            Error::new(status, format!("{}: {e}", path.display()))
        })?;
        Config::from_json(&text)
    }

    /// A builder over the C struct, every field at the DeepSpeed default.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// The JSON text, for a configuration made from JSON.
    pub fn json(&self) -> Option<&str> {
        match &self.source {
            Source::Json(text) => text.to_str().ok(),
            Source::Struct(_) => None,
        }
    }
}

impl From<ConfigBuilder> for Config {
    fn from(builder: ConfigBuilder) -> Config {
        builder.build()
    }
}

/// Builds a [`Config`] field by field, as C fills a `zero_config`. Fields not
/// set keep the DeepSpeed default (`ZERO_CONFIG_INIT`).
#[derive(Clone, Debug)]
pub struct ConfigBuilder {
    raw: sys::zero_config,
}

impl Default for ConfigBuilder {
    fn default() -> ConfigBuilder {
        ConfigBuilder {
            raw: sys::zero_config_init(),
        }
    }
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty;)*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> ConfigBuilder {
            self.raw.$name = value;
            self
        }
    )*};
}

impl ConfigBuilder {
    /// ZeRO stage 0..3 (default 0).
    pub fn stage(mut self, stage: u32) -> ConfigBuilder {
        self.raw.stage = i32::try_from(stage).unwrap_or(i32::MAX);
        self
    }

    /// Element type of working params and gradients (default fp32).
    pub fn dtype(mut self, dtype: DType) -> ConfigBuilder {
        self.raw.dtype = dtype.raw();
        self
    }

    /// The optimizer (default AdamW).
    pub fn optimizer(mut self, optimizer: Optimizer) -> ConfigBuilder {
        self.raw.optimizer = optimizer.raw();
        self
    }

    /// Adam's beta1 and beta2 (default 0.9, 0.999).
    pub fn betas(mut self, beta1: f32, beta2: f32) -> ConfigBuilder {
        self.raw.beta1 = beta1;
        self.raw.beta2 = beta2;
        self
    }

    /// Whether gradient reduction overlaps the backward pass (default: on for
    /// stage 3 only).
    pub fn overlap_comm(mut self, on: bool) -> ConfigBuilder {
        self.raw.overlap_comm = on as i32;
        self
    }

    setters! {
        /// Learning rate (default 1e-3).
        lr: f32;
        /// Adam's epsilon (default 1e-8).
        eps: f32;
        /// Weight decay (default 0).
        weight_decay: f32;
        /// SGD momentum (default 0).
        momentum: f32;
        /// Micro-steps per optimizer step (default 1).
        gradient_accumulation_steps: i32;
        /// Clip the global L2 gradient norm to this; 0 turns clipping off.
        gradient_clipping: f32;
        /// Elements per gradient-reduction bucket (default 5e8).
        reduce_bucket_size: i64;
        /// Elements per all-gather bucket (default 5e8).
        allgather_bucket_size: i64;
        /// Elements per optimizer sub-group (default 1e9).
        sub_group_size: i64;
        /// Stage 3: most elements gathered at once (default 1e9).
        stage3_max_live_parameters: i64;
        /// Stage 3: elements to prefetch (default 5e7).
        stage3_prefetch_bucket_size: i64;
        /// Stage 3: params this small stay whole on every rank (default 1e5).
        stage3_param_persistence_threshold: i64;
        /// fp16: 0 for dynamic loss scaling, else a static scale.
        loss_scale: f32;
        /// fp16: the dynamic scale starts at 2^this (default 16).
        initial_scale_power: i32;
        /// fp16: steps without overflow before the scale grows (default 1000).
        loss_scale_window: i32;
        /// fp16: overflows tolerated before the scale shrinks (default 2).
        hysteresis: i32;
        /// fp16: the smallest dynamic scale (default 1).
        min_loss_scale: f32;
        /// Print progress every this many steps; 0 never (default 10).
        steps_per_print: i32;
        /// Seconds a collective waits for its peers (default 300).
        comm_timeout_seconds: f64;
    }

    /// The finished configuration.
    pub fn build(self) -> Config {
        Config {
            source: Source::Struct(self.raw),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_starts_from_header_defaults() {
        let raw = ConfigBuilder::default().raw;
        assert_eq!(raw.struct_size, std::mem::size_of::<sys::zero_config>());
        assert_eq!(raw.lr, -1.0);
        assert_eq!(raw.optimizer, sys::ZERO_OPTIMIZER_ADAMW);
    }

    #[test]
    fn json_with_nul_is_rejected() {
        let err = Config::from_json("{\0}").unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument);
    }

    #[test]
    fn missing_file_is_not_found_and_names_the_path() {
        let err = Config::from_file("/nonexistent/ds_config.json").unwrap_err();
        assert_eq!(err.status(), Status::NotFound);
        assert!(
            err.message().contains("/nonexistent/ds_config.json"),
            "{err}"
        );
    }
}
