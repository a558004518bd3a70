//! The safe API drives a real engine: registration, gathers, gradients,
//! steps and stats, on one rank and on in-process thread groups.
use zero::{Communicator, Config, DType, Engine, Optimizer, ParamData, ParamDesc};

fn sgd(stage: u32, lr: f32) -> Config {
    Config::builder()
        .stage(stage)
        .optimizer(Optimizer::Sgd)
        .lr(lr)
        .steps_per_print(0)
        .build()
}

#[test]
fn gather_returns_the_initial_values() {
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&sgd(3, 0.1), &comm).unwrap();
    let init: Vec<f32> = (0..6).map(|i| i as f32 * 0.25).collect();
    let w = engine
        .register_param(ParamDesc::new("w", &[2, 3]).init(&init))
        .unwrap();
    let b = engine.register_param(ParamDesc::new("b", &[3])).unwrap();
    engine.finalize().unwrap();
    assert_eq!(engine.num_params().unwrap(), 2);
    assert_eq!(engine.find_param("b").unwrap(), b);
    assert_eq!(engine.param_numel(w).unwrap(), 6);
    let gw = engine.gather(w).unwrap();
    let gb = engine.gather(b).unwrap();
    assert_eq!(gw.as_f32().unwrap(), &init[..]);
    assert_eq!(gb.as_f32().unwrap(), &[0.0; 3]);
    assert!(matches!(gw.data(), ParamData::F32(_)));
    gb.release().unwrap();
}

#[test]
fn nested_gathers_of_one_param_both_read() {
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&sgd(3, 0.1), &comm).unwrap();
    let w = engine
        .register_param(ParamDesc::new("w", &[4]).init(&[1.0, 2.0, 3.0, 4.0]))
        .unwrap();
    engine.finalize().unwrap();
    let outer = engine.gather(w).unwrap();
    {
        let inner = engine.gather(w).unwrap();
        assert_eq!(inner.as_f32().unwrap()[3], 4.0);
    }
    assert_eq!(outer.as_f32().unwrap()[0], 1.0);
    drop(outer);
    assert_eq!(engine.stats().unwrap().live_gathered_bytes, 0);
}

#[test]
fn sgd_step_moves_params_against_the_gradient() {
    for stage in 0..=3 {
        let comm = Communicator::new_self().unwrap();
        let mut engine = Engine::new(&sgd(stage, 0.5), &comm).unwrap();
        let w = engine
            .register_param(ParamDesc::new("w", &[3]).init(&[1.0, 2.0, 3.0]))
            .unwrap();
        engine.finalize().unwrap();
        let mut grad = engine.grad_buffer(w).unwrap();
        assert_eq!(
            grad.as_f32_mut().unwrap(),
            &[0.0; 3],
            "grad buffers start zeroed"
        );
        grad.as_f32_mut()
            .unwrap()
            .copy_from_slice(&[2.0, -2.0, 0.0]);
        grad.ready().unwrap();
        let info = engine.step().unwrap();
        assert!(info.boundary && !info.skipped);
        assert_eq!(info.global_step, 1);
        assert_eq!(info.lr, 0.5);
        assert!((info.grad_norm - 8f64.sqrt()).abs() < 1e-6, "{info:?}");
        let g = engine.gather(w).unwrap();
        assert_eq!(g.as_f32().unwrap(), &[0.0, 3.0, 3.0], "stage {stage}");
        drop(g);
        if stage > 0 {
            assert_eq!(engine.master(w).unwrap(), vec![0.0, 3.0, 3.0]);
        }
    }
}

#[test]
fn stats_report_this_rank() {
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&sgd(2, 0.1), &comm).unwrap();
    let w = engine.register_param(ParamDesc::new("w", &[10])).unwrap();
    engine
        .register_param(ParamDesc::new("frozen", &[5]).trainable(false))
        .unwrap();
    engine.finalize().unwrap();
    engine.set_grad(w, &[1.0; 10]).unwrap();
    engine.report_samples(4).unwrap();
    engine.step().unwrap();
    let s = engine.stats().unwrap();
    assert_eq!((s.rank, s.world_size, s.stage), (0, 1, 2));
    assert_eq!(s.trainable_numel, 10);
    assert_eq!(s.frozen_bytes, 5 * 4);
    assert_eq!(s.global_step, 1);
    assert_eq!(engine.loss_scale().unwrap(), 1.0);
}

