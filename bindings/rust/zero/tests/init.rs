//! Models larger than one rank: fill closures (C ABI 1.4) and pretrained
//! weights from safetensors files.
use std::sync::{Arc, Mutex};

use zero::{Communicator, Config, Engine, LoadSafetensorsOptions, Optimizer, ParamDesc, Status};

fn sgd(stage: u32) -> Config {
    Config::builder()
        .stage(stage)
        .optimizer(Optimizer::Sgd)
        .lr(0.1)
        .steps_per_print(0)
        .build()
}

fn value(name: &str, i: i64) -> f32 {
    (name.len() as f32) * 1000.0 + i as f32 * 0.5
}

#[test]
fn fill_closures_produce_the_values_for_owned_ranges_only() {
    const WORLD: usize = 3;
    let comms = Communicator::threads(WORLD).unwrap();
    let handles: Vec<_> = comms
        .into_iter()
        .map(|comm| {
            std::thread::spawn(move || {
                // No persistent params: every param is sliced over the ranks.
                let config = Config::builder()
                    .stage(3)
                    .stage3_param_persistence_threshold(0)
                    .steps_per_print(0)
                    .build();
                let mut engine = Engine::new(&config, &comm).unwrap();
                let calls = Arc::new(Mutex::new(Vec::<(String, i64, usize)>::new()));
                let mut ids = Vec::new();
                for (name, shape) in [("w", vec![300usize, 200]), ("bias", vec![1000])] {
                    let calls = Arc::clone(&calls);
                    let id = engine
                        .register_param_fill(ParamDesc::new(name, &shape), move |n, off, out| {
                            calls.lock().unwrap().push((n.to_string(), off, out.len()));
                            for (k, v) in out.iter_mut().enumerate() {
                                *v = value(n, off + k as i64);
                            }
                            Ok(())
                        })
                        .unwrap();
                    ids.push((name, id, shape.iter().product::<usize>()));
                }
                engine.finalize().unwrap();
                let calls = calls.lock().unwrap().clone();
                let mut masters = Vec::new();
                for &(name, id, numel) in &ids {
                    let master = engine.master(id).unwrap();
                    let want: Vec<f32> = (0..numel as i64).map(|i| value(name, i)).collect();
                    assert_eq!(master, want, "param {name}");
                    masters.push(master);
                }
                (
                    comm.rank(),
                    calls,
                    ids.iter().map(|t| t.2).collect::<Vec<_>>(),
                )
            })
        })
        .collect();
    let mut union: Vec<(String, i64, i64)> = Vec::new();
    for h in handles {
        let (rank, calls, numels) = h.join().unwrap();
        assert!(!calls.is_empty());
        // Stage 3 at world 3: a rank fills its slice, far from the model.
        let mut held: Vec<(String, i64)> = calls
            .iter()
            .flat_map(|(n, off, count)| (*off..*off + *count as i64).map(move |i| (n.clone(), i)))
            .collect();
        held.sort();
        held.dedup();
        assert!(
            held.len() * 2 < 61000,
            "rank {rank} filled {} of 61000 elements",
            held.len()
        );
        for (name, off, count) in calls {
            let numel = if name == "w" { numels[0] } else { numels[1] } as i64;
            // Never past the param's end.
            assert!(
                off >= 0 && off + count as i64 <= numel,
                "{name} [{off}, +{count})"
            );
            union.push((name, off, off + count as i64));
        }
    }
    // Together the ranks filled every element.
    for (name, numel) in [("w", 60000i64), ("bias", 1000)] {
        for i in 0..numel {
            assert!(
                union.iter().any(|(n, a, b)| n == name && *a <= i && i < *b),
                "{name}[{i}] never filled"
            );
        }
    }
}

#[test]
fn a_panicking_fill_fails_finalize_naming_the_param() {
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&sgd(3), &comm).unwrap();
    engine
        .register_param_fill(ParamDesc::new("ok", &[4]), |_, _, out| {
            out.fill(1.0);
            Ok(())
        })
        .unwrap();
    engine
        .register_param_fill(ParamDesc::new("boom.weight", &[4]), |_, _, _| {
            panic!("no weights here")
        })
        .unwrap();
    let err = engine.finalize().unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument, "{err}");
    assert!(err.message().contains("boom.weight"), "{err}");
    assert!(err.message().contains("no weights here"), "{err}");
}

