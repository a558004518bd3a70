//! Trains a small MLP through zero's safe Rust API: the program owns the math
//! (hand-written forward and backward), zero owns the model state.
//!
//! ```text
//! mlp [--config ds_config.json] [--stage S] [--steps N] [--hidden H]
//!     [--dump FILE] [--quiet]
//! mpirun -np 3 mlp --stage 3
//! ```
//!
//! A line-by-line mirror of examples/c/mlp_train.c: the same data, initial
//! values, config, arithmetic (double precision, same loop order) and call
//! order, so `--dump` writes the same bytes (raw little-endian fp32 master
//! weights of fc1.weight, fc1.bias, fc2.weight, fc2.bias). Under mpirun (when
//! OMPI_COMM_WORLD_SIZE is set) every rank takes its slice of each batch.
// Index loops on purpose: they spell the C example's loop order exactly.
#![allow(clippy::needless_range_loop)]

use std::error::Error;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use zero::{Communicator, Config, DType, Engine, ParamData, ParamDesc, ParamId};

// ---- Reproducible parts (see mlp_train.c) ----------------------------------
// splitmix64; uniform(-1, 1) = ((x >> 11) * 2^-53) * 2 - 1 in double.
// Inputs: N_SAMPLES x IN, drawn row-major from seed 7.
// Targets: t[j] = sin(0.3 * sum_i x[i] * (((i + j) % 5) - 2)), i ascending.
// Params, in order fc1.weight [H, IN], fc1.bias [H], fc2.weight [OUT, H],
// fc2.bias [OUT], drawn from seed 42 as uniform(-1, 1) / sqrt(fan_in),
// rounded to float.
// Step s uses global batch rows (s * GLOBAL_BATCH + k) % N_SAMPLES for
// k in [0, GLOBAL_BATCH); rank r of W takes k in [r*B/W, (r+1)*B/W).
// Loss per sample: 0.5 * sum_j (y_j - t_j)^2; the rank's loss is the mean
// over its rows; gradients are of that mean, divided by the accumulation
// steps, times the loss scale, rounded to the working dtype.
const IN: usize = 16;
const OUT: usize = 4;
const N_SAMPLES: usize = 240;
const GLOBAL_BATCH: usize = 48;

/// splitmix64, the example's whole source of randomness.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / 9007199254740992.0) * 2.0 - 1.0
    }
}

// fp16 / bf16 <-> float for the working copy (round to nearest even), as in C.
fn half_to_float(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let (exp, man) = (((h >> 10) & 0x1f) as u32, (h & 0x3ff) as u32);
    if exp == 0x1f {
        f32::from_bits(sign | 0x7f80_0000 | (man << 13))
    } else if exp == 0 {
        let f = man as f32 * (1.0 / 16_777_216.0); // 2^-24
        if sign != 0 {
            -f
        } else {
            f
        }
    } else {
        f32::from_bits(sign | ((exp + 112) << 23) | (man << 13))
    }
}

fn float_to_half(f: f32) -> u16 {
    let u = f.to_bits();
    let sign = (u >> 16) & 0x8000;
    let abs = u & 0x7fff_ffff;
    if abs > 0x7f80_0000 {
        return (sign | 0x7e00) as u16;
    }
    if abs >= 0x477f_f000 {
        return (sign | 0x7c00) as u16;
    }
    if abs < 0x3880_0000 {
        if abs < 0x3300_0000 {
            return sign as u16;
        }
        let (e, m) = (abs >> 23, (abs & 0x7f_ffff) | 0x80_0000);
        let d = 126 - e;
        let mut q = m >> d;
        let rem = m & ((1 << d) - 1);
        let hf = 1 << (d - 1);
        if rem > hf || (rem == hf && (q & 1) != 0) {
            q += 1;
        }
        (sign | q) as u16
    } else {
        let mut h = (abs - 0x3800_0000) >> 13;
        let rem = abs & 0x1fff;
        if rem > 0x1000 || (rem == 0x1000 && (h & 1) != 0) {
            h += 1;
        }
        (sign | h) as u16
    }
}

