//! Errors: a status code from the C ABI plus the message of zero_last_error().
use std::ffi::CStr;
use std::fmt;

use zero_sys as sys;

/// The kind of failure, one-to-one with the C ABI's `zero_status` codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// Bad value: config key, shape, id, buffer length.
    InvalidArgument,
    /// Call in the wrong state or order (e.g. a step before finalize).
    FailedPrecondition,
    /// Unknown param name or missing file.
    NotFound,
    /// Allocation failed or the stage-3 live-parameter budget is exhausted.
    OutOfMemory,
    /// A collective's peer did not arrive within `comm_timeout_seconds`.
    Timeout,
    /// File system failure.
    IoError,
    /// Corrupt or truncated data.
    DataLoss,
    /// Feature not built into the library (e.g. MPI or CUDA).
    Unimplemented,
    /// A bug in zero.
    Internal,
    /// The communicator broke earlier.
    Aborted,
    /// Ranks disagree (registered params, config).
    Mismatch,
    /// A code this version of the bindings does not know.
    Unknown(u32),
}

impl Status {
    /// Maps a C status code; `None` for `ZERO_OK`.
    pub fn from_code(code: u32) -> Option<Status> {
        Some(match code {
            sys::ZERO_OK => return None,
            sys::ZERO_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::ZERO_FAILED_PRECONDITION => Status::FailedPrecondition,
            sys::ZERO_NOT_FOUND => Status::NotFound,
            sys::ZERO_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::ZERO_TIMEOUT => Status::Timeout,
            sys::ZERO_IO_ERROR => Status::IoError,
            sys::ZERO_DATA_LOSS => Status::DataLoss,
            sys::ZERO_UNIMPLEMENTED => Status::Unimplemented,
            sys::ZERO_INTERNAL => Status::Internal,
            sys::ZERO_ABORTED => Status::Aborted,
            sys::ZERO_MISMATCH => Status::Mismatch,
            other => Status::Unknown(other),
        })
    }

    /// The C status code (`zero_status`).
    pub fn code(self) -> u32 {
        match self {
            Status::InvalidArgument => sys::ZERO_INVALID_ARGUMENT,
            Status::FailedPrecondition => sys::ZERO_FAILED_PRECONDITION,
            Status::NotFound => sys::ZERO_NOT_FOUND,
            Status::OutOfMemory => sys::ZERO_OUT_OF_MEMORY,
            Status::Timeout => sys::ZERO_TIMEOUT,
            Status::IoError => sys::ZERO_IO_ERROR,
            Status::DataLoss => sys::ZERO_DATA_LOSS,
            Status::Unimplemented => sys::ZERO_UNIMPLEMENTED,
            Status::Internal => sys::ZERO_INTERNAL,
            Status::Aborted => sys::ZERO_ABORTED,
            Status::Mismatch => sys::ZERO_MISMATCH,
            Status::Unknown(code) => code,
        }
    }

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
        for code in 1..=11 {
            let status = Status::from_code(code).unwrap();
            assert!(!matches!(status, Status::Unknown(_)));
            assert_eq!(status.code(), code);
        }
        assert_eq!(Status::from_code(0), None);
        assert_eq!(Status::from_code(99), Some(Status::Unknown(99)));
    }
}
