//! A block's params gathered in one call (C ABI 1.15,
//! `zero_engine_gather_into_many`) and released together when the guard
//! drops (`zero_engine_release_many`): [`GatheredIntoMany`].
use std::collections::HashSet;

use zero_sys as sys;

use super::{Engine, ParamData, ParamDataMut, ParamId};
use crate::config::DType;
use crate::error::{check, Error, Result, Status};

impl<'c> Engine<'c> {
    /// COLLECTIVE in stage 3 (C ABI 1.15): [`gather_into`](Engine::gather_into)
    /// of every `(id, buffer)` in `entries`, in order, in one call into the
    /// library -- a block's params together. Every entry is checked before
    /// anything moves (an error names the entry and its param, and nothing
    /// is gathered); a failure partway releases what the call gathered. The
    /// buffers must all be of one dtype (the params'), and a param may appear
    /// once (one buffer per param at a time, as `gather_into`). The guard
    /// reads each buffer and releases them all, in one call, when dropped.
    pub fn gather_into_many<'b>(
        &self,
        entries: Vec<(ParamId, ParamDataMut<'b>)>,
    ) -> Result<GatheredIntoMany<'_, 'b>> {
        let mut ids = Vec::with_capacity(entries.len());
        let mut params = Vec::with_capacity(entries.len());
        let mut dsts = Vec::with_capacity(entries.len());
        let mut bytes = Vec::with_capacity(entries.len());
        let mut lens = Vec::with_capacity(entries.len());
        let mut dtype = None;
        let mut seen = HashSet::new();
        let held = self.held_into.borrow();
        for (k, (id, out)) in entries.into_iter().enumerate() {
            self.meta(id)?;
            let (dt, ptr, len, nbytes) = match out {
                ParamDataMut::F32(v) => {
                    (DType::F32, v.as_mut_ptr() as *mut u8, v.len(), v.len() * 4)
                }
                ParamDataMut::F16(v) => {
                    (DType::F16, v.as_mut_ptr() as *mut u8, v.len(), v.len() * 2)
                }
                ParamDataMut::BF16(v) => {
                    (DType::BF16, v.as_mut_ptr() as *mut u8, v.len(), v.len() * 2)
                }
            };
            if *dtype.get_or_insert(dt) != dt {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!(
                        "gather_into_many, entry {k} (param id {}): a {dt:?} buffer among {:?} ones (one dtype per call)",
                        id.0,
                        dtype.unwrap()
                    ),
                ));
            }
            if held.contains(&id.0) || !seen.insert(id.0) {
                return Err(Error::new(
                    Status::FailedPrecondition,
                    format!(
                        "gather_into_many, entry {k}: param id {} already held by a gather_into (one buffer per param at a time)",
                        id.0
                    ),
                ));
            }
            ids.push(id.0);
            params.push(id);
            dsts.push(ptr as *mut std::ffi::c_void);
            bytes.push(nbytes);
            lens.push(len);
        }
        drop(held);
        let dtype = dtype.unwrap_or(DType::F32);
        // SAFETY: live handle; ids, dsts and bytes hold ids.len() entries;
        // each dst is a buffer of bytes[k] bytes the guard borrows mutably
        // until it releases the gathers (the runtime writes them here and may
        // read them until then); the library checks every entry first.
        check(unsafe {
            sys::zero_engine_gather_into_many(
                self.raw.as_ptr(),
                ids.as_ptr(),
                ids.len(),
                dtype.raw(),
                dsts.as_ptr(),
                bytes.as_ptr(),
            )
        })?;
        self.held_into.borrow_mut().extend(ids.iter().copied());
        Ok(GatheredIntoMany {
            engine: self,
            ids,
            params,
            dtype,
            ptrs: dsts.into_iter().map(|p| p as *mut u8).collect(),
            lens,
            _out: std::marker::PhantomData,
        })
    }
}

/// Gathers into the caller's buffers (from [`Engine::gather_into_many`]):
/// reads them, and releases every gather, in one call, when dropped.
pub struct GatheredIntoMany<'e, 'b> {
    engine: &'e Engine<'e>,
    ids: Vec<i32>,
    params: Vec<ParamId>,
    dtype: DType,
    ptrs: Vec<*mut u8>,
    lens: Vec<usize>,
    _out: std::marker::PhantomData<&'b mut [u8]>,
}

impl std::fmt::Debug for GatheredIntoMany<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatheredIntoMany")
            .field("params", &self.params)
            .finish()
    }
}

impl GatheredIntoMany<'_, '_> {
    /// How many params the guard holds.
    pub fn len(&self) -> usize {
        self.params.len()
    }

    /// Whether it holds none (an empty list gathers nothing).
    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    /// The param of entry `k`.
    pub fn id(&self, k: usize) -> ParamId {
        self.params[k]
    }

    /// The gathered values of entry `k` in the caller's buffer.
    pub fn data(&self, k: usize) -> ParamData<'_> {
        let (ptr, len) = (self.ptrs[k], self.lens[k]);
        // SAFETY: `ptr` is the caller's buffer of `len` elements of `dtype`,
        // borrowed mutably by `self`; the runtime finished writing it before
        // gather_into_many returned and only reads it until the release.
        unsafe {
            match self.dtype {
                DType::F32 => ParamData::F32(std::slice::from_raw_parts(ptr as *const f32, len)),
                DType::F16 => ParamData::F16(std::slice::from_raw_parts(ptr as *const u16, len)),
                DType::BF16 => ParamData::BF16(std::slice::from_raw_parts(ptr as *const u16, len)),
            }
        }
    }

    /// Releases every gather now and reports the library's status (dropping
    /// the guard releases too, but cannot report a failure).
    pub fn release(mut self) -> Result<()> {
        // The drop that follows finds no ids left: it releases nothing.
        self.release_raw()
    }

    fn release_raw(&mut self) -> Result<()> {
        let ids = std::mem::take(&mut self.ids);
        {
            let mut held = self.engine.held_into.borrow_mut();
            for id in &ids {
                held.remove(id);
            }
        }
        // SAFETY: the engine is alive (borrowed); these gathers are unmatched.
        check(unsafe {
            sys::zero_engine_release_many(self.engine.raw.as_ptr(), ids.as_ptr(), ids.len())
        })
    }
}

impl Drop for GatheredIntoMany<'_, '_> {
    fn drop(&mut self) {
        let _ = self.release_raw();
    }
}
