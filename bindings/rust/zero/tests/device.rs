//! The engine on a device from Rust, through the CPU stand-in for a GPU:
//! `ZERO_GPU_STANDIN=1` makes `set_device("cuda", 0)` the stand-in (device
//! memory the host cannot touch, work queued on a worker), so this runs the
//! crate's real GPU path: `Engine::set_device`, `DeviceSlice`/`DeviceSliceMut`
//! through `zero_engine_copy`. Training on it equals the CPU device bit for
//! bit (params and every step's norm).
use zero::{Communicator, Config, DType, DeviceKind, Engine, ParamDesc, ParamId, Status};

fn standin() {
    // Every test of this binary wants the switch on; set once, before any
    // engine of any test thread reads the environment.
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::env::set_var("ZERO_GPU_STANDIN", "1"));
}

fn config(stage: u32, bf16: bool) -> Config {
    let mut json = format!(
        r#"{{"zero_optimization": {{"stage": {stage}, "reduce_bucket_size": 16,
             "stage3_param_persistence_threshold": 0}},
            "optimizer": {{"type": "AdamW", "params": {{"lr": 0.01, "weight_decay": 0.01}}}},
            "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
            "steps_per_print": 0"#
    );
    if bf16 {
        json.push_str(r#", "bf16": {"enabled": true}"#);
    }
    json.push('}');
    Config::from_json(&json).unwrap()
}

const SHAPES: [(&str, usize); 3] = [("w1", 12), ("b1", 5), ("w2", 10)];

fn bf16_bits(x: f32) -> u16 {
    (x.to_bits() >> 16) as u16 // truncation: the same on both devices
}

