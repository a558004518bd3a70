//! fp32 <-> fp16/bf16 with the runtime's own rounding (C ABI 1.8,
//! `zero_convert`): round to nearest even, NaN kept, fp16 overflow to
//! infinity, subnormals kept. fp16 and bf16 values are their bits in `u16`.
use zero_sys as sys;

use crate::config::DType;
use crate::error::{check, Error, Result, Status};

/// Converts `src` (of `src_dtype`) into `dst` (of `dst_dtype`), element by
/// element; both slices hold the same number of elements, as bytes of their
/// dtypes (`f32`: 4 bytes each, fp16/bf16: 2).
fn convert_bytes(dst_dtype: DType, dst: &mut [u8], src_dtype: DType, src: &[u8]) -> Result<()> {
    let count = src.len() / src_dtype.size();
    if dst.len() != count * dst_dtype.size() {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("convert: {count} values in, room for {} out", dst.len() / dst_dtype.size()),
        ));
    }
    // SAFETY: both slices are valid for `count` elements of their dtypes and
    // do not overlap (one is borrowed mutably).
    check(unsafe {
        sys::zero_convert(
            dst_dtype.raw(),
            dst.as_mut_ptr().cast(),
            src_dtype.raw(),
            src.as_ptr().cast(),
            count,
        )
    })
}

fn bytes_of<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: f32 and u16 have no padding; any byte pattern is readable.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

fn bytes_of_mut<T: Copy>(v: &mut [T]) -> &mut [u8] {
    // SAFETY: f32 and u16 accept every byte pattern.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), std::mem::size_of_val(v)) }
}

/// fp32 values rounded to `dtype` (fp16 or bf16) bits.
pub fn from_f32(dtype: DType, values: &[f32]) -> Result<Vec<u16>> {
    if dtype == DType::F32 {
        return Err(Error::new(Status::InvalidArgument, "convert: fp32 is not a 16-bit dtype"));
    }
    let mut out = vec![0u16; values.len()];
    convert_bytes(dtype, bytes_of_mut(&mut out), DType::F32, bytes_of(values))?;
    Ok(out)
}

/// fp16 or bf16 bits (`dtype`) widened to fp32 (exact).
pub fn to_f32(dtype: DType, bits: &[u16]) -> Result<Vec<f32>> {
    if dtype == DType::F32 {
        return Err(Error::new(Status::InvalidArgument, "convert: fp32 is not a 16-bit dtype"));
    }
    let mut out = vec![0f32; bits.len()];
    convert_bytes(DType::F32, bytes_of_mut(&mut out), dtype, bytes_of(bits))?;
    Ok(out)
}

/// fp32 to bf16 bits, rounded to nearest even.
pub fn f32_to_bf16(values: &[f32]) -> Vec<u16> {
    from_f32(DType::BF16, values).expect("zero_convert of valid slices")
}

/// fp32 to IEEE half bits, rounded to nearest even.
pub fn f32_to_f16(values: &[f32]) -> Vec<u16> {
    from_f32(DType::F16, values).expect("zero_convert of valid slices")
}

/// bf16 bits to fp32 (exact).
pub fn bf16_to_f32(bits: &[u16]) -> Vec<f32> {
    to_f32(DType::BF16, bits).expect("zero_convert of valid slices")
}

/// IEEE half bits to fp32 (exact).
pub fn f16_to_f32(bits: &[u16]) -> Vec<f32> {
    to_f32(DType::F16, bits).expect("zero_convert of valid slices")
}
