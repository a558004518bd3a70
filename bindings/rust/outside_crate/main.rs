//! A program as a new user writes it in a crate of their own that depends
//! on `zero` alone (bindings/rust/outside_crate_test.sh builds it outside
//! the workspace): each rank pulls a weight vector towards its own target,
//! loss 0.5 ||w - t_r||^2, with SGD at ZeRO stage 1 and 3 over MPI. The mean
//! gradient is w - m (m the ranks' mean target), so after k steps
//! w = m + (w0 - m) (1 - lr)^k: checked against that in f64.
use zero::{Communicator, Config, DType, Engine, ParamDesc};

const N: usize = 300;
const LR: f64 = 0.25;
const STEPS: i32 = 8;

fn target(rank: usize, i: usize) -> f64 {
    ((i * 7 + rank * 13) % 11) as f64 / 4.0 - 1.0
}

fn main() -> zero::Result<()> {
    let comm = Communicator::mpi_world()?;
    let (rank, world) = (comm.rank(), comm.size());
    for stage in [1u32, 3] {
        let config = Config::from_json(&format!(
            r#"{{"steps_per_print": 0, "optimizer": {{"type": "SGD", "params": {{"lr": {LR}}}}},
                "zero_optimization": {{"stage": {stage}, "stage3_param_persistence_threshold": 10}}}}"#
        ))?;
        let mut engine = Engine::new(&config, &comm)?;
        let w0: Vec<f32> = (0..N).map(|i| (i % 5) as f32 * 0.5).collect();
        let w = engine.register_param(ParamDesc::new("w", &[N]).dtype(DType::F32).init(&w0))?;
        engine.finalize()?;
        for _ in 0..STEPS {
            let grad: Vec<f32> = {
                let g = engine.gather(w)?;
                g.as_f32()?.iter().enumerate().map(|(i, v)| v - target(rank, i) as f32).collect()
            };
            engine.set_grad(w, &grad)?;
            engine.step()?;
        }
        let got = engine.gather(w)?.as_f32()?.to_vec();
        let mut worst = 0f64;
        for (i, v) in got.iter().enumerate() {
            let m = (0..world).map(|r| target(r, i)).sum::<f64>() / world as f64;
            let want = m + (w0[i] as f64 - m) * (1.0 - LR).powi(STEPS);
            worst = worst.max((*v as f64 - want).abs());
        }
        assert_eq!(engine.global_step()?, STEPS as u64);
        if worst > 1e-5 {
            eprintln!("rank {rank} stage {stage}: off the f64 reference by {worst}");
            std::process::exit(1);
        }
        if rank == 0 {
            println!("stage {stage}: {world} ranks, {STEPS} steps, within {worst:.1e} of the f64 reference");
        }
    }
    Ok(())
}