#[test]
fn an_err_from_a_fill_fails_finalize_with_its_message() {
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&sgd(1), &comm).unwrap();
    engine
        .register_param_fill(ParamDesc::new("emb", &[3, 2]), |_, _, _| {
            Err("shard file missing".to_string())
        })
        .unwrap();
    let err = engine.finalize().unwrap_err();
    assert!(err.message().contains("emb"), "{err}");
    assert!(err.message().contains("shard file missing"), "{err}");
}

#[test]
fn a_fill_excludes_init_values() {
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&sgd(3), &comm).unwrap();
    let init = [0.0f32; 2];
    let err = engine
        .register_param_fill(ParamDesc::new("w", &[2]).init(&init), |_, _, _| Ok(()))
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
}

/// A safetensors file by hand: u64 LE header length, JSON header, raw data.
fn write_safetensors(path: &std::path::Path, tensors: &[(&str, Vec<usize>, Vec<f32>)]) {
    let mut header = String::from("{");
    let mut data = Vec::new();
    for (k, (name, shape, values)) in tensors.iter().enumerate() {
        let begin = data.len();
        for v in values {
            data.extend_from_slice(&v.to_le_bytes());
        }
        if k > 0 {
            header.push(',');
        }
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        header.push_str(&format!(
            "\"{name}\":{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[{begin},{}]}}",
            dims.join(","),
            data.len()
        ));
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&data);
    std::fs::write(path, bytes).unwrap();
}

fn temp_file(name: &str) -> std::path::PathBuf {
    let dir = std::env::var_os("TEST_TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    dir.join(format!("{}-{name}", std::process::id()))
}

#[test]
fn load_safetensors_sets_the_masters() {
    let path = temp_file("model.safetensors");
    let w: Vec<f32> = (0..6).map(|i| i as f32 * 0.75 - 1.0).collect();
    let b = vec![0.5f32, -0.25, 2.0];
    write_safetensors(
        &path,
        &[
            ("model.fc.weight", vec![2, 3], w.clone()),
            ("model.fc.bias", vec![3], b.clone()),
        ],
    );
    for stage in [0, 1, 2, 3] {
        let comm = Communicator::new_self().unwrap();
        let mut engine = Engine::new(&sgd(stage), &comm).unwrap();
        let wid = engine
            .register_param(ParamDesc::new("fc.weight", &[2, 3]))
            .unwrap();
        let bid = engine
            .register_param(ParamDesc::new("fc.bias", &[3]))
            .unwrap();
        engine.finalize().unwrap();
        let opts = LoadSafetensorsOptions {
            prefix_strip: Some("model.".into()),
            ..Default::default()
        };
        let bytes = engine.load_safetensors(&path, &opts).unwrap();
        assert!(bytes >= 36, "read {bytes} bytes");
        assert_eq!(engine.master(wid).unwrap(), w, "stage {stage}");
        assert_eq!(engine.master(bid).unwrap(), b, "stage {stage}");
        assert_eq!(engine.gather(wid).unwrap().as_f32().unwrap(), &w[..]);
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn load_safetensors_names_a_missing_tensor() {
    let path = temp_file("partial.safetensors");
    write_safetensors(&path, &[("fc.weight", vec![2], vec![1.0, 2.0])]);
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&sgd(3), &comm).unwrap();
    let wid = engine
        .register_param(ParamDesc::new("fc.weight", &[2]))
        .unwrap();
    let init = [7.0f32; 4];
    let hid = engine
        .register_param(ParamDesc::new("head.weight", &[4]).init(&init))
        .unwrap();
    engine.finalize().unwrap();
    let err = engine
        .load_safetensors(&path, &LoadSafetensorsOptions::default())
        .unwrap_err();
    assert_eq!(err.status(), Status::NotFound, "{err}");
    assert!(err.message().contains("head.weight"), "{err}");
    // Nothing was written; allow_missing loads the rest.
    assert_eq!(engine.master(wid).unwrap(), [0.0, 0.0]);
    let opts = LoadSafetensorsOptions {
        allow_missing: true,
        ..Default::default()
    };
    engine.load_safetensors(&path, &opts).unwrap();
    assert_eq!(engine.master(wid).unwrap(), [1.0, 2.0]);
    assert_eq!(engine.master(hid).unwrap(), init);
    std::fs::remove_file(&path).ok();
}
