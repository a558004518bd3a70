//! Progress of long work (C ABI 1.6, `zero_progress_fn`): checkpoint save,
//! load, export and reshard, and the NVMe tier's preallocation and first
//! write at finalize, reported to a closure `f(what, done, total)`: `what`
//! names the work (`"save"`, `"load"`, `"export"`, `"reshard"`,
//! `"nvme preallocate"`, `"nvme initialize"`), `done` bytes of `total` on
//! this rank, rising to `total`. Returning `false` cancels: the call fails
//! with [`Status::Cancelled`](crate::Status::Cancelled). The closure runs on
//! an engine thread while the call blocks (hence `Send`); a panic in it
//! cancels the work and is resumed on the caller's thread afterwards.

use std::any::Any;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{self, AssertUnwindSafe};

use zero_sys as sys;

use crate::error::Result;

/// The closure type of the `*_with_progress` calls.
pub type ProgressFn<'a> = dyn FnMut(&str, i64, i64) -> bool + Send + 'a;

struct State<'a, 'f> {
    f: &'a mut ProgressFn<'f>,
    panic: Option<Box<dyn Any + Send>>,
}

unsafe extern "C" fn trampoline(
    user: *mut c_void,
    what: *const c_char,
    done: i64,
    total: i64,
) -> i32 {
    // SAFETY: `user` is the State `with_progress` keeps alive for the call,
    // reached from one engine thread at a time while the caller blocks.
    let st = unsafe { &mut *(user as *mut State<'_, '_>) };
    if st.panic.is_some() {
        return 1;
    }
    // SAFETY: the library passes a NUL-terminated string valid for the call.
    let what = unsafe { CStr::from_ptr(what) }.to_string_lossy();
    match panic::catch_unwind(AssertUnwindSafe(|| (st.f)(&what, done, total))) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(p) => {
            st.panic = Some(p);
            1
        }
    }
}

/// Runs `call(fn, user)` with `f` as the C callback, then resumes a panic
/// the closure raised.
pub(crate) fn with_progress<R>(
    f: &mut ProgressFn<'_>,
    call: impl FnOnce(sys::zero_progress_fn, *mut c_void) -> Result<R>,
) -> Result<R> {
    let mut st = State { f, panic: None };
    let r = call(Some(trampoline), &mut st as *mut State<'_, '_> as *mut c_void);
    if let Some(p) = st.panic.take() {
        panic::resume_unwind(p);
    }
    r
}
