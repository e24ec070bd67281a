// aotc_convert.cuh: conversions to and from the narrow storage types (float8, int4/uint4).
// Included by aotc_ops.cuh. Plain C on double, so the GPU (NVRTC) and the host emulation
// compute the same bits: never cuda_fp8.h on one side and hand code on the other.
//
// float8 formats (M mantissa bits, exponent bias B, largest finite magnitude code MAXMAG):
//   e4m3fn    M=3 B=7   MAXMAG 0x7e (448)    no inf, NaN = s.1111.111
//   e5m2      M=2 B=15  MAXMAG 0x7b (57344)  IEEE-like: inf = s.11111.00, NaN = s.11111.{01,10,11}
//   e4m3fnuz  M=3 B=8   MAXMAG 0x7f (240)    one NaN 0x80, no inf, no -0
//   e5m2fnuz  M=2 B=16  MAXMAG 0x7f (57344)  one NaN 0x80, no inf, no -0
// aotc_to_<fmt>(x, saturate) rounds to nearest even. Out-of-range values and +-inf become
// +-max when saturating (ONNX Cast's default), else inf (e5m2) or NaN (the others), as
// ml_dtypes does. tests/kernels/test_float8_convert.py checks all of it exhaustively.
#pragma once

#define AOTC_F8_FN 0      // e4m3fn
#define AOTC_F8_IEEE 1    // e5m2
#define AOTC_F8_FNUZ 2    // e4m3fnuz, e5m2fnuz

__device__ __forceinline__ unsigned char aotc_f8_encode(double x, int M, int B, int maxmag, int kind,
                                                        bool saturate) {
  const unsigned char sign = signbit(x) ? 0x80 : 0x00;
  const unsigned char nan = kind == AOTC_F8_FNUZ ? 0x80 : (kind == AOTC_F8_FN ? (sign | 0x7f) : (sign | 0x7e));
  if (x != x) return nan;
  const double a = fabs(x);
  int e = 0;
  if (a <= 1.0e300) frexp(a, &e);    // a = f * 2^e, f in [0.5, 1): a's exponent is e - 1
  if (a > 1.0e300 || e - 1 > 20) {   // inf, or far past every format's range (2^17 is e5m2's)
    if (saturate) return sign | maxmag;
    return kind == AOTC_F8_IEEE ? (sign | 0x7c) : nan;
  }
  int ue = a == 0.0 ? 1 - B : e - 1;
  if (ue < 1 - B) ue = 1 - B;        // subnormal range: one fixed scale
  // q = a in units of the last mantissa bit at exponent ue, rounded to nearest even; then the
  // code's magnitude is (ue + B - 1) << M plus q, which carries into the exponent by itself
  const long long q = (long long)rint(ldexp(a, M - ue));
  const long long mag = ((long long)(ue + B - 1) << M) + q;
  if (mag > maxmag) {
    if (saturate) return sign | maxmag;
    return kind == AOTC_F8_IEEE ? (sign | 0x7c) : nan;
  }
  if (mag == 0 && kind == AOTC_F8_FNUZ) return 0;   // no -0
  return sign | (unsigned char)mag;
}

__device__ __forceinline__ float aotc_f8_decode(unsigned char b, int M, int B, int kind) {
  const unsigned mag = b & 0x7fu;
  const float s = (b & 0x80u) ? -1.0f : 1.0f;
  const float nan = __int_as_float((int)(0x7fc00000u | ((unsigned)(b & 0x80u) << 24)));   // keeps the sign
  if (kind == AOTC_F8_FNUZ && b == 0x80) return __int_as_float(0x7fc00000);
  if (kind == AOTC_F8_FN && mag == 0x7fu) return nan;
  if (kind == AOTC_F8_IEEE && (mag >> M) == 31u) return mag == 0x7cu ? s * AOTC_INF : nan;
  const int e = (int)(mag >> M);
  const int m = (int)(mag & ((1u << M) - 1u));
  // value = m * 2^(1-B-M) (subnormal) or (m + 2^M) * 2^(e-B-M); every power here is a normal float
  const int p = (e == 0 ? 1 : e) - B - M;
  const float scale = __int_as_float((127 + p) << 23);
  return s * (float)(e == 0 ? m : m + (1 << M)) * scale;
}

