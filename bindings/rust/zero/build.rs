//! Emits the rpath to libzero_c.so for this package's tests and doc tests.
//! zero-sys decides the directory and passes it as DEP_ZERO_C_LIB_DIR.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_ZERO_C_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_ZERO_C_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
