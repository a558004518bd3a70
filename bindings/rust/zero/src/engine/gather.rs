//! Gathering params: the guards that read a gathered param and release it
//! on drop ([`Gathered`], [`GatheredInto`]).
use std::ptr;

use zero_sys as sys;

use super::{wrong_dtype, Engine, ParamId, ParamMeta};
use crate::config::DType;
use crate::device::{DeviceSlice, Element};
use crate::error::{check, Error, Result, Status};

impl<'c> Engine<'c> {
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
