//! The Rust example against the C example (bitwise) and against itself under
//! MPI (3 ranks at stage 3 vs one rank, fp32 within 1e-5 relative).
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

const MLP: &str = env!("CARGO_BIN_EXE_mlp");
const MPIRUN_ARGS: [&str; 7] = [
    "-np",
    "3",
    "--oversubscribe",
    "--allow-run-as-root",
    "--mca",
    "btl",
    "self,vader",
];

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("zero_mlp_{}_{name}", std::process::id()))
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).map(|v| v == "1").unwrap_or(false)
}

/// Runs `program args... --dump <tmp> --quiet`, under mpirun when given, and
/// returns the dumped bytes (fp32 little-endian master weights).
fn train(mpirun: Option<&Path>, program: &OsStr, args: &[&str], tag: &str) -> Vec<u8> {
    let dump = tmp(tag);
    let mut cmd = match mpirun {
        Some(mpirun) => {
            let mut c = Command::new(mpirun);
            c.args(MPIRUN_ARGS).arg(program);
            c
        }
        None => {
            let mut c = Command::new(program);
            c.env_remove("OMPI_COMM_WORLD_SIZE");
            c
        }
    };
    cmd.args(args).arg("--dump").arg(&dump).arg("--quiet");
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&dump).unwrap_or_else(|e| panic!("{}: {e}", dump.display()));
    let _ = std::fs::remove_file(&dump);
    assert!(
        !bytes.is_empty() && bytes.len() % 4 == 0,
        "{tag}: bad dump of {} bytes",
        bytes.len()
    );
    bytes
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn c_example() -> Option<PathBuf> {
    match std::env::var_os("ZERO_C_EXAMPLE") {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            assert!(
                !env_flag("ZERO_REQUIRE_C_EXAMPLE"),
                "ZERO_C_EXAMPLE not set"
            );
            eprintln!("skipped: set ZERO_C_EXAMPLE to the C example binary (bazel-bin/examples/c/mlp_train)");
            None
        }
    }
}

fn mpirun() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("mpirun"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(!env_flag("ZERO_REQUIRE_MPIRUN"), "mpirun not found on PATH");
        eprintln!("skipped: mpirun not found");
    }
    found
}

fn assert_bitwise_equal(c: &[u8], rust: &[u8], what: &str) {
    assert_eq!(c.len(), rust.len(), "{what}: dump sizes differ");
    let (c, rust) = (floats(c), floats(rust));
    for (i, (a, b)) in c.iter().zip(&rust).enumerate() {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "{what}: element {i}: C {a:e} vs Rust {b:e}"
        );
    }
}

#[test]
fn rust_example_ends_bitwise_equal_to_c_example() {
    let Some(c) = c_example() else { return };
    for stage in ["0", "1", "2", "3"] {
        let args = ["--stage", stage, "--steps", "30"];
        let c_bytes = train(None, c.as_os_str(), &args, &format!("c_s{stage}"));
        let rust_bytes = train(None, OsStr::new(MLP), &args, &format!("rust_s{stage}"));
        assert_bitwise_equal(&c_bytes, &rust_bytes, &format!("stage {stage}"));
    }
}

/// Half-precision working copies through a ds_config.json: fp16 (dynamic
/// loss scaling) and bf16, both sides converting with the same rounding.
#[test]
fn rust_example_matches_c_example_with_half_precision_json_configs() {
    let Some(c) = c_example() else { return };
    for (dtype, stage) in [("fp16", 1), ("bf16", 2)] {
        let config = tmp(&format!("{dtype}.json"));
        std::fs::write(
            &config,
            format!(
                r#"{{"train_batch_size": 48, "{dtype}": {{"enabled": true}},
                    "optimizer": {{"type": "AdamW", "params": {{"lr": 0.01, "weight_decay": 0.01}}}},
                    "zero_optimization": {{"stage": {stage}}}, "steps_per_print": 0}}"#
            ),
        )
        .unwrap();
        let args = ["--config", config.to_str().unwrap()];
        let c_bytes = train(None, c.as_os_str(), &args, &format!("c_{dtype}"));
        let rust_bytes = train(None, OsStr::new(MLP), &args, &format!("rust_{dtype}"));
        let _ = std::fs::remove_file(&config);
        assert_bitwise_equal(&c_bytes, &rust_bytes, &format!("{dtype} stage {stage}"));
    }
}

#[test]
fn three_mpi_ranks_at_stage_3_match_one_rank() {
    let Some(mpirun) = mpirun() else { return };
    let args = ["--stage", "3"];
    let one = floats(&train(None, OsStr::new(MLP), &args, "np1"));
    let three = floats(&train(Some(&mpirun), OsStr::new(MLP), &args, "np3"));
    assert_eq!(one.len(), three.len());
    // fp32, 1e-5 relative: per element against its own magnitude, with the
    // largest param magnitude as the floor (elements near zero only carry
    // rounding noise from the different reduction order), and norm-wise.
    let scale = one.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let (mut diff2, mut ref2, mut worst) = (0.0f64, 0.0f64, 0.0f32);
    for (i, (a, b)) in one.iter().zip(&three).enumerate() {
        let d = (a - b).abs();
        let tol = 1e-5 * a.abs().max(b.abs()).max(scale);
        assert!(d <= tol, "element {i}: 1 rank {a:e} vs 3 ranks {b:e}");
        worst = worst.max(d);
        diff2 += (d as f64).powi(2);
        ref2 += (*a as f64).powi(2);
    }
    let normwise = (diff2 / ref2).sqrt();
    assert!(
        normwise <= 1e-5,
        "norm-wise relative difference {normwise:e}"
    );
    eprintln!("3 ranks vs 1: largest difference {worst:e}, norm-wise relative {normwise:e}");
}

#[test]
fn three_mpi_ranks_rust_and_c_end_bitwise_equal() {
    let (Some(mpirun), Some(c)) = (mpirun(), c_example()) else {
        return;
    };
    let args = ["--stage", "3"];
    let c_bytes = train(Some(&mpirun), c.as_os_str(), &args, "c_np3");
    let rust_bytes = train(Some(&mpirun), OsStr::new(MLP), &args, "rust_np3");
    assert_bitwise_equal(&c_bytes, &rust_bytes, "3 ranks, stage 3");
}
