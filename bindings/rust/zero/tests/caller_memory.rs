//! The crate as a framework author meets it (C ABI 1.8): a leaked stage-3
//! gather guard never trains on stale weights, a ParamId works on its own
//! engine only, params iterate, global_step, a dropped GradBuffer fails the
//! next step as its docs say, fp32 gradients into a bf16/fp16 model equal the
//! caller's rounding bit for bit, and the conversions round as the runtime.
mod common;

use zero::{convert, Communicator, Config, DType, Engine, ParamDataMut, ParamDesc, Status};

fn config(stage: u32, precision: &str) -> Config {
    let p = match precision {
        "bf16" => r#""bf16": {"enabled": true},"#,
        "fp16" => r#""fp16": {"enabled": true, "loss_scale": 1.0},"#,
        _ => "",
    };
    Config::from_json(&format!(
        r#"{{"steps_per_print": 0, {p} "optimizer": {{"type": "AdamW", "params": {{"lr": 0.05}}}},
            "zero_optimization": {{"stage": {stage}, "stage3_param_persistence_threshold": 100}}}}"#
    ))
    .unwrap()
}

fn init() -> Vec<f32> {
    (0..1200).map(|i| ((i * 37) % 101) as f32 / 64.0 - 0.8).collect()
}

fn grad(rank: usize, t: usize) -> Vec<f32> {
    (0..1200)
        .map(|i| ((i * 13 + t * 7 + rank * 3) % 17) as f32 / 32.0 - 0.25 + 1e-3 * (i as f32).sin())
        .collect()
}

/// std::mem::forget of a stage-3 guard (safe Rust) leaves the param gathered:
/// the boundary step fails naming it, before anything moves (the values
/// never go stale). Stages 0-2's gather is the resident copy, updated in
/// place, so a leaked one is harmless there; a leaked gather_into copy is not.
#[test]
fn forgotten_stage3_guard_fails_the_step_naming_the_param() {
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&config(3, ""), &comm).unwrap();
    let w = engine.register_param(ParamDesc::new("w", &[40, 30]).init(&init())).unwrap();
    engine.finalize().unwrap();
    std::mem::forget(engine.gather(w).unwrap());
    engine.set_grad(w, &grad(0, 0)).unwrap();
    let e = engine.step().unwrap_err();
    assert_eq!(e.status(), Status::FailedPrecondition);
    assert!(e.message().contains("'w' (1)"), "{}", e.message());
    assert_eq!(engine.global_step().unwrap(), 0);
    // Stages 0-2: the resident copy, updated in place: a leaked guard is harmless.
    for stage in 0..3 {
        let mut engine = Engine::new(&config(stage, ""), &comm).unwrap();
        let w = engine.register_param(ParamDesc::new("w", &[40, 30]).init(&init())).unwrap();
        engine.finalize().unwrap();
        std::mem::forget(engine.gather(w).unwrap());
        engine.set_grad(w, &grad(0, 0)).unwrap();
        engine.step().unwrap();
        assert_eq!(engine.global_step().unwrap(), 1);
        // A leaked gather_into copy is not: refused at every stage.
        let mut out = vec![0f32; 1200];
        std::mem::forget(engine.gather_into(w, ParamDataMut::F32(&mut out)).unwrap());
        engine.set_grad(w, &grad(0, 1)).unwrap();
        let e = engine.step().unwrap_err();
        assert!(e.message().contains("gather_into is a copy"), "{}", e.message());
    }
}

#[test]
fn param_id_of_another_engine_is_refused() {
    let comm = Communicator::new_self().unwrap();
    let mut a = Engine::new(&config(1, ""), &comm).unwrap();
    let mut b = Engine::new(&config(1, ""), &comm).unwrap();
    let wa = a.register_param(ParamDesc::new("wa", &[4]).init(&[1.0; 4])).unwrap();
    let wb = b.register_param(ParamDesc::new("wb", &[4]).init(&[2.0; 4])).unwrap();
    a.finalize().unwrap();
    b.finalize().unwrap();
    assert_eq!(wa.index(), wb.index());
    let e = b.gather(wa).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("belongs to another engine"), "{}", e.message());
    assert!(b.param_numel(wa).is_err());
    assert!(b.set_grad(wa, &[0.0; 4]).is_err());
    assert!(b.param_info(wa).is_err());
    assert_eq!(b.gather(wb).unwrap().as_f32().unwrap(), &[2.0; 4]);
}

