//! Bakes the rpath to libzero_c.so into `mlp`, so it runs without
//! LD_LIBRARY_PATH: the directory zero-sys found (ZERO_LIB_DIR, ZERO_PREFIX,
//! pkg-config or the repository's build), which the `zero` crate passes on
//! as DEP_ZERO_LIB_DIR. The build script any crate depending on `zero`
//! writes (bindings/rust/README.md, "Use it from your own project").
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_ZERO_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_ZERO_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
