//! The hand-written `*_init()` functions spell the same values as the header's
//! `ZERO_*_INIT` macros (bindgen cannot translate struct initializers, so the
//! freshness test does not cover them). A C program compiled with the system
//! compiler prints every field of each macro; Rust prints the same fields.
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use zero_sys::*;

const C_PROGRAM: &str = r#"
#include <stdio.h>
#include "zero_c.h"
int main(void) {
  zero_config c = ZERO_CONFIG_INIT;
  printf("config %zu %d %d %d %a %a %a %a %a %a %d %a %lld %lld %d %lld %lld %lld %lld %a %d %d %d %a %d %a\n",
         c.struct_size, c.stage, (int)c.dtype, (int)c.optimizer, (double)c.lr,
         (double)c.beta1, (double)c.beta2, (double)c.eps, (double)c.weight_decay,
         (double)c.momentum, c.gradient_accumulation_steps, (double)c.gradient_clipping,
         (long long)c.reduce_bucket_size, (long long)c.allgather_bucket_size, c.overlap_comm,
         (long long)c.sub_group_size, (long long)c.stage3_max_live_parameters,
         (long long)c.stage3_prefetch_bucket_size, (long long)c.stage3_param_persistence_threshold,
         (double)c.loss_scale, c.initial_scale_power, c.loss_scale_window, c.hysteresis,
         (double)c.min_loss_scale, c.steps_per_print, c.comm_timeout_seconds);
  zero_param_desc d = ZERO_PARAM_DESC_INIT;
  printf("desc %zu %d %d %d %d %d %d\n", d.struct_size, d.name == NULL, d.ndim,
         d.shape == NULL, (int)d.dtype, d.init == NULL, d.trainable);
  zero_step_info s = ZERO_STEP_INFO_INIT;
  printf("step %zu %d %d %lld %lld %a %a %a\n", s.struct_size, s.boundary, s.skipped,
         (long long)s.global_step, (long long)s.skipped_steps, s.loss_scale, s.grad_norm, s.lr);
  zero_stats t = ZERO_STATS_INIT;
  printf("stats %zu %d %d %d %lld %lld\n", t.struct_size, t.rank, t.world_size, t.stage,
         (long long)t.trainable_numel, (long long)t.micro_step);
  zero_load_options l = ZERO_LOAD_OPTIONS_INIT;
  printf("load %zu %d %d\n", l.struct_size, l.load_optimizer_states, l.allow_missing);
  return 0;
}
"#;

/// C's `%a` for a double, as glibc prints it (normalized, lowercase).
fn hex(x: f64) -> String {
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0x0p+0".into()
        } else {
            "0x0p+0".into()
        };
    }
    let bits = x.to_bits();
    let sign = if bits >> 63 == 1 { "-" } else { "" };
    let exp = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut mant = format!("{:013x}", bits & 0xf_ffff_ffff_ffff);
    while mant.ends_with('0') {
        mant.pop();
    }
    let frac = if mant.is_empty() {
        String::new()
    } else {
        format!(".{mant}")
    };
    format!("{sign}0x1{frac}p{exp:+}")
}

fn rust_lines() -> String {
    let c = zero_config_init();
    let mut out = String::new();
    writeln!(
        out,
        "config {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}",
        c.struct_size,
        c.stage,
        c.dtype,
        c.optimizer,
        hex(c.lr.into()),
        hex(c.beta1.into()),
        hex(c.beta2.into()),
        hex(c.eps.into()),
        hex(c.weight_decay.into()),
        hex(c.momentum.into()),
        c.gradient_accumulation_steps,
        hex(c.gradient_clipping.into()),
        c.reduce_bucket_size,
        c.allgather_bucket_size,
        c.overlap_comm,
        c.sub_group_size,
        c.stage3_max_live_parameters,
        c.stage3_prefetch_bucket_size,
        c.stage3_param_persistence_threshold,
        hex(c.loss_scale.into()),
        c.initial_scale_power,
        c.loss_scale_window,
        c.hysteresis,
        hex(c.min_loss_scale.into()),
        c.steps_per_print,
        hex(c.comm_timeout_seconds)
    )
    .unwrap();
    let d = zero_param_desc_init();
    writeln!(
        out,
        "desc {} {} {} {} {} {} {}",
        d.struct_size,
        d.name.is_null() as i32,
        d.ndim,
        d.shape.is_null() as i32,
        d.dtype,
        d.init.is_null() as i32,
        d.trainable
    )
    .unwrap();
    let s = zero_step_info_init();
    writeln!(
        out,
        "step {} {} {} {} {} {} {} {}",
        s.struct_size,
        s.boundary,
        s.skipped,
        s.global_step,
        s.skipped_steps,
        hex(s.loss_scale),
        hex(s.grad_norm),
        hex(s.lr)
    )
    .unwrap();
    let t = zero_stats_init();
    writeln!(
        out,
        "stats {} {} {} {} {} {}",
        t.struct_size, t.rank, t.world_size, t.stage, t.trainable_numel, t.micro_step
    )
    .unwrap();
    let l = zero_load_options_init();
    writeln!(
        out,
        "load {} {} {}",
        l.struct_size, l.load_optimizer_states, l.allow_missing
    )
    .unwrap();
    out
}

#[test]
fn init_functions_match_header_macros() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let include = std::env::var("ZERO_HEADER")
        .map(|h| Path::new(&h).parent().unwrap().to_path_buf())
        .unwrap_or_else(|_| crate_dir.join("../../../capi/include"));
    let dir = std::env::temp_dir().join(format!("zero_sys_init_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("init.c");
    let exe = dir.join("init");
    std::fs::write(&src, C_PROGRAM).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .arg("-std=c99")
        .arg("-I")
        .arg(&include)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "{cc} failed on the init-macro program");
    let out = Command::new(&exe)
        .output()
        .expect("run the init-macro program");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), rust_lines());
}

#[test]
fn hex_matches_glibc_format() {
    assert_eq!(hex(1.0), "0x1p+0");
    assert_eq!(hex(-1.0), "-0x1p+0");
    assert_eq!(hex(300.0), "0x1.2cp+8");
    assert_eq!(hex(1e-3), "0x1.0624dd2f1a9fcp-10");
}
