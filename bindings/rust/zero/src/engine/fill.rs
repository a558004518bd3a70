//! The fill callback of [`Engine::register_param_fill`]: the Rust closure
//! behind the C callback the runtime calls during finalize.
#[allow(unused_imports)] // the doc links
use super::Engine;

/// The closure type of [`Engine::register_param_fill`].
pub(super) type FillFn<'c> = dyn FnMut(&str, i64, &mut [f32]) -> std::result::Result<(), String> + 'c;

pub(super) struct FillState<'c> {
    pub(super) name: String,
    pub(super) fill: Box<FillFn<'c>>,
    // The first error or panic message, reported by finalize.
    pub(super) error: Option<String>,
}

// Called by the runtime during zero_engine_finalize, on the calling thread.
pub(super) unsafe extern "C" fn fill_trampoline(
    user: *mut std::os::raw::c_void,
    name: *const std::os::raw::c_char,
    offset: i64,
    count: i64,
    out: *mut f32,
) -> i32 {
    // Nothing may unwind into C: a panic is caught and becomes an error.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if user.is_null() || (count > 0 && out.is_null()) || count < 0 {
            return 1;
        }
        // SAFETY: `user` is the FillState registered with this callback,
        // boxed and alive until finalize returns; finalize borrows the engine
        // mutably, so nothing else touches it meanwhile.
        let state = unsafe { &mut *(user as *mut FillState<'_>) };
        let name = if name.is_null() {
            state.name.clone()
        } else {
            // SAFETY: the runtime passes a NUL-terminated name.
            unsafe { std::ffi::CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        };
        let out: &mut [f32] = if count == 0 {
            &mut []
        } else {
            // SAFETY: the runtime passes `count` writable floats at `out`.
            unsafe { std::slice::from_raw_parts_mut(out, count as usize) }
        };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            (state.fill)(&name, offset, out)
        }));
        let msg = match r {
            Ok(Ok(())) => return 0,
            Ok(Err(msg)) => msg,
            Err(payload) => {
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string payload".to_string());
                format!("panicked: {what}")
            }
        };
        if state.error.is_none() {
            state.error = Some(format!(
                "fill for param '{name}' [{offset}, {}): {msg}",
                offset + count
            ));
        }
        1
    }));
    result.unwrap_or(1)
}
