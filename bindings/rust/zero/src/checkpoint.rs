//! Checkpoints: [`Engine::save`], [`Engine::load`] with [`LoadOptions`], and
//! [`export_safetensors`] (no engine needed).
//!
//! A checkpoint is the directory `DIR/TAG` holding a manifest and one shard
//! file per saving rank; `DIR/latest` names the newest tag. It loads at any
//! world size and stage.
use std::ffi::CString;
use std::path::Path;
use std::ptr;

use zero_sys as sys;

use crate::config::DType;
use crate::engine::Engine;
use crate::error::{check, Error, Result, Status};

/// Options of [`Engine::load`] (`zero_load_options`).
///
/// ```
/// let options = zero::LoadOptions::new().load_optimizer_states(false);
/// # let _ = options;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    load_optimizer_states: bool,
    allow_missing: bool,
}

impl LoadOptions {
    /// The defaults (`ZERO_LOAD_OPTIONS_INIT`): load optimizer states,
    /// refuse a checkpoint that lacks a registered param.
    pub fn new() -> LoadOptions {
        let raw = sys::zero_load_options_init();
        LoadOptions {
            load_optimizer_states: raw.load_optimizer_states != 0,
            allow_missing: raw.allow_missing != 0,
        }
    }

    /// `false` starts the optimizer moments at zero (weights only).
    pub fn load_optimizer_states(mut self, load: bool) -> LoadOptions {
        self.load_optimizer_states = load;
        self
    }

    /// `true` lets params the checkpoint lacks keep their values; params the
    /// engine lacks are refused either way.
    pub fn allow_missing(mut self, allow: bool) -> LoadOptions {
        self.allow_missing = allow;
        self
    }

    fn raw(self) -> sys::zero_load_options {
        let mut raw = sys::zero_load_options_init();
        raw.load_optimizer_states = self.load_optimizer_states as i32;
        raw.allow_missing = self.allow_missing as i32;
        raw
    }
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions::new()
    }
}

fn c_path(what: &str, path: &Path) -> Result<CString> {
    #[cfg(unix)]
    let bytes = {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    };
    #[cfg(not(unix))]
    let bytes = path
        .to_str()
        .ok_or_else(|| {
            Error::new(
                Status::InvalidArgument,
                format!("{what} {path:?} is not valid UTF-8"),
            )
        })?
        .as_bytes()
        .to_vec();
    CString::new(bytes).map_err(|_| {
        Error::new(
            Status::InvalidArgument,
            format!("{what} {path:?} contains a NUL byte"),
        )
    })
}

fn c_tag(tag: &str) -> Result<CString> {
    CString::new(tag).map_err(|_| {
        Error::new(
            Status::InvalidArgument,
            format!("checkpoint tag {tag:?} contains a NUL byte"),
        )
    })
}

impl Engine<'_> {
    /// COLLECTIVE. Writes the whole training state (params, optimizer
    /// states, steps, loss scale) to `dir/tag` atomically, then points
    /// `dir/latest` at it; a failed save leaves earlier tags whole. Refused
    /// with [`Status::FailedPrecondition`] mid-accumulation: call it right
    /// after the [`step`](Engine::step) that ends one.
    pub fn save(&mut self, dir: impl AsRef<Path>, tag: &str) -> Result<()> {
        let dir = c_path("checkpoint directory", dir.as_ref())?;
        let tag = c_tag(tag)?;
        // SAFETY: live handle used by this thread only; NUL-terminated strings
        // valid for the call.
        check(unsafe { sys::zero_engine_save(self.as_ptr(), dir.as_ptr(), tag.as_ptr()) })
    }

    /// COLLECTIVE. Restores `dir/tag` (`None`: the tag `dir/latest` names),
    /// saved at any world size or stage, with steps and loss scale. No param
    /// may be gathered (the borrow checker sees to that) and no accumulation
    /// may be under way. Fails alike on every rank: [`Status::NotFound`] for
    /// a missing tag, [`Status::DataLoss`] naming a corrupt file. A load that
    /// failed after it began overwriting state leaves the engine unusable
    /// (later calls fail); create a new engine to load again.
    pub fn load(
        &mut self,
        dir: impl AsRef<Path>,
        tag: Option<&str>,
        options: LoadOptions,
    ) -> Result<()> {
        let dir = c_path("checkpoint directory", dir.as_ref())?;
        let tag = tag.map(c_tag).transpose()?;
        let raw = options.raw();
        // SAFETY: live handle used by this thread only; strings and options
        // valid for the call; a NULL tag means "latest".
        check(unsafe {
            sys::zero_engine_load(
                self.as_ptr(),
                dir.as_ptr(),
                tag.as_ref().map_or(ptr::null(), |t| t.as_ptr()),
                &raw,
            )
        })
    }
}

/// Writes every param of checkpoint `dir/tag` (`None`: the tag `dir/latest`
/// names) as one safetensors file at `out_path`: the fp32 master values, or
/// rounded to `dtype`. Needs no engine or communicator.
///
/// ```no_run
/// zero::export_safetensors("ckpt", None, "model.safetensors", zero::DType::BF16)?;
/// # Ok::<(), zero::Error>(())
/// ```
pub fn export_safetensors(
    dir: impl AsRef<Path>,
    tag: Option<&str>,
    out_path: impl AsRef<Path>,
    dtype: DType,
) -> Result<()> {
    let dir = c_path("checkpoint directory", dir.as_ref())?;
    let tag = tag.map(c_tag).transpose()?;
    let out = c_path("output path", out_path.as_ref())?;
    // SAFETY: NUL-terminated strings valid for the call; a NULL tag means
    // "latest".
    check(unsafe {
        sys::zero_checkpoint_export_safetensors(
            dir.as_ptr(),
            tag.as_ref().map_or(ptr::null(), |t| t.as_ptr()),
            out.as_ptr(),
            dtype.raw(),
        )
    })
}
