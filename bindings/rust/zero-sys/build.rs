//! Links libzero_c.so built by Bazel (`bazel build //capi:libzero_c.so`).
//!
//! The directory comes from `ZERO_LIB_DIR`, by default `<repo>/bazel-bin/capi`.
//! It is also exported to dependents as `DEP_ZERO_C_LIB_DIR`, so their build
//! scripts can emit the same rpath (an rpath is a link argument, and Cargo does
//! not pass link arguments on to dependent packages).
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=ZERO_LIB_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    let dir = lib_dir();
    if !dir.join("libzero_c.so").exists() {
        println!(
            "cargo:warning=libzero_c.so not found in {} (run `bazel build //capi:libzero_c.so` or set ZERO_LIB_DIR)",
            dir.display()
        );
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=zero_c");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    println!("cargo:lib_dir={}", dir.display());
}

fn lib_dir() -> PathBuf {
    if let Some(dir) = env::var_os("ZERO_LIB_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest.join("../../..");
    root.canonicalize().unwrap_or(root).join("bazel-bin/capi")
}
