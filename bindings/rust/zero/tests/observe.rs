//! Observing a run from Rust: the step breakdown and the collective log
//! against the caller's clock and the engine's own traffic counters, and
//! the memory estimate against what an engine of the same config holds.
use std::time::{Duration, Instant};

use zero::{estimate_memory, Communicator, Config, DType, Engine, ParamDesc, Status, Topology};

const SHAPES: [[usize; 2]; 3] = [[64, 48], [48, 1], [32, 64]];

fn config(stage: u32, extra: &str) -> Config {
    Config::from_json(&format!(
        r#"{{"steps_per_print": 0, "optimizer": {{"type": "AdamW", "params": {{"lr": 0.01}}}},
            "zero_optimization": {{"stage": {stage}, "overlap_comm": true,
                                   "reduce_bucket_size": 1000}}{extra}}}"#
    ))
    .unwrap()
}

/// One engine per rank of a 2-thread group; `run` drives it and returns
/// what the test compares.
fn on_two_ranks<T: Send>(cfg: &Config, run: impl Fn(&mut Engine) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let handles: Vec<_> = Communicator::threads(2)
            .unwrap()
            .into_iter()
            .map(|comm| {
                let run = &run;
                s.spawn(move || {
                    let mut engine = Engine::new(cfg, &comm).unwrap();
                    for (i, shape) in SHAPES.iter().enumerate() {
                        let init: Vec<f32> = (0..shape[0] * shape[1])
                            .map(|k| (k % 7) as f32 * 0.1)
                            .collect();
                        engine
                            .register_param(ParamDesc::new(&format!("p{i}"), shape).init(&init))
                            .unwrap();
                    }
                    engine.finalize().unwrap();
                    run(&mut engine)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// One optimizer step with `compute` of the caller's own work between the
/// gradients; returns the caller's wall time of it in ms.
fn one_step(engine: &mut Engine, compute: Duration) -> f64 {
    let t0 = Instant::now();
    let n = engine.num_params().unwrap();
    for i in (0..n).rev() {
        let id = engine.find_param(&format!("p{i}")).unwrap();
        let mut g = engine.grad_buffer(id).unwrap();
        let value = |k: usize| ((k + i) % 5) as f32 * 0.01;
        if g.dtype() == DType::F32 {
            g.as_f32_mut()
                .unwrap()
                .iter_mut()
                .enumerate()
                .for_each(|(k, x)| *x = value(k));
        } else {
            // bf16: the high half of the fp32 bits.
            let h = g.as_u16_mut().unwrap();
            h.iter_mut()
                .enumerate()
                .for_each(|(k, x)| *x = (value(k).to_bits() >> 16) as u16);
        }
        g.ready().unwrap();
        std::thread::sleep(compute);
    }
    engine.step().unwrap();
    t0.elapsed().as_secs_f64() * 1e3
}

#[test]
fn breakdown_tiles_the_callers_step_and_comm_log_equals_the_traffic_counters() {
    let cfg = config(
        2,
        r#", "wall_clock_breakdown": true, "comms_logger": {"enabled": true}"#,
    );
    let out = on_two_ranks(&cfg, |engine| {
        one_step(engine, Duration::from_millis(2));
        let wall = one_step(engine, Duration::from_millis(2));
        (
            wall,
            engine.step_breakdown().unwrap(),
            engine.comm_log().unwrap(),
            engine.comm_log_summary().unwrap(),
            engine.stats().unwrap(),
        )
    });
    for (wall, b, log, summary, stats) in out {
        assert_eq!(b.global_step, 2);
        assert_eq!(b.micro_steps, 1);
        // The caller's phases tile the step; the step is what the caller's
        // clock saw (the breakdown starts at the first grad_buffer).
        let parts = b.forward_ms + b.backward_ms + b.optimizer_ms;
        assert!(
            (parts - b.step_ms).abs() <= 0.05 * b.step_ms + 0.05,
            "{b:?}"
        );
        assert!(
            b.step_ms <= wall + 0.05 && b.step_ms >= 0.95 * wall - 0.2,
            "{wall} vs {b:?}"
        );
        // The caller slept 2 ms after each of 3 grads: inside its backward.
        assert!(b.backward_ms >= 6.0, "{b:?}");
        assert!(
            b.reduce_ms > 0.0 && b.reduce_hidden_ms >= 0.0 && b.update_ms > 0.0,
            "{b:?}"
        );
        // Bytes per kind and the call count equal the engine's own counters.
        let sum = |op: i32| -> i64 {
            log.iter()
                .filter(|e| e.op == op && !e.control)
                .map(|e| e.sent_bytes)
                .sum()
        };
        assert_eq!(sum(0), stats.sent_bytes_allgather);
        assert_eq!(sum(1), stats.sent_bytes_reduce_scatter);
        assert_eq!(sum(2), stats.sent_bytes_allreduce);
        assert!(stats.sent_bytes_reduce_scatter > 0);
        assert_eq!(
            log.iter().map(|e| e.count).sum::<i64>(),
            stats.collective_calls
        );
        assert!(
            summary.contains("comms log") && summary.contains("reduce_scatter"),
            "{summary}"
        );
    }
    let plain = on_two_ranks(&config(1, ""), |engine| {
        (
            engine.step_breakdown().unwrap_err(),
            engine.comm_log_summary().unwrap_err(),
        )
    });
    for (b, c) in plain {
        assert_eq!(b.status(), Status::FailedPrecondition);
        assert!(c.message().contains("comms_logger"), "{c}");
    }
}

#[test]
fn estimate_equals_an_engines_stats_for_the_same_config() {
    for stage in 0..=3 {
        for extra in ["", r#", "bf16": {"enabled": true}"#] {
            let cfg = config(stage, extra);
            let topo = Topology {
                ranks_per_node: 2,
                nodes: 1,
                gpu: false,
            };
            let est = estimate_memory(&cfg, &SHAPES, topo).unwrap();
            let numel: usize = SHAPES.iter().map(|s| s[0] * s[1]).sum();
            assert_eq!(est.trainable_numel, numel as i64);
            let stats = on_two_ranks(&cfg, |engine| {
                one_step(engine, Duration::ZERO);
                engine.stats().unwrap()
            });
            for s in stats {
                let what = format!("stage {stage}{extra}");
                assert_eq!(est.grad_bytes, s.grad_bytes, "{what}");
                assert_eq!(est.master_bytes, s.master_bytes, "{what}");
                assert_eq!(est.optimizer_bytes, s.optimizer_bytes, "{what}");
                assert_eq!(est.param_bytes, s.param_bytes, "{what}");
                assert_eq!(est.buffer_bytes, s.buffer_bytes, "{what}");
            }
        }
    }
    // More ranks, less optimizer state per rank: 8 bytes per padded element
    // shared by 8 (the 2 moments; an fp32 model's master is the working
    // copy's owned range, counted in param_bytes).
    let big = estimate_memory(
        &config(2, ""),
        &[[4096usize, 4096]],
        Topology {
            ranks_per_node: 8,
            ..Default::default()
        },
    )
    .unwrap();
    // fp32: m and v; the master is the working copy's owned range.
    assert_eq!(big.master_bytes, 0);
    assert_eq!(
        big.master_bytes + big.optimizer_bytes,
        8 * big.padded_numel / 8
    );
    let built = Config::builder().stage(2).build();
    let err = estimate_memory(&built, &SHAPES, Topology::default()).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    let err = estimate_memory(&config(7, ""), &SHAPES, Topology::default()).unwrap_err();
    assert!(err.message().contains("stage"), "{err}");
}
