//! zero::estimate_memory_params (C ABI 1.16) against what an engine of the
//! same config and params holds after a step: a GPT-like model whose
//! embedding and LM head DeepSpeed's rule keeps on AdamW under Muon, and a
//! frozen matrix; the shapes alone (`estimate_memory`) count the frozen one
//! as trainable. Refusals name the param.
use zero::{
    estimate_memory, estimate_memory_params, Communicator, Config, DType, Engine, ParamDesc,
    Status, Topology,
};

const SHAPES: [(&str, &[usize], bool); 7] = [
    ("model.embed_tokens.weight", &[50, 24], true),
    ("model.layers.0.fc.weight", &[48, 24], true),
    ("model.layers.0.fc.bias", &[48], true),
    ("model.layers.0.proj.weight", &[24, 48], false),
    ("model.layers.0.proj.bias", &[24], true),
    ("model.norm.weight", &[24], true),
    ("lm_head.weight", &[50, 24], true),
];

fn descs() -> Vec<ParamDesc<'static>> {
    SHAPES
        .iter()
        .map(|&(name, shape, trainable)| {
            ParamDesc::new(name, shape)
                .trainable(trainable)
                .dtype(DType::F32)
        })
        .collect()
}

fn config(optimizer: &str, stage: u32) -> Config {
    Config::from_json(&format!(
        r#"{{"steps_per_print": 0, "optimizer": {{"type": "{optimizer}", "params": {{"lr": 0.01}}}},
            "zero_optimization": {{"stage": {stage}}}}}"#
    ))
    .unwrap()
}

/// One rank's stats after one step with gradients of ones.
fn measured(cfg: &Config) -> zero::Stats {
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(cfg, &comm).unwrap();
    let ids: Vec<_> = descs()
        .into_iter()
        .map(|d| engine.register_param(d).unwrap())
        .collect();
    engine.finalize().unwrap();
    for (id, &(_, _, trainable)) in ids.iter().zip(SHAPES.iter()).rev() {
        if !trainable {
            continue;
        }
        let mut g = engine.grad_buffer(*id).unwrap();
        g.as_f32_mut().unwrap().fill(1.0);
        g.ready().unwrap();
    }
    assert!(engine.step().unwrap().boundary);
    engine.stats().unwrap()
}

fn near2(what: &str, est: i64, got: i64) {
    assert!(
        (est - got).abs() as f64 <= 0.02 * got as f64,
        "{what}: estimated {est}, measured {got}"
    );
}

#[test]
fn estimate_of_described_params_matches_an_engine() {
    let cpu = Topology {
        gpu: false,
        ..Default::default()
    };
    for optimizer in ["Muon", "AdamW"] {
        for stage in 0..=3 {
            let cfg = config(optimizer, stage);
            let est = estimate_memory_params(&cfg, &descs(), cpu).unwrap();
            let s = measured(&cfg);
            let what = format!("{optimizer} stage {stage}");
            assert_eq!(est.trainable_numel, s.trainable_numel, "{what}");
            assert_eq!(est.frozen_bytes, 24 * 48 * 4, "{what}");
            near2(&what, est.frozen_bytes, s.frozen_bytes);
            near2(&what, est.param_bytes, s.param_bytes);
            near2(&what, est.grad_bytes, s.grad_bytes);
            near2(&what, est.master_bytes, s.master_bytes);
            near2(&what, est.optimizer_bytes, s.optimizer_bytes);
            near2(
                &what,
                est.buffer_bytes,
                s.buffer_bytes - s.live_gathered_bytes,
            );
            // The shapes alone: every param trainable.
            let shapes: Vec<&[usize]> = SHAPES.iter().map(|s| s.1).collect();
            let counted = estimate_memory(&cfg, &shapes, cpu).unwrap();
            assert_eq!(counted.trainable_numel, est.trainable_numel + 24 * 48);
            assert_eq!(counted.frozen_bytes, 0);
            if optimizer == "Muon" {
                // Embedding and head orthogonalised as well: more buffers.
                assert!(counted.buffer_bytes > est.buffer_bytes, "{what}");
            }
        }
    }
}

#[test]
fn estimate_of_described_params_refuses_as_registration_does() {
    let cfg = config("Muon", 1);
    let topo = Topology::default();
    let err = estimate_memory_params(
        &cfg,
        &[ParamDesc::new("frozen", &[4]).trainable(false)],
        topo,
    )
    .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("'frozen' needs its dtype"), "{err}");
    let twice = [ParamDesc::new("w", &[4, 4]), ParamDesc::new("w", &[4])];
    let err = estimate_memory_params(&cfg, &twice, topo).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(
        err.message().contains("param 1") && err.message().contains("'w'"),
        "{err}"
    );
    let bias_on_muon = [ParamDesc::new("b", &[4]).use_muon(true)];
    let err = estimate_memory_params(&cfg, &bias_on_muon, topo).unwrap_err();
    assert!(err.message().contains("'b'"), "{err}");
    let built = Config::builder().stage(1).build();
    let err = estimate_memory_params(&built, &descs(), topo).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    let none = estimate_memory_params(&cfg, &[], topo).unwrap();
    assert_eq!(none.trainable_numel, 0);
}