fn bf16_to_float(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

fn float_to_bf16(f: f32) -> u16 {
    let mut u = f.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    u = u.wrapping_add(0x7fff + ((u >> 16) & 1));
    (u >> 16) as u16
}

/// Element `i` of a gathered param, widened to double.
fn load(p: &ParamData<'_>, i: usize) -> f64 {
    match p {
        ParamData::F32(v) => v[i] as f64,
        ParamData::F16(v) => half_to_float(v[i]) as f64,
        ParamData::BF16(v) => bf16_to_float(v[i]) as f64,
    }
}

/// Writes `v` as the param's working dtype into a gradient buffer.
fn store_all(
    grad: &mut zero::GradBuffer<'_, '_>,
    g: &[f64],
    scale: f64,
    gas: i32,
) -> zero::Result<()> {
    match grad.dtype() {
        DType::F32 => {
            for (dst, v) in grad.as_f32_mut()?.iter_mut().zip(g) {
                *dst = (v * scale / gas as f64) as f32;
            }
        }
        dtype => {
            let round = if dtype == DType::F16 {
                float_to_half
            } else {
                float_to_bf16
            };
            for (dst, v) in grad.as_u16_mut()?.iter_mut().zip(g) {
                *dst = round((v * scale / gas as f64) as f32);
            }
        }
    }
    Ok(())
}

struct Args {
    config: Option<String>,
    stage: u32,
    steps: usize,
    hidden: usize,
    dump: Option<String>,
    quiet: bool,
}

fn parse_args() -> Option<Args> {
    let mut a = Args {
        config: None,
        stage: 0,
        steps: 30,
        hidden: 32,
        dump: None,
        quiet: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--config" => a.config = Some(it.next()?),
            "--stage" => a.stage = it.next()?.parse().ok()?,
            "--steps" => a.steps = it.next()?.parse().ok()?,
            "--hidden" => a.hidden = it.next()?.parse().ok()?,
            "--dump" => a.dump = Some(it.next()?),
            "--quiet" => a.quiet = true,
            _ => return None,
        }
    }
    Some(a)
}

