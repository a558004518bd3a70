//! Communicators: the group of ranks an engine shards over.
use std::ptr::{self, NonNull};

use zero_sys as sys;

use crate::error::{check, Error, Result, Status};

/// A group of ranks (`zero_comm_t`).
///
/// A communicator may be moved to another thread (`Send`) but not shared
/// between threads (not `Sync`): the C ABI requires each handle to be used
/// from one thread at a time. Engines borrow it, so it outlives them.
///
/// ```
/// fn assert_send<T: Send>() {}
/// assert_send::<zero::Communicator>();
/// ```
///
/// ```compile_fail,E0277
/// fn assert_sync<T: Sync>() {}
/// assert_sync::<zero::Communicator>(); // error[E0277]: cannot be shared between threads
/// ```
///
/// An engine stays on its communicator's thread:
///
/// ```compile_fail,E0277
/// fn assert_send<T: Send>() {}
/// assert_send::<zero::Engine<'static>>(); // error[E0277]: cannot be sent between threads
/// ```
#[derive(Debug)]
pub struct Communicator {
    raw: NonNull<sys::zero_comm_t>,
    rank: usize,
    size: usize,
}

// SAFETY: the C ABI allows a handle to be used from any thread, one thread at
// a time; `Communicator` is not `Sync`, so `&Communicator` never crosses.
unsafe impl Send for Communicator {}

impl Communicator {
    /// A one-rank communicator that needs no MPI (`zero_comm_create_self`).
    pub fn new_self() -> Result<Communicator> {
        crate::check_version()?;
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out pointer.
        check(unsafe { sys::zero_comm_create_self(&mut raw) })?;
        // SAFETY: on success `raw` is a fresh handle we now own.
        unsafe { Communicator::from_raw(raw) }
    }

    /// A communicator over `MPI_COMM_WORLD` (`zero_comm_create_mpi`).
    ///
    /// Initializes MPI if nobody has; zero finalizes it at process exit. Fails
    /// with [`Status::Unimplemented`] when the library was built without MPI.
    pub fn mpi_world() -> Result<Communicator> {
        crate::check_version()?;
        let mut raw = ptr::null_mut();
        // SAFETY: NULL selects MPI_COMM_WORLD; `raw` is a valid out pointer.
        check(unsafe { sys::zero_comm_create_mpi(ptr::null(), &mut raw) })?;
        // SAFETY: on success `raw` is a fresh handle we now own.
        unsafe { Communicator::from_raw(raw) }
    }

    /// An NCCL communicator over `MPI_COMM_WORLD`'s ranks, this rank on CUDA
    /// device `device` (`zero_comm_create_nccl`): engines on it keep their
    /// state on that GPU. [`Status::Unimplemented`] when the library was
    /// built without CUDA; with `ZERO_GPU_STANDIN=1` in the environment, the
    /// NCCL-shaped CPU stand-in (tests).
    pub fn nccl(device: i32) -> Result<Communicator> {
        crate::check_version()?;
        let mut raw = ptr::null_mut();
        // SAFETY: NULL selects MPI_COMM_WORLD; `raw` is a valid out pointer.
        check(unsafe { sys::zero_comm_create_nccl(ptr::null(), device, &mut raw) })?;
        // SAFETY: on success `raw` is a fresh handle we now own.
        unsafe { Communicator::from_raw(raw) }
    }

