// The library's directory (found by zero-sys: ZERO_LIB_DIR, ZERO_PREFIX or
// pkg-config), baked into this crate's binaries as an rpath.
fn main() {
    if let Ok(dir) = std::env::var("DEP_ZERO_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
