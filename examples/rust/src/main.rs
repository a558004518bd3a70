//! Trains a small MLP (in -> hidden tanh -> out, MSE) on synthetic regression
//! data with zero, from Rust. Mirrors examples/c: same model, data, seed and
//! config, so the final params are bitwise equal to the C example's.
//!
//! Run with one rank, or under MPI (the communicator follows
//! OMPI_COMM_WORLD_SIZE):
//!
//! ```text
//! mlp [--stage N] [--steps N] [--config ds_config.json] [--dump params.txt]
//! mpirun -np 3 mlp --stage 3
//! ```
use std::fmt::Write as _;
use std::process::ExitCode;

use zero::{Communicator, Config, Engine, Optimizer, ParamDesc, ParamId};

const IN: usize = 8;
const HIDDEN: usize = 32;
const OUT: usize = 4;
const GLOBAL_BATCH: usize = 24;
const SEED: u64 = 1234;

/// A tiny deterministic PRNG (xorshift64*), the same bits as the C example's.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1), 24 random bits.
    fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32) * (2.0 / 16_777_216.0) - 1.0
    }
}

struct Args {
    stage: u32,
    steps: usize,
    config: Option<String>,
    dump: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        stage: 0,
        steps: 50,
        config: None,
        dump: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--stage" => args.stage = value()?.parse().map_err(|e| format!("--stage: {e}"))?,
            "--steps" => args.steps = value()?.parse().map_err(|e| format!("--steps: {e}"))?,
            "--config" => args.config = Some(value()?),
            "--dump" => args.dump = Some(value()?),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

/// The model's params as the engine knows them.
struct Model {
    w1: ParamId,
    b1: ParamId,
    w2: ParamId,
    b2: ParamId,
}

/// Draws the initial params and the whole data set from one seeded stream.
struct Data {
    w1: Vec<f32>,
    b1: Vec<f32>,
    w2: Vec<f32>,
    b2: Vec<f32>,
    x: Vec<f32>, // GLOBAL_BATCH x IN
    y: Vec<f32>, // GLOBAL_BATCH x OUT
}

fn make_data() -> Data {
    let mut rng = Rng::new(SEED);
    let mut draw =
        |n: usize, scale: f32| -> Vec<f32> { (0..n).map(|_| rng.uniform() * scale).collect() };
    let w1 = draw(IN * HIDDEN, 0.5);
    let b1 = vec![0.0; HIDDEN];
    let w2 = draw(HIDDEN * OUT, 0.5);
    let b2 = vec![0.0; OUT];
    let x = draw(GLOBAL_BATCH * IN, 1.0);
    // Targets: a fixed random linear map of x, squashed.
    let teacher = draw(IN * OUT, 1.0);
    let mut y = vec![0.0; GLOBAL_BATCH * OUT];
    for n in 0..GLOBAL_BATCH {
        for o in 0..OUT {
            let mut s = 0.0f32;
            for i in 0..IN {
                s += x[n * IN + i] * teacher[i * OUT + o];
            }
            y[n * OUT + o] = s.tanh();
        }
    }
    Data {
        w1,
        b1,
        w2,
        b2,
        x,
        y,
    }
}

/// One micro-step on rows [lo, hi) of the data: forward, loss, backward.
/// Returns the local mean loss and the gradients (w1, b1, w2, b2).
fn forward_backward(
    engine: &Engine<'_>,
    m: &Model,
    d: &Data,
    lo: usize,
    hi: usize,
) -> zero::Result<(f32, [Vec<f32>; 4])> {
    let (gw1, gb1, gw2, gb2) = (
        engine.gather(m.w1)?,
        engine.gather(m.b1)?,
        engine.gather(m.w2)?,
        engine.gather(m.b2)?,
    );
    let (w1, b1, w2, b2) = (gw1.as_f32()?, gb1.as_f32()?, gw2.as_f32()?, gb2.as_f32()?);
    let rows = hi - lo;
    let inv = 1.0 / rows as f32;
    let mut loss = 0.0f32;
    let mut dw1 = vec![0.0f32; IN * HIDDEN];
    let mut db1 = vec![0.0f32; HIDDEN];
    let mut dw2 = vec![0.0f32; HIDDEN * OUT];
    let mut db2 = vec![0.0f32; OUT];
    let mut h = [0.0f32; HIDDEN];
    let mut dh = [0.0f32; HIDDEN];
    let mut dy = [0.0f32; OUT];
    for n in lo..hi {
        let x = &d.x[n * IN..(n + 1) * IN];
        for j in 0..HIDDEN {
            let mut s = b1[j];
            for i in 0..IN {
                s += x[i] * w1[i * HIDDEN + j];
            }
            h[j] = s.tanh();
        }
        for o in 0..OUT {
            let mut s = b2[o];
            for j in 0..HIDDEN {
                s += h[j] * w2[j * OUT + o];
            }
            let e = s - d.y[n * OUT + o];
            loss += e * e * inv;
            dy[o] = 2.0 * e * inv;
        }
        for j in 0..HIDDEN {
            let mut s = 0.0f32;
            for o in 0..OUT {
                dw2[j * OUT + o] += h[j] * dy[o];
                s += w2[j * OUT + o] * dy[o];
            }
            dh[j] = s * (1.0 - h[j] * h[j]);
        }
        for o in 0..OUT {
            db2[o] += dy[o];
        }
        for i in 0..IN {
            for j in 0..HIDDEN {
                dw1[i * HIDDEN + j] += x[i] * dh[j];
            }
        }
        for j in 0..HIDDEN {
            db1[j] += dh[j];
        }
    }
    Ok((loss, [dw1, db1, dw2, db2]))
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let comm = if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() {
        Communicator::mpi_world()?
    } else {
        Communicator::new_self()?
    };
    let (rank, world) = (comm.rank(), comm.size());
    let config = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::builder()
            .stage(args.stage)
            .optimizer(Optimizer::AdamW)
            .lr(1e-2)
            .weight_decay(0.01)
            .steps_per_print(0)
            .build(),
    };
    let data = make_data();
    let mut engine = Engine::new(&config, &comm)?;
    let model = Model {
        w1: engine.register_param(ParamDesc::new("w1", &[IN, HIDDEN]).init(&data.w1))?,
        b1: engine.register_param(ParamDesc::new("b1", &[HIDDEN]).init(&data.b1))?,
        w2: engine.register_param(ParamDesc::new("w2", &[HIDDEN, OUT]).init(&data.w2))?,
        b2: engine.register_param(ParamDesc::new("b2", &[OUT]).init(&data.b2))?,
    };
    engine.finalize()?;
    if GLOBAL_BATCH % world != 0 {
        return Err(format!("{GLOBAL_BATCH} samples do not split over {world} ranks").into());
    }
    let per_rank = GLOBAL_BATCH / world;
    let (lo, hi) = (rank * per_rank, (rank + 1) * per_rank);
    for step in 0..args.steps {
        let (loss, grads) = forward_backward(&engine, &model, &data, lo, hi)?;
        for (id, g) in [model.w1, model.b1, model.w2, model.b2]
            .into_iter()
            .zip(&grads)
        {
            engine.set_grad(id, g)?;
        }
        engine.report_samples(per_rank as u64)?;
        let info = engine.step()?;
        let mut mean = [loss];
        comm.allreduce_sum(&mut mean)?;
        if rank == 0 && (step % 10 == 0 || step + 1 == args.steps) {
            println!(
                "step {:4} loss {:.6} grad_norm {:.6}",
                step,
                mean[0] / world as f32,
                info.grad_norm
            );
        }
    }
    // Final params: a full copy on every rank (collective in stage 3).
    let mut text = String::new();
    for (name, id) in [
        ("w1", model.w1),
        ("b1", model.b1),
        ("w2", model.w2),
        ("b2", model.b2),
    ] {
        let g = engine.gather(id)?;
        for (i, v) in g.as_f32()?.iter().enumerate() {
            writeln!(text, "{name} {i} {:08x} {v:.9e}", v.to_bits()).unwrap();
        }
    }
    if let (Some(path), 0) = (&args.dump, rank) {
        std::fs::write(path, &text).map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mlp: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mlp: {e}");
            ExitCode::FAILURE
        }
    }
}