#[test]
fn params_iterate_in_registration_order() {
    let comm = Communicator::new_self().unwrap();
    let mut e = Engine::new(&config(2, ""), &comm).unwrap();
    let names = ["a", "b", "c"];
    let ids: Vec<_> = names.iter().map(|n| e.register_param(ParamDesc::new(n, &[2])).unwrap()).collect();
    e.finalize().unwrap();
    assert_eq!(e.params().collect::<Vec<_>>(), ids);
    for (id, name) in e.params().zip(names) {
        assert_eq!(e.param_info(id).unwrap().name, name);
    }
    assert_eq!(e.param_id(1).unwrap(), ids[1]);
    assert_eq!(e.param_id(3).unwrap_err().status(), Status::InvalidArgument);
}

#[test]
fn dropped_grad_buffer_fails_the_next_step_as_documented() {
    let comm = Communicator::new_self().unwrap();
    let mut e = Engine::new(&config(1, ""), &comm).unwrap();
    let w = e.register_param(ParamDesc::new("w", &[4])).unwrap();
    e.finalize().unwrap();
    e.grad_buffer(w).unwrap().as_f32_mut().unwrap()[0] = 1.0;
    let err = e.step().unwrap_err();
    assert_eq!(err.status(), Status::FailedPrecondition);
    assert!(err.message().contains("without grad_ready"), "{}", err.message());
    // Asked again: the same buffer, with what was written.
    let mut g = e.grad_buffer(w).unwrap();
    assert_eq!(g.as_f32_mut().unwrap()[0], 1.0);
    g.ready().unwrap();
    e.step().unwrap();
    assert_eq!(e.global_step().unwrap(), 1);
}

/// Engine A takes fp32 gradients (rounded inside); engine B the caller's
/// rounding written into grad_buffer: bit for bit, stages 0-3, 2 thread
/// ranks, bf16 and fp16.
#[test]
fn fp32_gradient_equals_caller_rounding_then_grad_buffer() {
    for precision in ["bf16", "fp16"] {
        for stage in 0..=3 {
            common::side_by_side(2, &config(stage, precision), |rank, a, b| {
                let dtype = a.dtype().unwrap();
                let wa = a.register_param(ParamDesc::new("w", &[40, 30]).dtype(dtype).init(&init())).unwrap();
                let wb = b.register_param(ParamDesc::new("w", &[40, 30]).dtype(dtype).init(&init())).unwrap();
                a.finalize().unwrap();
                b.finalize().unwrap();
                for t in 0..3 {
                    let g = grad(rank, t);
                    a.set_grad(wa, &g).unwrap();
                    let mut buf = b.grad_buffer(wb).unwrap();
                    buf.as_u16_mut().unwrap().copy_from_slice(&convert::from_f32(dtype, &g).unwrap());
                    buf.ready().unwrap();
                    a.step().unwrap();
                    b.step().unwrap();
                    let va = a.gather(wa).unwrap().as_u16().unwrap().to_vec();
                    let vb = b.gather(wb).unwrap().as_u16().unwrap().to_vec();
                    assert_eq!(va, vb, "{precision} stage {stage} step {t}");
                }
                assert_eq!(a.master(wa).unwrap(), b.master(wb).unwrap());
                // 16-bit gradients in the other half dtype are converted too.
                let other = if dtype == DType::BF16 { DType::F16 } else { DType::BF16 };
                a.set_grad_u16(wa, other, &convert::from_f32(other, &grad(rank, 9)).unwrap()).unwrap();
                a.step().unwrap();
            });
        }
    }
}

#[test]
fn conversions_round_to_nearest_even_as_the_runtime() {
    let x = [1.0f32, 1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, -0.0, f32::INFINITY, 65520.0, 5.9604645e-8];
    let bf = convert::f32_to_bf16(&x);
    assert_eq!(&bf[..3], &[0x3F80, 0x3F80, 0x3F82]); // ties to even, down and up
    assert_eq!(bf[3], 0x8000);
    let h = convert::f32_to_f16(&x);
    assert_eq!(h[5], 0x7C00); // 65520 rounds to infinity
    assert_eq!(h[6], 0x0001); // 2^-24: the smallest subnormal
    assert_eq!(convert::f16_to_f32(&h)[..3], [1.0, 1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0]);
    assert_eq!(convert::bf16_to_f32(&bf)[2], 1.0 + 2.0 / 128.0);
    assert!(convert::from_f32(DType::F32, &x).is_err());
}
