//! Observing a run: the step breakdown, the communication log and its
//! summary, the flight record and the engine's stats.
use std::ptr;

use zero_sys as sys;

use super::{CommLogEntry, Engine, Stats, StepBreakdown};
use crate::error::{check, Result};
#[allow(unused_imports)] // the doc links
use crate::error::Status;

impl<'c> Engine<'c> {
    /// The last optimizer step's wall time by phase
    /// (`zero_engine_step_breakdown`); [`Status::FailedPrecondition`] unless
    /// the config has `"wall_clock_breakdown": true` (or `"zero_trace"`).
    pub fn step_breakdown(&self) -> Result<StepBreakdown> {
        let mut b = sys::zero_step_breakdown_init();
        // SAFETY: live handle, valid out pointer with struct_size set.
        check(unsafe { sys::zero_engine_step_breakdown(self.raw.as_ptr(), &mut b) })?;
        Ok(StepBreakdown::from_raw(&b))
    }

    /// The collective log (`zero_engine_comm_log`): one entry per collective
    /// and message-size bucket; [`Status::FailedPrecondition`] unless the
    /// config has `"comms_logger": {"enabled": true}`.
    pub fn comm_log(&self) -> Result<Vec<CommLogEntry>> {
        let mut n: i32 = 0;
        // SAFETY: live handle; capacity 0 asks for the count only.
        check(unsafe { sys::zero_engine_comm_log(self.raw.as_ptr(), ptr::null_mut(), 0, &mut n) })?;
        let mut raw = vec![sys::zero_comm_log_entry_init(); n.max(0) as usize];
        // SAFETY: `raw` holds `n` entries, each with struct_size set.
        check(unsafe {
            sys::zero_engine_comm_log(self.raw.as_ptr(), raw.as_mut_ptr(), n, &mut n)
        })?;
        raw.truncate(n.max(0) as usize);
        Ok(raw.iter().map(CommLogEntry::from_raw).collect())
    }

    /// The collective log as DeepSpeed's `log_summary` table
    /// (`zero_engine_comm_log_summary`, what rank 0 prints when the engine is
    /// dropped); [`Status::FailedPrecondition`] when the log is off.
    pub fn comm_log_summary(&self) -> Result<String> {
        let mut len: usize = 0;
        // SAFETY: live handle; capacity 0 asks for the length only.
        check(unsafe {
            sys::zero_engine_comm_log_summary(self.raw.as_ptr(), ptr::null_mut(), 0, &mut len)
        })?;
        let mut buf = vec![0u8; len + 1];
        // SAFETY: `buf` holds len + 1 bytes, room for the text and its NUL.
        check(unsafe {
            sys::zero_engine_comm_log_summary(
                self.raw.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut len,
            )
        })?;
        buf.truncate(len.min(buf.len() - 1));
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// This rank's last collectives, oldest first, one JSON object per line
    /// (`zero_engine_flight_record`): kind, size, params or bucket, engine
    /// call, step, micro-step and outcome. Readable after an error: where the
    /// ranks diverged the last line's outcome is `"diverged"` (README.md,
    /// "When ranks disagree").
    pub fn flight_record(&self) -> Result<String> {
        let mut len: usize = 0;
        // SAFETY: live handle; capacity 0 asks for the length only.
        check(unsafe {
            sys::zero_engine_flight_record(self.raw.as_ptr(), ptr::null_mut(), 0, &mut len)
        })?;
        loop {
            let mut buf = vec![0u8; len + 1];
            // SAFETY: `buf` holds len + 1 bytes, room for the text and its NUL.
            check(unsafe {
                sys::zero_engine_flight_record(
                    self.raw.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    &mut len,
                )
            })?;
            // It may have grown between the calls (a reduction still running).
            if len < buf.len() {
                buf.truncate(len);
                return Ok(String::from_utf8_lossy(&buf).into_owned());
            }
        }
    }

    /// Memory and traffic counters of this rank.
    pub fn stats(&self) -> Result<Stats> {
        let mut s = sys::zero_stats_init();
        // SAFETY: live handle, valid out pointer with struct_size set.
        check(unsafe { sys::zero_engine_stats(self.raw.as_ptr(), &mut s) })?;
        Ok(Stats::from_raw(&s))
    }
}