    /// `world_size` communicators of one in-process group
    /// (`zero_comm_create_threads`); element `r` is rank `r`. Move each one to
    /// its own thread: collectives wait for every rank.
    pub fn threads(world_size: usize) -> Result<Vec<Communicator>> {
        crate::check_version()?;
        let n = i32::try_from(world_size)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| {
                Error::new(
                    Status::InvalidArgument,
                    format!("world_size: expected 1..{}, got {world_size}", i32::MAX),
                )
            })?;
        let mut raws: Vec<*mut sys::zero_comm_t> = vec![ptr::null_mut(); world_size];
        // SAFETY: `raws` holds `world_size` out slots.
        check(unsafe { sys::zero_comm_create_threads(n, raws.as_mut_ptr()) })?;
        let mut comms = Vec::with_capacity(world_size);
        let mut rest = raws.into_iter();
        for raw in rest.by_ref() {
            // SAFETY: on success every slot holds a fresh handle we now own.
            match unsafe { Communicator::from_raw(raw) } {
                Ok(comm) => comms.push(comm),
                Err(e) => {
                    for raw in rest {
                        // SAFETY: still ours; destroy accepts NULL.
                        unsafe { sys::zero_comm_destroy(raw) };
                    }
                    return Err(e);
                }
            }
        }
        Ok(comms)
    }

    /// Takes ownership of a handle from zero_comm_create_*; destroys it on
    /// failure.
    unsafe fn from_raw(raw: *mut sys::zero_comm_t) -> Result<Communicator> {
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::new(
                Status::Internal,
                "zero_comm_create_* returned OK and a NULL handle",
            )
        })?;
        let mut comm = Communicator {
            raw,
            rank: 0,
            size: 0,
        };
        let (mut rank, mut size) = (0i32, 0i32);
        // SAFETY: `comm.raw` is live; the out pointers are valid. On error,
        // dropping `comm` destroys the handle.
        check(unsafe { sys::zero_comm_rank(comm.raw.as_ptr(), &mut rank) })?;
        check(unsafe { sys::zero_comm_size(comm.raw.as_ptr(), &mut size) })?;
        comm.rank = rank as usize;
        comm.size = size as usize;
        Ok(comm)
    }

    /// This process's (or thread's) rank, `0..size()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// COLLECTIVE. Waits for every rank (`zero_comm_barrier`).
    pub fn barrier(&self) -> Result<()> {
        // SAFETY: the handle is live; `Communicator` is not `Sync`, so no
        // other thread uses it concurrently.
        check(unsafe { sys::zero_comm_barrier(self.raw.as_ptr()) })
    }

    /// COLLECTIVE. In-place sum of `data` over all ranks
    /// (`zero_comm_allreduce_sum_f32`), for losses and metrics.
    pub fn allreduce_sum(&self, data: &mut [f32]) -> Result<()> {
        // SAFETY: as in `barrier`; `data` is valid for `len` floats.
        check(unsafe {
            sys::zero_comm_allreduce_sum_f32(self.raw.as_ptr(), data.as_mut_ptr(), data.len())
        })
    }

    /// COLLECTIVE. `data` replaced by rank `root`'s bytes (`zero_comm_broadcast`).
    pub fn broadcast(&self, data: &mut [u8], root: i32) -> Result<()> {
        // SAFETY: as in `barrier`; `data` is valid for `len` bytes.
        check(unsafe {
            sys::zero_comm_broadcast(
                self.raw.as_ptr(),
                data.as_mut_ptr().cast(),
                data.len(),
                root,
            )
        })
    }

    /// NOT collective. This rank gives up (`zero_comm_abort`): every peer
    /// fails promptly with "rank N failed: `reason`". Under MPI the whole
    /// job is aborted and this does not return; thread communicators break
    /// their group and return.
    pub fn abort(&self, reason: &str) {
        let text = std::ffi::CString::new(reason.replace('\0', " ")).unwrap_or_default();
        // SAFETY: as in `barrier`; `text` outlives the call.
        unsafe { sys::zero_comm_abort(self.raw.as_ptr(), text.as_ptr()) }
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::zero_comm_t {
        self.raw.as_ptr()
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        // SAFETY: we own the handle; engines borrow `self`, so none is alive.
        unsafe { sys::zero_comm_destroy(self.raw.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_rejects_zero_ranks() {
        let err = Communicator::threads(0).unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument);
        assert!(err.message().contains("world_size"), "{err}");
    }
}