#[test]
fn half_precision_buffers_are_u16() {
    for dtype in [DType::F16, DType::BF16] {
        let comm = Communicator::new_self().unwrap();
        let config = Config::builder()
            .stage(2)
            .dtype(dtype)
            .steps_per_print(0)
            .build();
        let mut engine = Engine::new(&config, &comm).unwrap();
        assert_eq!(engine.dtype().unwrap(), dtype);
        // Without .dtype(), a param takes the engine's dtype.
        let w = engine
            .register_param(ParamDesc::new("w", &[4]).init(&[1.0; 4]))
            .unwrap();
        assert_eq!(engine.param_dtype(w).unwrap(), dtype);
        let frozen = engine
            .register_param(ParamDesc::new("f", &[2]).dtype(DType::F32).trainable(false))
            .unwrap();
        assert_eq!(engine.param_dtype(frozen).unwrap(), DType::F32);
        engine.finalize().unwrap();
        {
            let g = engine.gather(w).unwrap();
            assert!(g.as_f32().is_err());
            let one = if dtype == DType::F16 { 0x3c00 } else { 0x3f80 };
            assert_eq!(g.as_u16().unwrap(), &[one; 4], "{dtype:?}");
        }
        let mut grad = engine.grad_buffer(w).unwrap();
        assert!(grad.as_f32_mut().is_err());
        assert_eq!(grad.as_u16_mut().unwrap().len(), 4);
        grad.ready().unwrap();
        engine.step().unwrap();
        assert_eq!(engine.gather(frozen).unwrap().as_f32().unwrap(), &[0.0; 2]);
    }
}

#[test]
fn json_fp16_config_sets_the_engine_dtype() {
    let comm = Communicator::new_self().unwrap();
    let config =
        Config::from_json(r#"{"train_batch_size": 1, "fp16": {"enabled": true}}"#).unwrap();
    let engine = Engine::new(&config, &comm).unwrap();
    assert_eq!(engine.dtype().unwrap(), DType::F16);
    assert_eq!(engine.loss_scale().unwrap(), 65536.0);
}

/// The runtime's LR schedule: WarmupDecayLR from the config, as DeepSpeed's
/// closed form (linear warmup from 0.1 to 1.1 over 4 steps, then linear decay
/// to 0 at step 8); step t runs with the value at last_batch_iteration t - 1.
#[test]
fn lr_for_step_follows_the_configs_schedule() {
    let comm = Communicator::new_self().unwrap();
    let config = Config::from_json(
        r#"{"train_batch_size": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.5}},
            "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0.1,
            "warmup_max_lr": 1.1, "warmup_num_steps": 4, "total_num_steps": 8,
            "warmup_type": "linear"}}}"#,
    )
    .unwrap();
    let engine = Engine::new(&config, &comm).unwrap();
    let want = |it: i64| -> f64 {
        if it < 0 {
            return 0.1;
        }
        let gamma = if it < 4 { it as f64 / 4.0 } else { ((8 - it) as f64 / 4.0).max(0.0) };
        0.1 + 1.0 * gamma
    };
    for t in 0..12 {
        let lr = engine.lr_for_step(t).unwrap();
        assert!((lr - want(t - 1)).abs() < 1e-15, "step {t}: {lr} vs {}", want(t - 1));
    }
    let err = engine.lr_for_step(-1).unwrap_err();
    assert!(err.to_string().contains("negative"), "{err}");
}