fn widen(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// Registers SHAPES, trains 4 micro-steps with gradients computed on the
/// host from the gathered values (read back through DeviceSlice), returns
/// the masters and the norms.
fn train(
    comm: &Communicator,
    stage: u32,
    bf16: bool,
    device: Option<&str>,
) -> (Vec<Vec<f32>>, Vec<f64>) {
    let mut engine = Engine::new(&config(stage, bf16), comm).unwrap();
    if let Some(d) = device {
        engine.set_device(d, 0).unwrap();
    }
    // A device engine: set here, or the NCCL communicator's.
    let on_device = !engine.device().unwrap().host_accessible;
    let ids: Vec<ParamId> = SHAPES
        .iter()
        .map(|(name, n)| {
            let init: Vec<f32> = (0..*n)
                .map(|i| ((i * 7 + name.len()) % 11) as f32 * 0.05 - 0.25)
                .collect();
            engine
                .register_param(ParamDesc::new(name, &[*n]).init(&init))
                .unwrap()
        })
        .collect();
    engine.finalize().unwrap();
    let rank = comm.rank() as f32;
    let mut norms = Vec::new();
    for step in 0..4 {
        let mut values = Vec::new();
        for &id in &ids {
            let g = engine.gather(id).unwrap();
            assert_eq!(g.is_device(), on_device);
            let v: Vec<f32> = if bf16 {
                g.device_u16()
                    .unwrap()
                    .to_vec()
                    .unwrap()
                    .into_iter()
                    .map(widen)
                    .collect()
            } else {
                g.device_f32().unwrap().to_vec().unwrap()
            };
            values.push(v);
        }
        for (k, &id) in ids.iter().enumerate().rev() {
            let grad: Vec<f32> = values[k]
                .iter()
                .enumerate()
                .map(|(i, w)| w * 0.5 + (i as f32 + rank + step as f32) * 0.01)
                .collect();
            let mut buf = engine.grad_buffer(id).unwrap();
            if bf16 {
                let bits: Vec<u16> = grad.iter().map(|x| bf16_bits(*x)).collect();
                buf.device_u16_mut().unwrap().copy_from_host(&bits).unwrap();
            } else if on_device {
                assert_eq!(
                    buf.as_f32_mut().unwrap_err().status(),
                    Status::FailedPrecondition
                );
                buf.device_f32_mut().unwrap().copy_from_host(&grad).unwrap();
            } else {
                buf.as_f32_mut().unwrap().copy_from_slice(&grad);
            }
            buf.ready().unwrap();
        }
        let info = engine.step().unwrap();
        if info.boundary {
            norms.push(info.grad_norm);
        }
    }
    (
        ids.iter().map(|&id| engine.master(id).unwrap()).collect(),
        norms,
    )
}

fn world(n: usize, stage: u32, bf16: bool, device: Option<&str>) -> Vec<(Vec<Vec<f32>>, Vec<f64>)> {
    std::thread::scope(|s| {
        let hs: Vec<_> = Communicator::threads(n)
            .unwrap()
            .into_iter()
            .map(|c| s.spawn(move || train(&c, stage, bf16, device)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn training_on_the_device_equals_the_cpu_bit_for_bit() {
    standin();
    for n in [1, 3] {
        for stage in 0..4 {
            for bf16 in [false, true] {
                let dev = world(n, stage, bf16, Some("cuda"));
                let cpu = world(n, stage, bf16, None);
                assert_eq!(dev, cpu, "world {n} stage {stage} bf16 {bf16}");
                assert_eq!(cpu[0].1.len(), 2);
            }
        }
    }
}

#[test]
fn device_buffers_are_not_host_slices() {
    standin();
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&config(1, false), &comm).unwrap();
    assert_eq!(engine.device().unwrap().kind, DeviceKind::Cpu);
    assert!(engine.device().unwrap().host_accessible);
    engine.set_device("cuda", 0).unwrap();
    let d = engine.device().unwrap();
    assert_eq!(d.kind, DeviceKind::Standin);
    assert!(!d.host_accessible);
    assert_eq!(d.dlpack_device_type, 12);
    let init = [1.0f32, 2.0, 3.0, 4.0];
    let w = engine
        .register_param(ParamDesc::new("w", &[4]).init(&init))
        .unwrap();
    engine.finalize().unwrap();
    assert_eq!(engine.param_dtype(w).unwrap(), DType::F32);
    // The device's memory: the bytes the engine's stats account for.
    let m = engine.device().unwrap();
    let s = engine.stats().unwrap();
    let held = s.master_bytes
        + s.optimizer_bytes
        + s.grad_bytes
        + s.param_bytes
        + s.frozen_bytes
        + s.buffer_bytes;
    assert_eq!(m.device_bytes, held);
    assert!(m.device_peak_bytes >= m.device_bytes && m.pinned_host_bytes == 0);
    {
        let g = engine.gather(w).unwrap();
        assert!(g.is_device());
        let e = g.as_f32().unwrap_err();
        assert_eq!(e.status(), Status::FailedPrecondition);
        assert!(e.message().contains("device memory"), "{}", e.message());
        let s = g.device_f32().unwrap();
        assert_eq!(s.len(), 4);
        assert!(!s.as_ptr().is_null());
        assert_eq!(s.to_vec().unwrap(), init);
        let mut short = [0.0f32; 3];
        assert_eq!(
            s.copy_to_host(&mut short).unwrap_err().status(),
            Status::InvalidArgument
        );
        assert!(g.device_u16().is_err()); // an fp32 param
    }
    // set_grad goes through the device slice; the boundary step (2 micro-
    // steps accumulate) then moves the param against the gradient.
    for _ in 0..2 {
        engine.set_grad(w, &[1.0; 4]).unwrap();
        engine.step().unwrap();
    }
    let after = engine.master(w).unwrap();
    assert!(after.iter().zip(init).all(|(a, b)| a < &b));
}

#[test]
fn a_device_slice_read_as_host_memory_panics_through_data() {
    standin();
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&config(0, false), &comm).unwrap();
    engine.set_device("cuda", 0).unwrap();
    let w = engine
        .register_param(ParamDesc::new("w", &[2]).init(&[1.0, 2.0]))
        .unwrap();
    engine.finalize().unwrap();
    let g = engine.gather(w).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = g.data();
    }));
    let msg = r.unwrap_err();
    let msg = msg.downcast_ref::<String>().unwrap();
    assert!(msg.contains("device memory"), "{msg}");
}

#[test]
fn set_device_after_register_is_refused_and_bad_kinds_named() {
    standin();
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&config(0, false), &comm).unwrap();
    let e = engine.set_device("tpu", 0).unwrap_err();
    assert!(e.message().contains("tpu"), "{}", e.message());
    engine.register_param(ParamDesc::new("w", &[2])).unwrap();
    assert!(engine.set_device("cuda", 0).is_err());
}

#[test]
fn nccl_communicator_is_the_standin_under_the_switch() {
    standin();
    // One rank (an MPI singleton): Communicator::nccl is the NCCL-shaped
    // stand-in over MPI, its engines on the stand-in device, training like
    // the CPU device bit for bit.
    let comm = Communicator::nccl(0).unwrap();
    assert_eq!(comm.size(), 1);
    let engine = Engine::new(&config(3, true), &comm).unwrap();
    assert_eq!(engine.device().unwrap().kind, DeviceKind::Standin);
    drop(engine);
    for stage in [1, 3] {
        let dev = train(&comm, stage, true, None);
        let cpu = world(1, stage, true, None);
        assert_eq!(dev, cpu[0], "stage {stage}");
    }
}
