//! Checkpoints through the safe API: a run saved and resumed midway ends
//! bitwise equal to the uninterrupted one; export matches the master weights;
//! corruption and missing tags are the documented statuses. Also the
//! introspection calls: param_info and gradient_accumulation_steps.
use std::path::{Path, PathBuf};

use zero::{
    Communicator, Config, DType, Engine, LoadOptions, ParamDesc, ParamId, SaveOptions, Status,
};

const STEPS: usize = 6;
const SAVE_AT: usize = 3;

fn adamw(stage: u32) -> Config {
    Config::builder()
        .stage(stage)
        .lr(0.05)
        .weight_decay(0.01)
        .steps_per_print(0)
        .build()
}

/// A fresh directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("zero_rs_ckpt_{}_{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Registers w (3x5), b (5) and a frozen param; returns the trainable ids.
fn setup(engine: &mut Engine<'_>) -> [ParamId; 2] {
    let w_init: Vec<f32> = (0..15).map(|i| (i as f32 - 7.0) * 0.1).collect();
    let w = engine
        .register_param(ParamDesc::new("w", &[3, 5]).init(&w_init))
        .unwrap();
    let b = engine
        .register_param(ParamDesc::new("b", &[5]).init(&[0.5; 5]))
        .unwrap();
    engine
        .register_param(
            ParamDesc::new("frozen", &[2])
                .init(&[1.0, 2.0])
                .trainable(false),
        )
        .unwrap();
    engine.finalize().unwrap();
    [w, b]
}

/// A different gradient for every step and param.
fn train(engine: &mut Engine<'_>, ids: [ParamId; 2], steps: std::ops::Range<usize>) {
    for step in steps {
        for id in ids {
            let n = engine.param_numel(id).unwrap();
            let g: Vec<f32> = (0..n)
                .map(|i| ((step * 31 + i * 7 + id.index() * 3) % 11) as f32 - 5.0)
                .collect();
            engine.set_grad(id, &g).unwrap();
        }
        engine.step().unwrap();
    }
}

fn masters(engine: &mut Engine<'_>, ids: [ParamId; 2]) -> Vec<Vec<f32>> {
    ids.iter().map(|&id| engine.master(id).unwrap()).collect()
}

#[test]
fn resumed_run_ends_bitwise_equal_to_the_uninterrupted_run() {
    for stage in 0..=3 {
        let dir = TempDir::new(&format!("resume{stage}"));
        let comm = Communicator::new_self().unwrap();
        let want = {
            let mut e = Engine::new(&adamw(stage), &comm).unwrap();
            let ids = setup(&mut e);
            train(&mut e, ids, 0..STEPS);
            masters(&mut e, ids)
        };
        {
            let mut e = Engine::new(&adamw(stage), &comm).unwrap();
            let ids = setup(&mut e);
            train(&mut e, ids, 0..SAVE_AT);
            e.save(dir.path(), "mid").unwrap();
        }
        assert_eq!(
            std::fs::read_to_string(dir.path().join("latest"))
                .unwrap()
                .trim(),
            "mid"
        );
        let mut e = Engine::new(&adamw(stage), &comm).unwrap();
        let ids = setup(&mut e);
        e.load(dir.path(), None, LoadOptions::new()).unwrap();
        assert_eq!(e.stats().unwrap().global_step, SAVE_AT as i64);
        train(&mut e, ids, SAVE_AT..STEPS);
        assert_eq!(masters(&mut e, ids), want, "stage {stage}");
    }
}

#[test]
fn async_save_with_keep_last_resumes_bitwise() {
    let dir = TempDir::new("async");
    let comm = Communicator::new_self().unwrap();
    let want = {
        let mut e = Engine::new(&adamw(3), &comm).unwrap();
        let ids = setup(&mut e);
        train(&mut e, ids, 0..STEPS);
        masters(&mut e, ids)
    };
    {
        let mut e = Engine::new(&adamw(3), &comm).unwrap();
        let ids = setup(&mut e);
        let options = SaveOptions::new().asynchronous(true).keep_last(1);
        train(&mut e, ids, 0..1);
        e.save_with(dir.path(), "first", options).unwrap();
        train(&mut e, ids, 1..SAVE_AT); // goes on while the write runs
        e.save_with(dir.path(), "mid", options).unwrap();
        e.wait_checkpoint().unwrap();
    }
    assert!(!dir.path().join("first").exists(), "keep_last 1 left the older tag");
    let mut e = Engine::new(&adamw(3), &comm).unwrap();
    let ids = setup(&mut e);
    e.load(dir.path(), None, LoadOptions::new()).unwrap();
    assert_eq!(e.stats().unwrap().global_step, SAVE_AT as i64);
    train(&mut e, ids, SAVE_AT..STEPS);
    assert_eq!(masters(&mut e, ids), want);
}

