//! Errors: a status code from the C ABI plus the message of zero_last_error().
use std::ffi::CStr;
use std::fmt;

use zero_sys as sys;

/// The kind of failure, one-to-one with the C ABI's `zero_status` codes:
/// generated from the header (`src/generated.rs`), with `from_code` and
/// `code`.
pub use crate::generated::Status;

impl Status {
    /// The library's static description of this code (`zero_status_string`).
    pub fn description(self) -> String {
        // SAFETY: zero_status_string accepts any value and never returns NULL;
        // the text is static.
        unsafe { CStr::from_ptr(sys::zero_status_string(self.code())) }
            .to_string_lossy()
            .into_owned()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.description())
    }
}

/// A failed call: its [`Status`] and the message naming the problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
    /// An error raised by the bindings themselves (checks done before a call).
    pub(crate) fn new(status: Status, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
        }
    }

    /// The kind of failure.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The C status code, as `zero_status` spells it.
    pub fn code(&self) -> u32 {
        self.status.code()
    }

    /// The detailed message (for library errors, `zero_last_error()`).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {}

/// `std::result::Result` with [`Error`] as the error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Turns a C status into a `Result`, copying `zero_last_error()` on failure.
/// Must be called right after the failing call, on the same thread.
pub(crate) fn check(code: sys::zero_status) -> Result<()> {
    match Status::from_code(code) {
        None => Ok(()),
        Some(status) => {
            // SAFETY: zero_last_error never returns NULL; the text stays valid
            // until the next zero_* call on this thread, and we copy it now.
            let message = unsafe { CStr::from_ptr(sys::zero_last_error()) }
                .to_string_lossy()
                .into_owned();
            Err(Error { status, message })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_code_round_trips() {
        assert_eq!(crate::generated::KNOWN_STATUS_CODES.len(), 12);
        for &code in crate::generated::KNOWN_STATUS_CODES {
            let status = Status::from_code(code).unwrap();
            assert!(!matches!(status, Status::Unknown(_)));
            assert_eq!(status.code(), code);
            assert!(!status.description().is_empty());
        }
        assert_eq!(Status::from_code(0), None);
        assert_eq!(Status::from_code(99), Some(Status::Unknown(99)));
    }
}
