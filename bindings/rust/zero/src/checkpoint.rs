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
use crate::progress::{with_progress, ProgressFn};

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

/// Options of [`Engine::save_with`] (`zero_save_options`, C ABI 1.11;
/// `exclude_frozen` 1.14).
///
/// ```
/// let options = zero::SaveOptions::new().asynchronous(true).keep_last(3);
/// # let _ = options;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SaveOptions {
    asynchronous: bool,
    keep_last: u32,
    exclude_frozen: bool,
}

impl SaveOptions {
    /// The defaults (`ZERO_SAVE_OPTIONS_INIT`): synchronous, every tag kept.
    pub fn new() -> SaveOptions {
        SaveOptions::default()
    }

    /// `true`: the save returns once this rank's state is copied; the files
    /// are written and `latest` published in the background. The next save,
    /// load, [`wait_checkpoint`](Engine::wait_checkpoint) or drop waits for
    /// it and returns its failure on every rank.
    pub fn asynchronous(mut self, asynchronous: bool) -> SaveOptions {
        self.asynchronous = asynchronous;
        self
    }

    /// K > 0: after the new tag is published, delete the oldest tags of the
    /// directory (by global step) beyond the newest K.
    pub fn keep_last(mut self, k: u32) -> SaveOptions {
        self.keep_last = k;
        self
    }

    /// `true` (C ABI 1.14): leave the frozen params out of the checkpoint,
    /// as DeepSpeed's `save_checkpoint(exclude_frozen_parameters=True)`: an
    /// adapter's checkpoint, loaded back with
    /// [`LoadOptions::allow_missing`] onto an engine whose frozen params
    /// already hold the base model.
    pub fn exclude_frozen(mut self, exclude: bool) -> SaveOptions {
        self.exclude_frozen = exclude;
        self
    }

