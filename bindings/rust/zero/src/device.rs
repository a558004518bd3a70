//! Where an engine keeps its state, and views of device memory.
//!
//! An engine on the CPU lends its gathered params and gradient buffers as
//! slices. On a GPU ([`Communicator::nccl`](crate::Communicator::nccl), or
//! [`Engine::set_device`](crate::Engine::set_device)) the same memory is
//! device memory: [`DeviceSlice`] and [`DeviceSliceMut`] carry the pointer
//! (for a CUDA library of your own) and copy to and from the host through
//! the engine (`zero_engine_copy`, ordered after its device work), but
//! cannot be read as host memory:
//!
//! ```compile_fail
//! fn peek(s: &zero::DeviceSlice<'_, f32>) -> f32 {
//!     s[0] // error[E0608]: cannot index into a value of type `DeviceSlice`
//! }
//! ```
//!
//! With `ZERO_GPU_STANDIN=1` in the environment, "cuda" and NCCL are the
//! CPU stand-in for a GPU (tests): device pointers the host cannot touch.
use std::marker::PhantomData;
use std::ptr::NonNull;

use zero_sys as sys;

use crate::error::{check, Error, Result, Status};

/// The kind of device an engine keeps its state on (`zero_device_kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// Host memory.
    Cpu,
    /// A CUDA GPU.
    Cuda,
    /// The CPU stand-in for a GPU (memory the host cannot touch).
    Standin,
}

/// An engine's device (`zero_engine_device`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// What kind of device.
    pub kind: DeviceKind,
    /// The GPU's index (0 for the CPU and the stand-in).
    pub ordinal: i32,
    /// Whether the host may read the engine's buffers as memory (the CPU).
    pub host_accessible: bool,
    /// DLPack's device type of those buffers: 1 CPU, 2 CUDA, 12 the stand-in.
    pub dlpack_device_type: i32,
    /// Bytes allocated through the device now.
    pub device_bytes: i64,
    /// Their high-water mark.
    pub device_peak_bytes: i64,
    /// Bytes the CUDA caching allocator holds from the driver (0 elsewhere).
    pub device_reserved_bytes: i64,
    /// Page-locked host staging now (`pin_memory`).
    pub pinned_host_bytes: i64,
}

pub(crate) fn device_info(raw: *const sys::zero_engine_t) -> Result<DeviceInfo> {
    let mut info = sys::zero_device_info_init();
    // SAFETY: `raw` is a live engine handle; `info` is a valid out struct.
    check(unsafe { sys::zero_engine_device(raw, &mut info) })?;
    let kind = match info.kind {
        0 => DeviceKind::Cpu,
        1 => DeviceKind::Cuda,
        2 => DeviceKind::Standin,
        k => {
            return Err(Error::new(
                Status::Internal,
                format!("zero_engine_device: unknown device kind {k}"),
            ))
        }
    };
    Ok(DeviceInfo {
        kind,
        ordinal: info.ordinal,
        host_accessible: info.host_accessible != 0,
        dlpack_device_type: info.dlpack_device_type,
        device_bytes: info.device_bytes,
        device_peak_bytes: info.device_peak_bytes,
        device_reserved_bytes: info.device_reserved_bytes,
        pinned_host_bytes: info.pinned_host_bytes,
    })
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u16 {}
}

/// Element types of engine buffers: `f32`, or `u16` for fp16/bf16 bits.
pub trait Element: Copy + Default + sealed::Sealed {}
impl Element for f32 {}
impl Element for u16 {}

fn copy(
    engine: NonNull<sys::zero_engine_t>,
    dst: *mut u8,
    src: *const u8,
    bytes: usize,
) -> Result<()> {
    // SAFETY: the engine is alive for the slice's borrow; one side is engine
    // memory of at least `bytes` (checked lengths), the other a Rust slice.
    check(unsafe { sys::zero_engine_copy(engine.as_ptr(), dst.cast(), src.cast(), bytes) })
}

fn len_mismatch(what: &str, have: usize, want: usize) -> Error {
    Error::new(
        Status::InvalidArgument,
        format!("{what}: host slice has {have} elements, the device buffer {want}"),
    )
}

/// A read-only view of `len` elements of engine memory that may be on a
/// device (a gathered param). Not dereferenceable: read it with
/// [`copy_to_host`](DeviceSlice::copy_to_host) / [`to_vec`](DeviceSlice::to_vec),
/// or hand [`as_ptr`](DeviceSlice::as_ptr) to device code.
pub struct DeviceSlice<'a, T: Element> {
    engine: NonNull<sys::zero_engine_t>,
    ptr: *const T,
    len: usize,
    _borrow: PhantomData<&'a T>,
}

impl<'a, T: Element> DeviceSlice<'a, T> {
    pub(crate) fn new(engine: NonNull<sys::zero_engine_t>, ptr: *const T, len: usize) -> Self {
        DeviceSlice {
            engine,
            ptr,
            len,
            _borrow: PhantomData,
        }
    }

    /// The device address (valid while the guard it came from lives).
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the elements into `out` (of the same length).
    pub fn copy_to_host(&self, out: &mut [T]) -> Result<()> {
        if out.len() != self.len {
            return Err(len_mismatch(
                "DeviceSlice::copy_to_host",
                out.len(),
                self.len,
            ));
        }
        copy(
            self.engine,
            out.as_mut_ptr().cast(),
            self.ptr.cast(),
            std::mem::size_of_val(out),
        )
    }

    /// The elements, copied to a new vector.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::default(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }
}

impl<T: Element> std::fmt::Debug for DeviceSlice<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSlice")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// A writable view of engine memory that may be on a device (a gradient
/// buffer). Not dereferenceable: write it with
/// [`copy_from_host`](DeviceSliceMut::copy_from_host), or hand
/// [`as_mut_ptr`](DeviceSliceMut::as_mut_ptr) to device code.
pub struct DeviceSliceMut<'a, T: Element> {
    engine: NonNull<sys::zero_engine_t>,
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut T>,
}

impl<'a, T: Element> DeviceSliceMut<'a, T> {
    pub(crate) fn new(engine: NonNull<sys::zero_engine_t>, ptr: *mut T, len: usize) -> Self {
        DeviceSliceMut {
            engine,
            ptr,
            len,
            _borrow: PhantomData,
        }
    }

    /// The device address (valid until the gradient is handed over).
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Overwrites the elements with `src` (of the same length).
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        if src.len() != self.len {
            return Err(len_mismatch(
                "DeviceSliceMut::copy_from_host",
                src.len(),
                self.len,
            ));
        }
        copy(
            self.engine,
            self.ptr.cast(),
            src.as_ptr().cast(),
            std::mem::size_of_val(src),
        )
    }

    /// Copies the elements into `out` (of the same length).
    pub fn copy_to_host(&self, out: &mut [T]) -> Result<()> {
        DeviceSlice::<T>::new(self.engine, self.ptr, self.len).copy_to_host(out)
    }
}

impl<T: Element> std::fmt::Debug for DeviceSliceMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSliceMut")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}
