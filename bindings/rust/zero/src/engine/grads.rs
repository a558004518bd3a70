//! Gradients: the buffer a micro-step's gradient is written into
//! ([`GradBuffer`]) and gradients handed in from the caller's memory.
use std::ptr::{self, NonNull};

use zero_sys as sys;

use super::{wrong_dtype, Engine, ParamId, ParamMeta};
use crate::config::DType;
use crate::device::DeviceSliceMut;
use crate::error::{check, Error, Result, Status};

impl<'c> Engine<'c> {
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
