//! Emits the rpath to libzero_c.so for this package's tests and doc tests,
//! and passes zero-sys's directory on to the crates that depend on `zero`
//! as `DEP_ZERO_LIB_DIR` (this package's `links = "zero"`), so a dependent's
//! build script can bake the same rpath into its binaries without depending
//! on zero-sys itself (bindings/rust/README.md, "Use it from your own
//! project").
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_ZERO_C_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_ZERO_C_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        println!("cargo:lib_dir={dir}");
    }
}
