//! Memory per rank before launching ([`estimate_memory_params`] and
//! [`estimate_memory`], the C ABI's `zero_estimate_memory_params` and
//! `zero_estimate_memory`): the engine's own allocation rules over params and
//! a config, no engine and no communicator needed.
use std::ffi::CStr;
use std::ptr;

use zero_sys as sys;

use crate::config::{Config, DType, Source};
use crate::engine::ParamDesc;
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
    let json = json_of(config, "estimate_memory")?;
    let (rpn, nodes) = ranks_of(topology, "estimate_memory")?;
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

/// Bytes per rank an engine of `config` would hold for `params`, described
/// as [`Engine::register_param`](crate::Engine::register_param) is given
/// them and in its order (C ABI 1.16): the runtime's registration checks and
/// decisions apply, so a param with `trainable(false)` is frozen (held
/// whole, no gradient or optimizer state) and, with
/// [`Optimizer::Muon`](crate::Optimizer::Muon), each param's half is its
/// `use_muon` or DeepSpeed's rule by name (the embedding and the LM head on
/// AdamW). Trainable params are held in the config's working dtype; a frozen
/// param's bytes are its dtype's, so a frozen param needs
/// [`ParamDesc::dtype`] ([`Status::InvalidArgument`] without). `config` must
/// come from JSON, as for [`estimate_memory`].
///
/// ```
/// use zero::{estimate_memory_params, Config, DType, ParamDesc, Topology};
/// let cfg = Config::from_json(r#"{"optimizer": {"type": "Muon"}}"#).unwrap();
/// let params = [
///     ParamDesc::new("embed_tokens.weight", &[1000, 64]),
///     ParamDesc::new("layers.0.fc.weight", &[256, 64]),
///     ParamDesc::new("layers.0.fc.bias", &[256]).trainable(false).dtype(DType::F32),
/// ];
/// let e = estimate_memory_params(&cfg, &params, Topology::default()).unwrap();
/// assert_eq!(e.trainable_numel, 1000 * 64 + 256 * 64);
/// assert_eq!(e.frozen_bytes, 256 * 4);
/// ```
pub fn estimate_memory_params(
    config: &Config,
    params: &[ParamDesc<'_>],
    topology: Topology,
) -> Result<MemoryEstimate> {
    crate::check_version()?;
    let json = json_of(config, "estimate_memory_params")?;
    let (rpn, nodes) = ranks_of(topology, "estimate_memory_params")?;
    let mut built = Vec::with_capacity(params.len());
    for p in params {
        if !p.is_trainable() && p.dtype_set().is_none() {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "estimate_memory_params: frozen param '{}' needs its dtype (ParamDesc::dtype)",
                    p.name()
                ),
            ));
        }
        // A trainable param's dtype is not read (the working dtype's).
        built.push(p.to_raw(DType::F32)?);
    }
    let raw: Vec<sys::zero_param_desc> = built.iter().map(|b| b.raw).collect();
    let count = i32::try_from(raw.len()).map_err(|_| {
        Error::new(
            Status::InvalidArgument,
            "estimate_memory_params: too many params",
        )
    })?;
    let mut out = sys::zero_memory_estimate_init();
    // SAFETY: `json` is NUL-terminated; `raw` holds `count` descriptions whose
    // names and shapes live in `built` until the call returns (or is empty,
    // passed as null); `out` has struct_size set.
    check(unsafe {
        sys::zero_estimate_memory_params(
            json.as_ptr(),
            count,
            if raw.is_empty() {
                ptr::null()
            } else {
                raw.as_ptr()
            },
            rpn,
            nodes,
            topology.gpu as i32,
            &mut out,
        )
    })?;
    Ok(MemoryEstimate::from_raw(&out))
}

/// The JSON text of `config`; a built config is refused (the estimate reads
/// the ds_config).
fn json_of<'c>(config: &'c Config, call: &str) -> Result<&'c CStr> {
    match &config.source {
        Source::Json(text) => Ok(text.as_c_str()),
        Source::Struct(_) => Err(Error::new(
            Status::InvalidArgument,
            format!("{call}: the config must come from JSON (Config::from_json or from_file)"),
        )),
    }
}

fn ranks_of(topology: Topology, call: &str) -> Result<(i32, i32)> {
    let too_big =
        |what: &str| Error::new(Status::InvalidArgument, format!("{call}: {what} too large"));
    Ok((
        i32::try_from(topology.ranks_per_node).map_err(|_| too_big("ranks_per_node"))?,
        i32::try_from(topology.nodes).map_err(|_| too_big("nodes"))?,
    ))
}