    fn raw(self) -> Result<sys::zero_save_options> {
        let mut raw = sys::zero_save_options_init();
        raw.asynchronous = self.asynchronous as i32;
        raw.exclude_frozen = self.exclude_frozen as i32;
        raw.keep_last = i32::try_from(self.keep_last)
            .map_err(|_| Error::new(Status::InvalidArgument, "keep_last is too large"))?;
        Ok(raw)
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

    /// COLLECTIVE (C ABI 1.11). [`save`](Engine::save) with [`SaveOptions`]:
    /// asynchronous, keep_last.
    pub fn save_with(&mut self, dir: impl AsRef<Path>, tag: &str, options: SaveOptions) -> Result<()> {
        let dir = c_path("checkpoint directory", dir.as_ref())?;
        let tag = c_tag(tag)?;
        let raw = options.raw()?;
        // SAFETY: live handle used by this thread only; NUL-terminated strings
        // and the options struct valid for the call.
        check(unsafe { sys::zero_engine_save_with(self.as_ptr(), dir.as_ptr(), tag.as_ptr(), &raw) })
    }

    /// COLLECTIVE (C ABI 1.11). Waits for an asynchronous save in flight and
    /// returns its status (the same on every rank).
    pub fn wait_checkpoint(&mut self) -> Result<()> {
        // SAFETY: live handle used by this thread only.
        check(unsafe { sys::zero_engine_wait_checkpoint(self.as_ptr()) })
    }

    /// [`save`](Engine::save) reporting progress to `f` (`"save"`; see
    /// [`ProgressFn`]): a cancel on any rank fails the save on every rank
    /// with [`Status::Cancelled`], leaving earlier tags whole.
    pub fn save_with_progress(
        &mut self,
        dir: impl AsRef<Path>,
        tag: &str,
        f: &mut ProgressFn<'_>,
    ) -> Result<()> {
        let raw = self.as_ptr();
        with_progress(f, |cb, user| {
            // SAFETY: live handle; the callback state outlives the save, and
            // is unset before with_progress returns.
            check(unsafe { sys::zero_engine_set_progress(raw, cb, user) })?;
            let r = self.save(dir, tag);
            // SAFETY: live handle.
            check(unsafe { sys::zero_engine_set_progress(raw, None, ptr::null_mut()) })?;
            r
        })
    }

    /// [`load`](Engine::load) reporting progress to `f` (`"load"`); a
    /// cancelled load, like a failed one, leaves the engine unusable.
    pub fn load_with_progress(
        &mut self,
        dir: impl AsRef<Path>,
        tag: Option<&str>,
        options: LoadOptions,
        f: &mut ProgressFn<'_>,
    ) -> Result<()> {
        let raw = self.as_ptr();
        with_progress(f, |cb, user| {
            // SAFETY: as in save_with_progress.
            check(unsafe { sys::zero_engine_set_progress(raw, cb, user) })?;
            let r = self.load(dir, tag, options);
            // SAFETY: live handle.
            check(unsafe { sys::zero_engine_set_progress(raw, None, ptr::null_mut()) })?;
            r
        })
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
    export(dir.as_ref(), tag, out_path.as_ref(), dtype, None, ptr::null_mut())
}

/// [`export_safetensors`] reporting progress to `f` (`"export"`; see
/// [`ProgressFn`]); a cancelled export leaves nothing at `out_path`.
pub fn export_safetensors_with_progress(
    dir: impl AsRef<Path>,
    tag: Option<&str>,
    out_path: impl AsRef<Path>,
    dtype: DType,
    f: &mut ProgressFn<'_>,
) -> Result<()> {
    with_progress(f, |cb, user| {
        export(dir.as_ref(), tag, out_path.as_ref(), dtype, cb, user)
    })
}

fn export(
    dir: &Path,
    tag: Option<&str>,
    out_path: &Path,
    dtype: DType,
    cb: sys::zero_progress_fn,
    user: *mut std::ffi::c_void,
) -> Result<()> {
    let dir = c_path("checkpoint directory", dir)?;
    let tag = tag.map(c_tag).transpose()?;
    let out = c_path("output path", out_path)?;
    // SAFETY: NUL-terminated strings valid for the call; a NULL tag means
    // "latest"; the callback and its state (if any) outlive the call.
    check(unsafe {
        sys::zero_checkpoint_export_safetensors_progress(
            dir.as_ptr(),
            tag.as_ref().map_or(ptr::null(), |t| t.as_ptr()),
            out.as_ptr(),
            dtype.raw(),
            cb,
            user,
        )
    })
}

/// Rewrites checkpoint `dir/tag` (`None`: the tag `dir/latest` names) as
/// `out_dir/tag` for `world` ranks, cut as an engine of that world lays its
/// shards out, so each rank of the new run reads only its own file (loading
/// reshards by itself; this does it ahead of time, as `zero-ckpt reshard`).
/// Needs no engine (`zero_checkpoint_reshard`).
pub fn reshard(
    dir: impl AsRef<Path>,
    tag: Option<&str>,
    out_dir: impl AsRef<Path>,
    world: i32,
) -> Result<()> {
    reshard_raw(dir.as_ref(), tag, out_dir.as_ref(), world, None, ptr::null_mut())
}

/// [`reshard`] reporting progress to `f` (`"reshard"`; see [`ProgressFn`]).
pub fn reshard_with_progress(
    dir: impl AsRef<Path>,
    tag: Option<&str>,
    out_dir: impl AsRef<Path>,
    world: i32,
    f: &mut ProgressFn<'_>,
) -> Result<()> {
    with_progress(f, |cb, user| {
        reshard_raw(dir.as_ref(), tag, out_dir.as_ref(), world, cb, user)
    })
}

fn reshard_raw(
    dir: &Path,
    tag: Option<&str>,
    out_dir: &Path,
    world: i32,
    cb: sys::zero_progress_fn,
    user: *mut std::ffi::c_void,
) -> Result<()> {
    let dir = c_path("checkpoint directory", dir)?;
    let tag = tag.map(c_tag).transpose()?;
    let out = c_path("output directory", out_dir)?;
    // SAFETY: as in export.
    check(unsafe {
        sys::zero_checkpoint_reshard(
            dir.as_ptr(),
            tag.as_ref().map_or(ptr::null(), |t| t.as_ptr()),
            out.as_ptr(),
            world,
            cb,
            user,
        )
    })
}
