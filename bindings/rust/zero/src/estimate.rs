//! Memory per rank before launching ([`estimate_memory`], the C ABI's
//! `zero_estimate_memory`): the engine's own allocation rules over param
//! shapes and a config, no engine and no communicator needed.
use std::ptr;

use zero_sys as sys;

use crate::config::{Config, Source};
use crate::error::{check, Error, Result, Status};
use crate::generated::MemoryEstimate;

/// Where the ranks run: `ranks_per_node` × `nodes` ranks; `gpu` places the
/// bytes on a device apart from host memory (false: the CPU device).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Ranks on each node.
    pub ranks_per_node: u32,
    /// Nodes.
    pub nodes: u32,
    /// A device with its own memory (true) or the CPU device (false).
    pub gpu: bool,
}

impl Default for Topology {
    fn default() -> Topology {
        Topology {
            ranks_per_node: 1,
            nodes: 1,
            gpu: true,
        }
    }
}

/// Bytes per rank an engine of `config` would hold for trainable params of
/// these `shapes` (2-D shapes size the "auto" buckets), in `zero_stats`'
/// categories plus where they live. `config` must come from JSON
/// ([`Config::from_json`] or [`Config::from_file`]): stage, precision,
/// offload and bucket sizes are read from it; a built config is refused
/// with [`Status::InvalidArgument`].
///
/// ```
/// let cfg = zero::Config::from_json(r#"{"zero_optimization": {"stage": 3}}"#).unwrap();
/// let topo = zero::Topology { ranks_per_node: 8, ..Default::default() };
/// let e = zero::estimate_memory(&cfg, &[vec![4096, 4096], vec![4096]], topo).unwrap();
/// assert_eq!(e.trainable_numel, 4096 * 4096 + 4096);
/// ```
pub fn estimate_memory<S: AsRef<[usize]>>(
    config: &Config,
    shapes: &[S],
    topology: Topology,
) -> Result<MemoryEstimate> {
    crate::check_version()?;
    let json =
        match &config.source {
            Source::Json(text) => text,
            Source::Struct(_) => return Err(Error::new(
                Status::InvalidArgument,
                "estimate_memory: the config must come from JSON (Config::from_json or from_file)",
            )),
        };
    let too_big = |what: &str| {
        Error::new(
            Status::InvalidArgument,
            format!("estimate_memory: {what} too large"),
        )
    };
    let mut numel = Vec::with_capacity(shapes.len());
    let mut ndim = Vec::with_capacity(shapes.len());
    for s in shapes {
        let s = s.as_ref();
        let n = s
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| too_big("numel"))?;
        numel.push(i64::try_from(n).map_err(|_| too_big("numel"))?);
        ndim.push(i32::try_from(s.len()).map_err(|_| too_big("ndim"))?);
    }
    let count = i32::try_from(shapes.len()).map_err(|_| too_big("shape count"))?;
    let rpn = i32::try_from(topology.ranks_per_node).map_err(|_| too_big("ranks_per_node"))?;
    let nodes = i32::try_from(topology.nodes).map_err(|_| too_big("nodes"))?;
    let (pn, pd) = if shapes.is_empty() {
        (ptr::null(), ptr::null())
    } else {
        (numel.as_ptr(), ndim.as_ptr())
    };
    let mut out = sys::zero_memory_estimate_init();
    // SAFETY: `json` is NUL-terminated; numel/ndim hold `count` entries (or
    // are null with count 0); `out` has struct_size set.
    check(unsafe {
        sys::zero_estimate_memory(
            json.as_ptr(),
            count,
            pn,
            pd,
            rpn,
            nodes,
            topology.gpu as i32,
            &mut out,
        )
    })?;
    Ok(MemoryEstimate::from_raw(&out))
}