#[test]
fn checkpoint_without_frozen_params_resumes_onto_the_frozen_base() {
    // Asynchronous too: the frozen params are left out of the snapshot.
    for asynchronous in [false, true] {
        let dir = TempDir::new(&format!("exclude_frozen_{asynchronous}"));
        let comm = Communicator::new_self().unwrap();
        let want = {
            let mut e = Engine::new(&adamw(2), &comm).unwrap();
            let ids = setup(&mut e);
            train(&mut e, ids, 0..STEPS);
            masters(&mut e, ids)
        };
        {
            let mut e = Engine::new(&adamw(2), &comm).unwrap();
            let ids = setup(&mut e);
            train(&mut e, ids, 0..SAVE_AT);
            let options = SaveOptions::new()
                .asynchronous(asynchronous)
                .exclude_frozen(true);
            e.save_with(dir.path(), "adapters", options).unwrap();
            e.wait_checkpoint().unwrap();
        }
        let manifest =
            std::fs::read_to_string(dir.path().join("adapters").join("manifest.json")).unwrap();
        assert!(manifest.contains("\"frozen_params\": \"excluded\""), "{manifest}");
        assert!(manifest.contains("\"name\":\"w\"") && !manifest.contains("\"name\":\"frozen\""),
                "{manifest}");
        let mut e = Engine::new(&adamw(2), &comm).unwrap();
        let ids = setup(&mut e);
        let err = e.load(dir.path(), None, LoadOptions::new()).unwrap_err();
        assert!(err.message().contains("'frozen'") && err.message().contains("exclude_frozen"),
                "{err}");
        e.load(dir.path(), None, LoadOptions::new().allow_missing(true))
            .unwrap();
        train(&mut e, ids, SAVE_AT..STEPS);
        assert_eq!(masters(&mut e, ids), want, "asynchronous {asynchronous}");
    }
}

#[test]
fn load_without_optimizer_states_keeps_the_weights_only() {
    let dir = TempDir::new("weights_only");
    let comm = Communicator::new_self().unwrap();
    let saved = {
        let mut e = Engine::new(&adamw(1), &comm).unwrap();
        let ids = setup(&mut e);
        train(&mut e, ids, 0..SAVE_AT);
        e.save(dir.path(), "t").unwrap();
        masters(&mut e, ids)
    };
    let mut full = Engine::new(&adamw(1), &comm).unwrap();
    let mut fresh = Engine::new(&adamw(1), &comm).unwrap();
    let ids = setup(&mut full);
    let fresh_ids = setup(&mut fresh); // a ParamId works on its own engine only
    full.load(dir.path(), Some("t"), LoadOptions::default())
        .unwrap();
    fresh
        .load(
            dir.path(),
            Some("t"),
            LoadOptions::new().load_optimizer_states(false),
        )
        .unwrap();
    assert_eq!(masters(&mut fresh, fresh_ids), saved);
    train(&mut full, ids, SAVE_AT..SAVE_AT + 1);
    train(&mut fresh, fresh_ids, SAVE_AT..SAVE_AT + 1);
    assert_ne!(masters(&mut full, ids), masters(&mut fresh, fresh_ids));
}

