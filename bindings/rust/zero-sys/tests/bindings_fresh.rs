//! The committed src/bindings.rs is exactly what regen.sh produces from the
//! current header. Fails with a diff hint when the header changed.
use std::path::Path;
use std::process::Command;

#[test]
fn committed_bindings_match_regenerated_header() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::temp_dir().join(format!("zero_sys_bindings_{}.rs", std::process::id()));
    let status = Command::new("bash")
        .arg(crate_dir.join("regen.sh"))
        .arg(&out)
        .status()
        .expect("run regen.sh");
    assert!(status.success(), "regen.sh failed: {status}");
    let fresh = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    let committed = std::fs::read_to_string(crate_dir.join("src/bindings.rs")).unwrap();
    assert!(
        fresh == committed,
        "src/bindings.rs is stale: run bindings/rust/zero-sys/regen.sh and commit the result"
    );
}