fn run(args: &Args) -> Result<(), Box<dyn Error>> {
    let comm = if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() {
        Communicator::mpi_world()?
    } else {
        Communicator::new_self()?
    };
    let (rank, world) = (comm.rank(), comm.size());
    if GLOBAL_BATCH % world != 0 {
        return Err(format!("world size {world} must divide {GLOBAL_BATCH}").into());
    }
    let config = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::builder()
            .stage(args.stage)
            .lr(1e-2)
            .steps_per_print(if args.quiet { 0 } else { 10 })
            .build(),
    };
    let mut engine = Engine::new(&config, &comm)?;
    let gas = 1; // this example does not accumulate: one micro-step per step
    let hidden = args.hidden;

    // Data.
    let mut seed = SplitMix64(7);
    let mut x = vec![[0.0f64; IN]; N_SAMPLES];
    let mut t = vec![[0.0f64; OUT]; N_SAMPLES];
    for i in 0..N_SAMPLES {
        for a in 0..IN {
            x[i][a] = seed.uniform();
        }
        for j in 0..OUT {
            let mut s = 0.0f64;
            for a in 0..IN {
                s += x[i][a] * ((((a + j) % 5) as i32 - 2) as f64);
            }
            t[i][j] = (0.3 * s).sin();
        }
    }
    // Params.
    let names = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"];
    let shapes: [&[usize]; 4] = [&[hidden, IN], &[hidden], &[OUT, hidden], &[OUT]];
    let fan_in = [IN as f64, IN as f64, hidden as f64, hidden as f64];
    let numel: Vec<usize> = shapes.iter().map(|s| s.iter().product()).collect();
    let mut ps = SplitMix64(42);
    let mut ids: Vec<ParamId> = Vec::with_capacity(4);
    for i in 0..4 {
        let init: Vec<f32> = (0..numel[i])
            .map(|_| (ps.uniform() / fan_in[i].sqrt()) as f32)
            .collect();
        ids.push(engine.register_param(ParamDesc::new(names[i], shapes[i]).init(&init))?);
    }
    engine.finalize()?;

    let local = GLOBAL_BATCH / world;
    let mut h = vec![0.0f64; local * hidden];
    let mut dh = vec![0.0f64; hidden];
    let mut dy = vec![0.0f64; local * OUT];
    let mut g: Vec<Vec<f64>> = numel.iter().map(|&n| vec![0.0; n]).collect();
    let (mut first_loss, mut last_loss) = (0.0f64, 0.0f64);
    let t0 = Instant::now();
    for s in 0..args.steps {
        let scale = engine.loss_scale()?;
        let mut loss = 0.0f64;
        {
            let gathered = [
                engine.gather(ids[0])?,
                engine.gather(ids[1])?,
                engine.gather(ids[2])?,
                engine.gather(ids[3])?,
            ];
            let [w1, b1, w2, b2] = [0, 1, 2, 3].map(|i| gathered[i].data());
            for gi in g.iter_mut() {
                gi.fill(0.0);
            }
            // Forward.
            for m in 0..local {
                let row = (s * GLOBAL_BATCH + rank * local + m) % N_SAMPLES;
                for j in 0..hidden {
                    let mut z = load(&b1, j);
                    for a in 0..IN {
                        z += load(&w1, j * IN + a) * x[row][a];
                    }
                    h[m * hidden + j] = z.tanh();
                }
                for k in 0..OUT {
                    let mut y = load(&b2, k);
                    for j in 0..hidden {
                        y += load(&w2, k * hidden + j) * h[m * hidden + j];
                    }
                    dy[m * OUT + k] = y - t[row][k];
                    loss += 0.5 * dy[m * OUT + k] * dy[m * OUT + k];
                }
            }
            loss /= local as f64;
            // Backward of the mean loss.
            for m in 0..local {
                let row = (s * GLOBAL_BATCH + rank * local + m) % N_SAMPLES;
                for k in 0..OUT {
                    let d = dy[m * OUT + k] / local as f64;
                    g[3][k] += d;
                    for j in 0..hidden {
                        g[2][k * hidden + j] += d * h[m * hidden + j];
                    }
                }
                for j in 0..hidden {
                    let mut d = 0.0f64;
                    for k in 0..OUT {
                        d += dy[m * OUT + k] / local as f64 * load(&w2, k * hidden + j);
                    }
                    dh[j] = d * (1.0 - h[m * hidden + j] * h[m * hidden + j]);
                    g[1][j] += dh[j];
                    for a in 0..IN {
                        g[0][j * IN + a] += dh[j] * x[row][a];
                    }
                }
            }
            // The guards release in order fc1.weight .. fc2.bias, as C does.
            for guard in gathered {
                guard.release()?;
            }
        }
        // Hand gradients in as autograd would produce them: last layer first.
        for i in (0..4).rev() {
            let mut grad = engine.grad_buffer(ids[i])?;
            store_all(&mut grad, &g[i], scale, gas)?;
            grad.ready()?;
        }
        engine.report_samples(GLOBAL_BATCH as u64)?;
        let info = engine.step()?;
        let mut lsum = [loss as f32];
        comm.allreduce_sum(&mut lsum)?;
        last_loss = (lsum[0] / world as f32) as f64;
        if s == 0 {
            first_loss = last_loss;
        }
        if !args.quiet && rank == 0 && (s % 10 == 0 || s + 1 == args.steps) {
            println!(
                "step {s} loss {last_loss:.6} lr {} grad_norm {}{}",
                info.lr,
                info.grad_norm,
                if info.skipped {
                    " (skipped: overflow)"
                } else {
                    ""
                }
            );
        }
    }
    let step_time = t0.elapsed().as_secs_f64() / args.steps.max(1) as f64;

    let st = engine.stats()?;
    if rank == 0 {
        println!(
            "{{\"example\": \"mlp_rust\", \"stage\": {}, \"world\": {}, \"params\": {}, \
             \"first_loss\": {first_loss:.6}, \"final_loss\": {last_loss:.6}, \"step_ms\": {:.3}, \
             \"model_state_bytes_per_rank\": {}}}",
            st.stage,
            st.world_size,
            st.trainable_numel,
            step_time * 1e3,
            st.master_bytes + st.optimizer_bytes + st.grad_bytes + st.param_bytes
        );
    }
    if let Some(path) = &args.dump {
        let mut bytes = Vec::new();
        for &id in &ids {
            // Collective: every rank reads, rank 0 writes.
            for v in engine.master(id)? {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
        }
        if rank == 0 {
            std::fs::File::create(path)
                .and_then(|mut f| f.write_all(&bytes))
                .map_err(|e| format!("cannot write {path}: {e}"))?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let Some(args) = parse_args() else {
        eprintln!(
            "usage: mlp [--config F] [--stage S] [--steps N] [--hidden H] [--dump F] [--quiet]"
        );
        return ExitCode::from(2);
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mlp: {e}");
            ExitCode::FAILURE
        }
    }
}
