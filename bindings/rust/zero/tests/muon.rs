//! Optimizer::Muon through the C ABI (1.13): one step of a 2x2 matrix
//! against Muon written out here in f64, a matrix moved to AdamW by
//! `use_muon(false)` stepping bit for bit as AdamW, and a 1-D param marked
//! for Muon refused naming it.
use zero::{Communicator, Config, Engine, Optimizer, ParamDesc, Status};

fn config(stage: u32, optimizer: Optimizer) -> Config {
    Config::builder()
        .stage(stage)
        .optimizer(optimizer)
        .lr(0.02)
        .steps_per_print(0)
        .build()
}

/// Trains one step with gradient `grad` on a `shape` param; its master.
fn one_step(cfg: &Config, desc: ParamDesc<'_>, grad: &[f32]) -> Vec<f32> {
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(cfg, &comm).unwrap();
    let w = engine.register_param(desc).unwrap();
    engine.finalize().unwrap();
    let mut g = engine.grad_buffer(w).unwrap();
    g.as_f32_mut().unwrap().copy_from_slice(grad);
    g.ready().unwrap();
    assert!(engine.step().unwrap().boundary);
    engine.master(w).unwrap()
}

#[test]
fn muon_step_of_a_matrix_matches_the_written_out_update() {
    // G = 2 I: momentum 0.05 G, Nesterov blend 0.05 G + 0.95 m = 0.195 I;
    // normalised I / sqrt(2); Newton-Schulz acts on the singular value.
    let (a, b, c) = (3.4445f64, -4.7750f64, 2.0315f64);
    let mut s = 0.195 / ((2.0 * 0.195f64 * 0.195).sqrt() + 1e-7);
    for _ in 0..5 {
        s = a * s + b * s.powi(3) + c * s.powi(5);
    }
    let init = [1.0f32, 0.5, -0.5, 2.0];
    for stage in 0..=3 {
        let got = one_step(
            &config(stage, Optimizer::Muon),
            ParamDesc::new("h.0.mlp.weight", &[2, 2]).init(&init),
            &[2.0, 0.0, 0.0, 2.0],
        );
        let want = [1.0 - 0.02 * s, 0.5, -0.5, 2.0 - 0.02 * s];
        for (g, w) in got.iter().zip(want) {
            assert!((*g as f64 - w).abs() < 1e-6, "stage {stage}: {got:?} vs {want:?}");
        }
    }
}

#[test]
fn use_muon_false_steps_as_adamw() {
    let init = [1.0f32, 0.5, -0.5, 2.0, 0.25, -1.0];
    let grad = [0.3f32, -0.1, 0.7, 0.0, -0.4, 0.2];
    for stage in 0..=3 {
        let muon = one_step(
            &config(stage, Optimizer::Muon),
            ParamDesc::new("w", &[2, 3]).init(&init).use_muon(false),
            &grad,
        );
        let adamw = one_step(
            &config(stage, Optimizer::AdamW),
            ParamDesc::new("w", &[2, 3]).init(&init),
            &grad,
        );
        assert_eq!(muon, adamw, "stage {stage}");
        let on_muon = one_step(
            &config(stage, Optimizer::Muon),
            ParamDesc::new("w", &[2, 3]).init(&init),
            &grad,
        );
        assert_ne!(on_muon, adamw, "stage {stage}: the default rule puts a matrix on Muon");
    }
}

#[test]
fn a_1d_param_marked_for_muon_is_refused_naming_it() {
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&config(2, Optimizer::Muon), &comm).unwrap();
    let err = engine
        .register_param(ParamDesc::new("fc.bias", &[3]).use_muon(true))
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("'fc.bias'"), "{}", err.message());
}