#[test]
fn export_holds_the_master_weights() {
    let dir = TempDir::new("export");
    let comm = Communicator::new_self().unwrap();
    let mut e = Engine::new(&adamw(2), &comm).unwrap();
    let ids = setup(&mut e);
    train(&mut e, ids, 0..2);
    e.save(dir.path(), "t").unwrap();
    let want = e.master(ids[1]).unwrap();
    let out = dir.path().join("model.safetensors");
    zero::export_safetensors(dir.path(), Some("t"), &out, DType::F32).unwrap();
    // safetensors: 8-byte little-endian header length, JSON header, data.
    let bytes = std::fs::read(&out).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + header_len]).unwrap();
    let key = "\"b\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[";
    let at = header.find(key).expect(header) + key.len();
    let begin: usize = header[at..].split(',').next().unwrap().parse().unwrap();
    let data = &bytes[8 + header_len + begin..8 + header_len + begin + 20];
    let got: Vec<f32> = data
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn corrupt_shard_is_data_loss_naming_the_file() {
    let dir = TempDir::new("corrupt");
    let comm = Communicator::new_self().unwrap();
    {
        let mut e = Engine::new(&adamw(1), &comm).unwrap();
        let ids = setup(&mut e);
        train(&mut e, ids, 0..1);
        e.save(dir.path(), "t").unwrap();
    }
    let shard = dir.path().join("t/rank_00000.bin");
    let mut bytes = std::fs::read(&shard).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&shard, bytes).unwrap();
    let mut e = Engine::new(&adamw(1), &comm).unwrap();
    setup(&mut e);
    let err = e
        .load(dir.path(), Some("t"), LoadOptions::new())
        .unwrap_err();
    assert_eq!(err.status(), Status::DataLoss, "{err}");
    assert!(err.message().contains("rank_00000.bin"), "{err}");
}

#[test]
fn missing_tag_is_not_found_and_mid_accumulation_save_is_refused() {
    let dir = TempDir::new("errors");
    let comm = Communicator::new_self().unwrap();
    let config = Config::from_json(
        r#"{"zero_optimization": {"stage": 1}, "gradient_accumulation_steps": 2,
            "train_micro_batch_size_per_gpu": 1, "steps_per_print": 0}"#,
    )
    .unwrap();
    let mut e = Engine::new(&config, &comm).unwrap();
    let ids = setup(&mut e);
    let err = e
        .load(dir.path(), Some("nope"), LoadOptions::new())
        .unwrap_err();
    assert_eq!(err.status(), Status::NotFound, "{err}");
    train(&mut e, ids, 0..1); // one micro-step of two
    let err = e.save(dir.path(), "t").unwrap_err();
    assert_eq!(err.status(), Status::FailedPrecondition, "{err}");
    let err = e.save(dir.path(), "bad\0tag").unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument, "{err}");
}

#[test]
fn param_info_is_what_was_registered() {
    let comm = Communicator::new_self().unwrap();
    let config = Config::builder()
        .stage(3)
        .dtype(DType::BF16)
        .steps_per_print(0)
        .build();
    let mut e = Engine::new(&config, &comm).unwrap();
    let w = e
        .register_param(ParamDesc::new("layer.weight", &[2, 3, 4]))
        .unwrap();
    let s = e.register_param(ParamDesc::new("scalar", &[])).unwrap();
    let f = e
        .register_param(
            ParamDesc::new("frozen", &[5])
                .dtype(DType::F32)
                .trainable(false),
        )
        .unwrap();
    e.finalize().unwrap();
    let info = e.param_info(w).unwrap();
    assert_eq!(
        (
            info.id,
            info.name.as_str(),
            &info.shape[..],
            info.dtype,
            info.trainable
        ),
        (w, "layer.weight", &[2usize, 3, 4][..], DType::BF16, true)
    );
    let info = e.param_info(s).unwrap();
    assert_eq!((info.name.as_str(), info.shape.len()), ("scalar", 0));
    let info = e.param_info(f).unwrap();
    assert_eq!(
        (&info.shape[..], info.dtype, info.trainable),
        (&[5usize][..], DType::F32, false)
    );
    let bad = e.find_param("nope").unwrap_err();
    assert_eq!(bad.status(), Status::NotFound);
}

#[test]
fn gradient_accumulation_steps_is_resolved_by_the_runtime() {
    let comm = Communicator::new_self().unwrap();
    let auto = Config::from_json(
        r#"{"gradient_accumulation_steps": "auto", "train_batch_size": 12,
            "train_micro_batch_size_per_gpu": 3, "steps_per_print": 0}"#,
    )
    .unwrap();
    let e = Engine::new(&auto, &comm).unwrap();
    assert_eq!(e.gradient_accumulation_steps().unwrap(), 4);
    let e = Engine::new(&adamw(0), &comm).unwrap();
    assert_eq!(e.gradient_accumulation_steps().unwrap(), 1);
}