/// Two thread ranks each hand in their own gradient; the engine averages, so
/// the result equals one rank handing in the mean.
#[test]
fn thread_ranks_at_stage_3_match_one_rank_with_the_mean_gradient() {
    let init: Vec<f32> = (0..7).map(|i| 0.1 * i as f32).collect();
    let grad_of = |rank: usize| -> Vec<f32> {
        (0..7)
            .map(|i| (i as f32 + 1.0) * (rank as f32 + 1.0))
            .collect()
    };
    let config = Config::builder()
        .stage(3)
        .lr(0.01)
        .steps_per_print(0)
        .build();

    let results: Vec<Vec<f32>> = std::thread::scope(|s| {
        let handles: Vec<_> = Communicator::threads(2)
            .unwrap()
            .into_iter()
            .map(|comm| {
                let (init, config) = (&init, &config);
                s.spawn(move || {
                    let mut engine = Engine::new(config, &comm).unwrap();
                    let w = engine
                        .register_param(ParamDesc::new("w", &[7]).init(init))
                        .unwrap();
                    engine.finalize().unwrap();
                    for _ in 0..3 {
                        engine.set_grad(w, &grad_of(comm.rank())).unwrap();
                        engine.step().unwrap();
                    }
                    assert_eq!(engine.stats().unwrap().world_size, 2);
                    engine.master(w).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results[0], results[1], "ranks disagree");

    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&config, &comm).unwrap();
    let w = engine
        .register_param(ParamDesc::new("w", &[7]).init(&init))
        .unwrap();
    engine.finalize().unwrap();
    let mean: Vec<f32> = grad_of(0)
        .iter()
        .zip(grad_of(1))
        .map(|(a, b)| (a + b) / 2.0)
        .collect();
    for _ in 0..3 {
        engine.set_grad(w, &mean).unwrap();
        engine.step().unwrap();
    }
    let single = engine.master(w).unwrap();
    for (a, b) in results[0].iter().zip(&single) {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1e-3),
            "{:?} vs {single:?}",
            results[0]
        );
    }
}

#[test]
fn communicator_allreduce_sums_over_thread_ranks() {
    let comms = Communicator::threads(3).unwrap();
    let sums: Vec<f32> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|c| {
                s.spawn(move || {
                    let mut v = [c.rank() as f32 + 1.0];
                    c.allreduce_sum(&mut v).unwrap();
                    c.barrier().unwrap();
                    v[0]
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(sums, vec![6.0; 3]);
}

#[test]
fn write_master_sets_master_and_working_copy_at_every_stage() {
    for stage in 0..=3 {
        let comm = Communicator::new_self().unwrap();
        let mut engine = Engine::new(&sgd(stage, 0.5), &comm).unwrap();
        let w = engine
            .register_param(ParamDesc::new("w", &[3]).init(&[1.0, 2.0, 3.0]))
            .unwrap();
        engine.finalize().unwrap();
        engine.write_master(w, &[4.0, 5.0, 6.0]).unwrap();
        let mut m = [0.0f32; 3];
        engine.read_master(w, &mut m).unwrap();
        assert_eq!(m, [4.0, 5.0, 6.0], "stage {stage}");
        {
            let g = engine.gather(w).unwrap();
            assert_eq!(g.as_f32().unwrap(), &[4.0, 5.0, 6.0], "stage {stage}");
        }
        let err = engine.write_master(w, &[1.0]).unwrap_err();
        assert_eq!(err.status(), zero::Status::InvalidArgument);
    }
}

#[test]
fn write_master_range_sets_only_that_range() {
    for stage in [0, 3] {
        let comm = Communicator::new_self().unwrap();
        let mut engine = Engine::new(&sgd(stage, 0.5), &comm).unwrap();
        let w = engine
            .register_param(ParamDesc::new("w", &[4]).init(&[1.0, 2.0, 3.0, 4.0]))
            .unwrap();
        engine.finalize().unwrap();
        engine.write_master_range(w, 1, &[-5.0, -6.0]).unwrap();
        let mut m = [0.0f32; 4];
        engine.read_master(w, &mut m).unwrap();
        assert_eq!(m, [1.0, -5.0, -6.0, 4.0], "stage {stage}");
        {
            let g = engine.gather(w).unwrap();
            assert_eq!(g.as_f32().unwrap(), &[1.0, -5.0, -6.0, 4.0], "stage {stage}");
        }
        let err = engine.write_master_range(w, 3, &[0.0, 0.0]).unwrap_err();
        assert_eq!(err.status(), zero::Status::InvalidArgument);
        assert!(err.to_string().contains("'w'"), "{err}");
    }
}

#[test]
fn broadcast_and_abort_over_thread_ranks() {
    let comms = Communicator::threads(3).unwrap();
    let got: Vec<(Vec<u8>, String)> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|c| {
                s.spawn(move || {
                    let mut v = vec![c.rank() as u8; 4];
                    c.broadcast(&mut v, 1).unwrap();
                    c.barrier().unwrap();
                    if c.rank() == 2 {
                        c.abort("test gave up");
                        return (v, String::new());
                    }
                    let e = c.barrier().unwrap_err();
                    (v, e.message().to_string())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (r, (v, msg)) in got.iter().enumerate() {
        assert_eq!(v, &vec![1u8; 4]);
        if r != 2 {
            assert!(msg.contains("rank 2 failed: test gave up"), "{msg}");
        }
    }
}

#[test]
fn init_spec_registers_described_values() {
    use zero::InitSpec;
    let read = |stage: u32| {
        let comm = Communicator::new_self().unwrap();
        let mut engine = Engine::new(&sgd(stage, 0.1), &comm).unwrap();
        let w = engine
            .register_param(ParamDesc::new("w", &[16, 4]).init_spec(InitSpec::linear_weight(7)))
            .unwrap();
        let b = engine
            .register_param(ParamDesc::new("b", &[16]).init_spec(InitSpec::linear_bias(4, 7)))
            .unwrap();
        let c = engine
            .register_param(ParamDesc::new("c", &[3]).init_spec(InitSpec::Constant(0.25)))
            .unwrap();
        engine.finalize().unwrap();
        let mut out = Vec::new();
        for id in [w, b, c] {
            let mut v = vec![0f32; engine.param_numel(id).unwrap()];
            engine.read_master(id, &mut v).unwrap();
            out.push(v);
        }
        out
    };
    let at0 = read(0);
    assert_eq!(at0, read(3));
    assert!(at0[0].iter().all(|x| x.abs() <= 0.5) && at0[0][0] != at0[0][1]);
    assert!(at0[1].iter().all(|x| x.abs() <= 0.5));
    assert_eq!(at0[2], vec![0.25f32; 3]);
    // A 1-D param needs fan_in for kaiming.
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&sgd(0, 0.1), &comm).unwrap();
    assert!(engine
        .register_param(ParamDesc::new("x", &[4]).init_spec(InitSpec::linear_weight(0)))
        .is_err());
}

/// An engine of one n x n param (0.5), two optimizer steps taken.
fn one_param_two_steps<'c>(cfg: &Config, comm: &'c Communicator, n: usize) -> Engine<'c> {
    let mut engine = Engine::new(cfg, comm).unwrap();
    let w = engine
        .register_param(ParamDesc::new("w", &[n, n]).init(&vec![0.5; n * n]))
        .unwrap();
    engine.finalize().unwrap();
    for _ in 0..2 {
        let mut grad = engine.grad_buffer(w).unwrap();
        grad.as_f32_mut().unwrap()[0] = 1.0;
        grad.ready().unwrap();
        engine.step().unwrap();
    }
    engine
}

/// wall_clock_breakdown and comms_logger through the C ABI (1.5).
#[test]
fn step_breakdown_and_comm_log() {
    let comm = Communicator::new_self().unwrap();
    let cfg = Config::from_json(
        r#"{"steps_per_print": 0, "wall_clock_breakdown": true, "comms_logger": {"enabled": true}}"#,
    )
    .unwrap();
    let engine = one_param_two_steps(&cfg, &comm, 4);
    let b = engine.step_breakdown().unwrap();
    assert_eq!(b.global_step, 2);
    assert!(b.step_ms > 0.0 && b.update_ms > 0.0);
    let log = engine.comm_log().unwrap();
    assert!(log.iter().all(|x| x.count > 0));
    assert_eq!((b.nvme_read_ms, b.nvme_write_ms, b.nvme_hidden_ms), (0.0, 0.0, 0.0));
    let plain = Engine::new(&sgd(1, 0.1), &comm).unwrap();
    assert!(plain.step_breakdown().is_err());
}

/// NVMe time in the breakdown (1.6): optimizer state on NVMe.
#[test]
fn step_breakdown_nvme_time() {
    let comm = Communicator::new_self().unwrap();
    let dir = std::env::temp_dir().join(format!("zero_rs_nvme_bd_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = Config::from_json(&format!(
        r#"{{"steps_per_print": 0, "wall_clock_breakdown": true, "zero_optimization":
            {{"stage": 1, "offload_optimizer": {{"device": "nvme", "nvme_path": "{}"}}}}}}"#,
        dir.display()
    ))
    .unwrap();
    let engine = one_param_two_steps(&cfg, &comm, 64);
    let b = engine.step_breakdown().unwrap();
    assert!(b.nvme_read_bytes >= 4096 * 12 && b.nvme_write_bytes >= 4096 * 12);
    assert!(b.nvme_read_ms > 0.0 && b.nvme_write_ms > 0.0);
    assert!(b.nvme_exposed_ms + b.nvme_hidden_ms <= b.optimizer_ms * 1.05 + 0.01);
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}

/// gather_into (C ABI 1.7) on two thread ranks at stage 3, bf16: the bits
/// gather hands out, in the caller's buffer, before and after a step; the
/// refusals name the param or say why.
#[test]
fn gather_into_writes_the_bits_gather_hands_out() {
    use zero::{ParamDataMut, Status};
    let config = Config::from_json(
        r#"{"steps_per_print": 0, "bf16": {"enabled": true},
            "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 10}}"#,
    )
    .unwrap();
    let init: Vec<f32> = (0..37 * 11).map(|i| ((i * 7) % 23) as f32 / 8.0 - 1.4).collect();
    std::thread::scope(|s| {
        for comm in Communicator::threads(2).unwrap() {
            let (init, config) = (&init, &config);
            s.spawn(move || {
                let mut engine = Engine::new(config, &comm).unwrap();
                let w = engine
                    .register_param(ParamDesc::new("w", &[37, 11]).init(init))
                    .unwrap();
                engine.finalize().unwrap();
                for step in 0..2 {
                    let want = engine.gather(w).unwrap().as_u16().unwrap().to_vec();
                    let mut out = vec![0u16; 37 * 11];
                    {
                        let g = engine.gather_into(w, ParamDataMut::BF16(&mut out)).unwrap();
                        match g.data() {
                            ParamData::BF16(v) => assert_eq!(v, &want[..], "step {step}"),
                            other => panic!("{other:?}"),
                        }
                        // Held in `out`: no plain gather, no second buffer.
                        let e = engine.gather(w).unwrap_err();
                        assert_eq!(e.status(), Status::FailedPrecondition);
                        assert!(e.message().contains("gather 'w'"), "{}", e.message());
                        let mut other = vec![0u16; 37 * 11];
                        let e = engine.gather_into(w, ParamDataMut::BF16(&mut other)).unwrap_err();
                        assert_eq!(e.status(), Status::FailedPrecondition);
                        g.release().unwrap();
                    }
                    assert_eq!(out, want);
                    assert_eq!(engine.stats().unwrap().live_gathered_bytes, 0);
                    // fp16 bits are u16 too: the dtype is checked, not only the size.
                    let e = engine.gather_into(w, ParamDataMut::F16(&mut out)).unwrap_err();
                    assert_eq!(e.status(), Status::InvalidArgument);
                    assert!(e.message().contains("gather_into 'w'"), "{}", e.message());
                    let e = engine.gather_into(w, ParamDataMut::BF16(&mut out[1..])).unwrap_err();
                    assert!(e.message().contains("812 bytes given"), "{}", e.message());
                    // Small integers: bf16 is exactly fp32's top half.
                    let mut grad = engine.grad_buffer(w).unwrap();
                    for (i, g) in grad.as_u16_mut().unwrap().iter_mut().enumerate() {
                        *g = (((i % 5) as f32 - 2.0).to_bits() >> 16) as u16;
                    }
                    grad.ready().unwrap();
                    engine.step().unwrap();
                }
            });
        }
    });
    // Stages 0-2 (C ABI 1.8): a copy of the resident working copy.
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&sgd(1, 0.1), &comm).unwrap();
    let w = engine.register_param(ParamDesc::new("w", &[3]).init(&[1.0, 2.0, 3.0])).unwrap();
    engine.finalize().unwrap();
    let mut out = [0f32; 3];
    engine.gather_into(w, ParamDataMut::F32(&mut out)).unwrap().release().unwrap();
    assert_eq!(out, [1.0, 2.0, 3.0]);
}

#[test]
fn ranks_that_gather_different_params_fail_alike_and_the_flight_record_says_where() {
    let config = Config::builder()
        .stage(3)
        .lr(0.01)
        .steps_per_print(0)
        .stage3_param_persistence_threshold(0)
        .build();
    let records: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = Communicator::threads(2)
            .unwrap()
            .into_iter()
            .map(|comm| {
                let config = &config;
                s.spawn(move || {
                    let mut engine = Engine::new(config, &comm).unwrap();
                    // No persistent params: every gather is collective.
                    let ids: Vec<_> = ["experts.0", "experts.1"]
                        .iter()
                        .map(|n| engine.register_param(ParamDesc::new(n, &[64])).unwrap())
                        .collect();
                    engine.finalize().unwrap();
                    let err = engine.gather(ids[comm.rank()]).err().expect("a divergence");
                    assert_eq!(err.status(), zero::Status::Mismatch, "{err}");
                    let text = err.to_string();
                    assert!(text.contains("experts.0") && text.contains("experts.1"), "{text}");
                    engine.flight_record().unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (r, rec) in records.iter().enumerate() {
        let last = rec.lines().last().expect("records");
        assert!(last.contains("\"outcome\":\"diverged\""), "{last}");
        assert!(last.contains(&format!("\"param\":\"experts.{r}\"")), "{last}");
    }
}