__device__ __forceinline__ unsigned char aotc_to_f8e4m3fn(double x, bool sat) { return aotc_f8_encode(x, 3, 7, 0x7e, AOTC_F8_FN, sat); }
__device__ __forceinline__ unsigned char aotc_to_f8e5m2(double x, bool sat) { return aotc_f8_encode(x, 2, 15, 0x7b, AOTC_F8_IEEE, sat); }
__device__ __forceinline__ unsigned char aotc_to_f8e4m3fnuz(double x, bool sat) { return aotc_f8_encode(x, 3, 8, 0x7f, AOTC_F8_FNUZ, sat); }
__device__ __forceinline__ unsigned char aotc_to_f8e5m2fnuz(double x, bool sat) { return aotc_f8_encode(x, 2, 16, 0x7f, AOTC_F8_FNUZ, sat); }
__device__ __forceinline__ float aotc_from_f8e4m3fn(unsigned char b) { return aotc_f8_decode(b, 3, 7, AOTC_F8_FN); }
__device__ __forceinline__ float aotc_from_f8e5m2(unsigned char b) { return aotc_f8_decode(b, 2, 15, AOTC_F8_IEEE); }
__device__ __forceinline__ float aotc_from_f8e4m3fnuz(unsigned char b) { return aotc_f8_decode(b, 3, 8, AOTC_F8_FNUZ); }
__device__ __forceinline__ float aotc_from_f8e5m2fnuz(unsigned char b) { return aotc_f8_decode(b, 2, 16, AOTC_F8_FNUZ); }

// int4/uint4 (and int2/uint2), one per byte as ml_dtypes stores them: the low 4 bits, high 4 bits zero (int4 -5
// is the byte 0x0b). A value wraps to 4 bits at converts (as ml_dtypes casts) and computes
// sign-extended (int4) in a signed char.
__device__ __forceinline__ signed char aotc_wrap_i4(long long v) { return (signed char)(((int)(v & 15) ^ 8) - 8); }
__device__ __forceinline__ unsigned char aotc_wrap_u4(long long v) { return (unsigned char)(v & 15); }
__device__ __forceinline__ signed char aotc_wrap_i2(long long v) { return (signed char)(((int)(v & 3) ^ 2) - 2); }
__device__ __forceinline__ unsigned char aotc_wrap_u2(long long v) { return (unsigned char)(v & 3); }
__device__ __forceinline__ unsigned char aotc_store_4bit(long long v) { return (unsigned char)(v & 15); }
__device__ __forceinline__ unsigned char aotc_store_2bit(long long v) { return (unsigned char)(v & 3); }
__device__ __forceinline__ signed char aotc_load_i4(unsigned char b) { return aotc_wrap_i4(b); }
__device__ __forceinline__ signed char aotc_load_i2(unsigned char b) { return aotc_wrap_i2(b); }

// float4 e2m1fn (M=1, B=1, largest 6.0, no inf or NaN), one per byte, sign in bit 3, as ml_dtypes
// holds it. ml_dtypes (and ONNX Cast) always saturate: beyond +-6 and +-inf give +-6, and NaN gives a
// zero whose sign bit is the NaN's flipped; the `saturate` flag is accepted for a uniform call.
__device__ __forceinline__ unsigned char aotc_to_f4e2m1fn(double x, bool) {
  if (x != x) return signbit(x) ? 0x0 : 0x8;
  const unsigned char c = aotc_f8_encode(x, 1, 1, 0x7, AOTC_F8_FN, true);
  return (unsigned char)((c & 0x7) | ((c & 0x80) >> 4));
}
__device__ __forceinline__ float aotc_from_f4e2m1fn(unsigned char b) {
  return aotc_f8_decode((unsigned char)(((b & 0x8) << 4) | (b & 0x7)), 1, 1, AOTC_F8_FN);
}

// float8 e8m0fnu, the MX block-scale type: the byte is an f32 exponent field, value 2^(code-127),
// no sign (dropped), no zero, 0xFF is NaN (NaN and +-inf encode to it). Encoding reads the f32 bits
// of x (a double is first rounded to f32, as ONNX Cast does) and rounds the mantissa away by mode:
// up (ONNX's default) adds 1 when the mantissa is non-zero, down truncates, nearest adds 1 on the
// guard bit unless the rest is zero and x is an f32 subnormal (ONNX's reference: ties go up for
// normals, where the implicit 1 is the 'lsb', and down for subnormals). saturate stops a round-up
// at 254 (2^127) instead of NaN.
// Decoding builds the f32 bits directly: code 0 is 2^-127, an f32 subnormal (0x00400000), exact
// on both sides since kernels compile without ftz; to f16 it then rounds to 0 like every code < 103.
#define AOTC_E8M0_UP 0
#define AOTC_E8M0_DOWN 1
#define AOTC_E8M0_NEAREST 2

__device__ __forceinline__ unsigned char aotc_to_f8e8m0fnu(double x, bool saturate, int mode) {
  const unsigned bits = (unsigned)__float_as_int((float)x);
  const unsigned e = (bits >> 23) & 0xffu;
  const unsigned m = bits & 0x7fffffu;
  if (e == 0xffu) return 0xff;
  unsigned r = e;
  if (mode == AOTC_E8M0_UP) r += m != 0u;
  if (mode == AOTC_E8M0_NEAREST) r += (m >> 22) && ((m & 0x3fffffu) || e != 0u);
  if (r == 0xffu && saturate) r = 0xfeu;
  return (unsigned char)r;
}
__device__ __forceinline__ float aotc_from_f8e8m0fnu(unsigned char b) {
  if (b == 0xff) return __int_as_float(0x7fc00000);
  return __int_as_float(b == 0 ? 0x00400000 : (int)((unsigned)b << 23));
}