/// Progress (1.6): save, load, export, reshard and NVMe preallocation report
/// bytes rising to the state they move; `false` cancels with
/// Status::Cancelled and leaves earlier tags whole; a panic is resumed.
#[test]
fn progress_reports_and_cancels() {
    const BIG: usize = 1_500_000; // 18 MB of Adam state: several 4 MiB reports
    let dir = TempDir::new("progress");
    let comm = Communicator::new_self().unwrap();
    let big: Vec<f32> = (0..BIG).map(|i| i as f32 * 1e-6).collect();
    let make = |cfg: &Config| {
        let mut e = Engine::new(cfg, &comm).unwrap();
        e.register_param(ParamDesc::new("big", &[BIG]).init(&big)).unwrap();
        e
    };
    let rises_to = |calls: &[(String, i64, i64)], what: &str, total: i64| {
        let seen: Vec<_> = calls.iter().filter(|c| c.0 == what).collect();
        assert!(!seen.is_empty(), "{what}");
        assert!(seen.iter().all(|c| c.2 == total), "{what}: {seen:?}");
        assert!(seen.windows(2).all(|w| w[0].1 < w[1].1), "{what}: {seen:?}");
        assert_eq!(seen.last().unwrap().1, total, "{what}");
    };
    let state = 3 * 4 * BIG as i64;
    let mut calls: Vec<(String, i64, i64)> = Vec::new();
    let mut engine = make(&adamw(1));
    engine.finalize().unwrap();
    let mut rec = |w: &str, d: i64, t: i64| {
        calls.push((w.to_string(), d, t));
        true
    };
    engine.save_with_progress(dir.path(), "t", &mut rec).unwrap();
    engine
        .load_with_progress(dir.path(), Some("t"), LoadOptions::new(), &mut rec)
        .unwrap();
    let out = dir.path().join("m.safetensors");
    zero::export_safetensors_with_progress(dir.path(), Some("t"), &out, DType::F32, &mut rec)
        .unwrap();
    zero::reshard_with_progress(dir.path(), Some("t"), dir.path().join("re"), 2, &mut rec)
        .unwrap();
    rises_to(&calls, "save", state);
    rises_to(&calls, "load", state);
    rises_to(&calls, "export", 4 * BIG as i64);
    // Each of the 2 new ranks reads the old rank's whole sections.
    rises_to(&calls, "reshard", 2 * state);

    // Cancel at the second report: Cancelled, the good tag stays latest.
    let mut n = 0;
    let err = engine
        .save_with_progress(dir.path(), "bad", &mut |_: &str, _, _| {
            n += 1;
            n < 2
        })
        .unwrap_err();
    assert_eq!(err.status(), Status::Cancelled, "{err}");
    assert!(!dir.path().join("bad").exists());
    let latest = std::fs::read_to_string(dir.path().join("latest")).unwrap();
    assert_eq!(latest.trim(), "t");
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = engine.save_with_progress(dir.path(), "bad", &mut |_: &str, _, _| panic!("stop"));
    }));
    assert!(panicked.is_err());
    engine.save(dir.path(), "after").unwrap(); // the engine goes on
    drop(engine);

    // NVMe: the tier's files reserved, then written once, before finalize returns.
    let nvme = dir.path().join("nvme");
    std::fs::create_dir_all(&nvme).unwrap();
    let cfg = Config::from_json(&format!(
        r#"{{"steps_per_print": 0, "optimizer": {{"type": "Adam", "params": {{"lr": 0.01}}}},
            "zero_optimization": {{"stage": 1, "offload_optimizer":
            {{"device": "nvme", "nvme_path": "{}"}}}}}}"#,
        nvme.display()
    ))
    .unwrap();
    let mut engine = make(&cfg);
    let mut calls: Vec<(String, i64, i64)> = Vec::new();
    engine
        .finalize_with_progress(&mut |w: &str, d, t| {
            calls.push((w.to_string(), d, t));
            true
        })
        .unwrap();
    let st = engine.stats().unwrap();
    rises_to(&calls, "nvme preallocate", st.nvme_bytes);
    rises_to(&calls, "nvme initialize", st.nvme_write_bytes);
}
