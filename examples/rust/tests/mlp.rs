//! The Rust example against the C example (bitwise) and against itself under
//! MPI (3 ranks at stage 3 vs one rank, fp32 within 1e-5 relative).
use std::path::{Path, PathBuf};
use std::process::Command;

const MLP: &str = env!("CARGO_BIN_EXE_mlp");

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("zero_mlp_{}_{name}", std::process::id()))
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Lines "name index bits value" -> (name, index, f32).
fn read_params(path: &Path) -> Vec<(String, usize, f32)> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let bits = u32::from_str_radix(f[2], 16).unwrap();
            (
                f[0].to_string(),
                f[1].parse().unwrap(),
                f32::from_bits(bits),
            )
        })
        .collect()
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).map(|v| v == "1").unwrap_or(false)
}

#[test]
fn rust_example_ends_bitwise_equal_to_c_example() {
    let Some(c_example) = std::env::var_os("ZERO_C_EXAMPLE") else {
        assert!(
            !env_flag("ZERO_REQUIRE_C_EXAMPLE"),
            "ZERO_C_EXAMPLE not set"
        );
        eprintln!("skipped: set ZERO_C_EXAMPLE to the C example binary");
        return;
    };
    let (c_dump, rust_dump) = (tmp("c.txt"), tmp("rust.txt"));
    run(Command::new(&c_example)
        .arg("--dump")
        .arg(&c_dump)
        .env_remove("OMPI_COMM_WORLD_SIZE"));
    run(Command::new(MLP)
        .arg("--dump")
        .arg(&rust_dump)
        .env_remove("OMPI_COMM_WORLD_SIZE"));
    let (c, rust) = (read_params(&c_dump), read_params(&rust_dump));
    assert!(!c.is_empty());
    assert_eq!(c.len(), rust.len(), "param counts differ");
    for (a, b) in c.iter().zip(&rust) {
        assert_eq!((&a.0, a.1), (&b.0, b.1));
        assert_eq!(
            a.2.to_bits(),
            b.2.to_bits(),
            "{} [{}]: C {} vs Rust {}",
            a.0,
            a.1,
            a.2,
            b.2
        );
    }
}

fn mpirun() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("mpirun"))
        .find(|p| p.is_file())
}

#[test]
fn three_mpi_ranks_at_stage_3_match_one_rank() {
    let Some(mpirun) = mpirun() else {
        assert!(!env_flag("ZERO_REQUIRE_MPIRUN"), "mpirun not found on PATH");
        eprintln!("skipped: mpirun not found");
        return;
    };
    let (one, three) = (tmp("np1.txt"), tmp("np3.txt"));
    run(Command::new(MLP)
        .args(["--stage", "3", "--dump"])
        .arg(&one)
        .env_remove("OMPI_COMM_WORLD_SIZE"));
    run(Command::new(mpirun)
        .args([
            "-np",
            "3",
            "--oversubscribe",
            "--allow-run-as-root",
            "--mca",
            "btl",
            "self,vader",
        ])
        .arg(MLP)
        .args(["--stage", "3", "--dump"])
        .arg(&three));
    let (a, b) = (read_params(&one), read_params(&three));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!((&x.0, x.1), (&y.0, y.1));
        let tol = 1e-5 * x.2.abs().max(y.2.abs()).max(1e-3);
        assert!(
            (x.2 - y.2).abs() <= tol,
            "{} [{}]: 1 rank {} vs 3 ranks {}",
            x.0,
            x.1,
            x.2,
            y.2
        );
    }
}
