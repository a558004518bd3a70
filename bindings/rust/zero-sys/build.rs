//! Finds libzero_c.so and links it. The directory is the first of:
//!
//! 1. `ZERO_LIB_DIR`: a directory holding `libzero_c.so`;
//! 2. `ZERO_PREFIX`: an install prefix of `tools/install.sh` (`PREFIX/lib`);
//! 3. `pkg-config --variable=libdir zero` (an installed `zero.pc`, found
//!    through `PKG_CONFIG_PATH` as the C build finds it);
//! 4. inside the repository only: `<repo>/bazel-bin/capi` resolved to the
//!    real directory it points at now (`bazel build //capi:libzero_c.so`),
//!    so the rpath never follows the `bazel-bin` symlink when a later build
//!    of another configuration moves it.
//!
//! The directory is baked into this package's tests as an rpath and exported
//! to dependents as `DEP_ZERO_C_LIB_DIR` (the `zero` crate passes it on as
//! `DEP_ZERO_LIB_DIR`): an rpath is a link argument, which Cargo does not
//! pass on to dependent packages, so a binary reaches the library through
//! its own build script's rpath, the loader's path (`ldconfig`), or
//! `LD_LIBRARY_PATH` (bindings/rust/README.md, "Use it from your own project").
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    for var in ["ZERO_LIB_DIR", "ZERO_PREFIX", "PKG_CONFIG_PATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let (dir, tried) = lib_dir();
    let Some(dir) = dir else {
        panic!(
            "zero-sys: libzero_c.so not found (tried: {}). Install it (tools/install.sh PREFIX) \
             and set ZERO_PREFIX=PREFIX or PKG_CONFIG_PATH=PREFIX/lib/pkgconfig, or set \
             ZERO_LIB_DIR to a directory holding libzero_c.so",
            tried.join("; ")
        );
    };
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=zero_c");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    println!("cargo:lib_dir={}", dir.display());
}

fn has_lib(dir: &Path) -> bool {
    dir.join("libzero_c.so").exists()
}

/// The directory, or None and what was tried.
fn lib_dir() -> (Option<PathBuf>, Vec<String>) {
    let mut tried = Vec::new();
    let mut candidates: Vec<(String, PathBuf)> = Vec::new();
    if let Some(d) = env::var_os("ZERO_LIB_DIR").filter(|d| !d.is_empty()) {
        // Set explicitly: the only candidate, whatever it holds.
        let d = PathBuf::from(d);
        if has_lib(&d) {
            return (Some(d), tried);
        }
        tried.push(format!("ZERO_LIB_DIR={}", d.display()));
        return (None, tried);
    }
    if let Some(p) = env::var_os("ZERO_PREFIX").filter(|d| !d.is_empty()) {
        candidates.push(("ZERO_PREFIX".into(), PathBuf::from(p).join("lib")));
    }
    if let Ok(out) = Command::new("pkg-config").args(["--variable=libdir", "zero"]).output() {
        let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !s.is_empty() {
            candidates.push(("pkg-config zero".into(), PathBuf::from(s)));
        }
    }
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let repo_bin = manifest.join("../../../bazel-bin/capi");
    if manifest.join("../../../capi/include/zero_c.h").exists() {
        candidates.push(("the repository's bazel-bin".into(), repo_bin));
    }
    for (what, d) in candidates {
        // Resolved now: a symlink on the way (bazel-bin) may move later.
        let real = d.canonicalize().unwrap_or_else(|_| d.clone());
        if has_lib(&real) {
            return (Some(real), tried);
        }
        tried.push(format!("{what}: {}", d.display()));
    }
    (None, tried)
}
