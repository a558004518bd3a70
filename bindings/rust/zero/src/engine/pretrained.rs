//! Pretrained weights: params set from safetensors files.
use std::ffi::CString;
use std::ptr;

use zero_sys as sys;

use super::Engine;
use crate::error::{check, Error, Result, Status};

impl<'c> Engine<'c> {
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
