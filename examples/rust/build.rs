//! Emits the rpath to libzero_c.so so `mlp` runs without LD_LIBRARY_PATH
//! (same directory rule as zero-sys: ZERO_LIB_DIR, else <repo>/bazel-bin/capi).
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=ZERO_LIB_DIR");
    let dir = match std::env::var_os("ZERO_LIB_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("../..");
            root.canonicalize().unwrap_or(root).join("bazel-bin/capi")
        }
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
}
