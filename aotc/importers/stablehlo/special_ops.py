"""chlo's special functions (lgamma, digamma, erf_inv, bessel_i1e, polygamma, zeta) as elementwise decompositions.

jax lowers `lax.lgamma`, `lax.digamma`, `lax.erf_inv`, `lax.bessel_i1e`,
`lax.polygamma` and `lax.zeta` to these chlo ops; XLA expands them when it
compiles, so aotc must too. Each is a fixed chain of the IR's elementwise ops
(fusable into one loop kernel), computed in f32 (f16/bf16 are widened and
narrowed back; the ops' verifiers admit float operands only):

- lgamma: Stirling's series at y >= 8, the recurrence Gamma(x+8) = Gamma(x)
  x(x+1)...(x+7) below, and the reflection formula for x < 0.
- digamma: the asymptotic series at y >= 6 with the recurrence
  psi(x+1) = psi(x) + 1/x below, and reflection for x <= 0 (NaN at the poles).
- erf_inv: Giles' single-precision polynomials ("Approximating the erfinv
  function", GPU Computing Gems, 2011); +-1 give +-inf.
- bessel_i1e: the power series of I1 times exp(-|x|) for |x| <= 12, the
  Hankel asymptotic expansion above (relative error < 2e-8 in float64).
- zeta (Hurwitz, s > 1): Euler-Maclaurin summation, 8 direct terms and 8
  Bernoulli corrections; polygamma(n, x) = (-1)^(n+1) n! zeta(n+1, x), and
  digamma at n = 0.
Out-of-domain arguments give what jax gives (NaN or inf); tests pin them.
"""
from __future__ import annotations

import math

from aotc.importers.expr import Ex
from aotc.importers.stablehlo.importer import register
from aotc.importers.stablehlo.ops import convert, full
from aotc.ir import dtypes

_NAN, _INF = float("nan"), float("inf")


def _in_f32(cx, ins, fn):
    """fn(*Ex operands in f32) converted back to the op's float type."""
    dt = ins[0].dtype
    out = fn(*(Ex(cx, convert(cx, v, dtypes.f32)) for v in ins))
    return convert(cx, out.v, dt)


def _and(cx, *preds):
    out = preds[0]
    for p in preds[1:]:
        out = cx.add("and", out, p)
    return out


def _or(cx, *preds):
    out = preds[0]
    for p in preds[1:]:
        out = cx.add("or", out, p)
    return out


def _const(cx, like: Ex, value: float) -> Ex:
    """`value` in like's shape and dtype (not like * 0 + value: that is NaN where like is infinite)."""
    return Ex(cx, full(cx, value, like.v))


def _poly(x: Ex, coeffs) -> Ex:
    """coeffs[0] + coeffs[1] x + ... by Horner's rule."""
    p = _const(x.ctx, x, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        p = p * x + c
    return p


def _offset(x: Ex) -> Ex:
    """x minus its nearest integer, in [-1/2, 1/2] and exact: |sin(pi x)| and tan(pi x) from a small argument."""
    return x - x.round_even()


# ----------------------------------------------------------------- lgamma

def lgamma(cx, x: Ex) -> Ex:
    neg = x.cmp("LT", 0.0)
    z = (1 - x).where(neg, x)           # reflection: the rest sees z >= 0
    small = z.cmp("LT", 8.0)
    prod = z
    for k in range(1, 8):
        prod = prod * (z + float(k))
    y = (z + 8.0).where(small, z)
    inv = 1 / y
    inv2 = inv * inv
    series = inv * _poly(inv2, [1 / 12, -1 / 360, 1 / 1260, -1 / 1680])
    stirling = (y - 0.5) * y.log() - y + 0.5 * math.log(2 * math.pi) + series
    lg = stirling - prod.abs().log().where(small, 0.0)
    sin_pi = (_offset(x) * math.pi).sin().abs()
    reflected = math.log(math.pi) - sin_pi.log() - lg
    out = reflected.where(neg, lg)
    return _const(cx, x, _INF).where(x.abs().cmp("EQ", _INF), out)


@register("chlo.lgamma")
def _lgamma(cx, ins):
    return _in_f32(cx, ins, lambda x: lgamma(cx, x))


# ----------------------------------------------------------------- digamma

def digamma(cx, x: Ex) -> Ex:
    refl = x.cmp("LE", 0.0)
    z = (1 - x).where(refl, x)
    small = z.cmp("LT", 6.0)
    shift = 1 / z
    for k in range(1, 6):
        shift = shift + 1 / (z + float(k))
    y = (z + 6.0).where(small, z)
    inv = 1 / y
    inv2 = inv * inv
    tail = inv2 * _poly(inv2, [-1 / 12, 1 / 120, -1 / 252, 1 / 240, -1 / 132])
    psi = y.log() - 0.5 * inv + tail - shift.where(small, 0.0)
    d = _offset(x)
    reflected = psi - math.pi / (d * math.pi).tan()
    out = reflected.where(refl, psi)
    pole = _and(cx, refl, d.cmp("EQ", 0.0))     # 0, -1, -2, ...
    return _const(cx, x, _NAN).where(pole, out)


@register("chlo.digamma")
def _digamma(cx, ins):
    return _in_f32(cx, ins, lambda x: digamma(cx, x))


# ----------------------------------------------------------------- erf_inv

_ERFINV_CENTRAL = [1.50140941, 0.246640727, -0.00417768164, -0.00125372503, 0.00021858087, -4.39150654e-06,
                   -3.5233877e-06, 3.43273939e-07, 2.81022636e-08]
_ERFINV_TAIL = [2.83297682, 1.00167406, 0.00943887047, -0.0076224613, 0.00573950773, -0.00367342844,
                0.00134934322, 0.000100950558, -0.000200214257]


def erf_inv(cx, x: Ex) -> Ex:
    w = -((1 - x) * (1 + x)).log()
    central = _poly(w - 2.5, _ERFINV_CENTRAL)
    tail = _poly(w.sqrt() - 3.0, _ERFINV_TAIL)
    p = central.where(w.cmp("LT", 5.0), tail)
    return (x * _INF).where(x.abs().cmp("EQ", 1.0), p * x)


@register("chlo.erf_inv")
def _erf_inv(cx, ins):
    return _in_f32(cx, ins, lambda x: erf_inv(cx, x))


# ----------------------------------------------------------------- bessel_i1e

_I1E_SPLIT = 12.0


def _hankel_coeffs(n: int) -> list[float]:
    """c_k of I1(a) e^-a sqrt(2 pi a) = sum c_k a^-k (mu = 4 nu^2 = 4)."""
    c = [1.0]
    for k in range(1, n + 1):
        c.append(c[-1] * -(4 - (2 * k - 1) ** 2) / (8 * k))
    return c


def bessel_i1e(cx, x: Ex) -> Ex:
    a = x.abs()
    small_a = a.min(_I1E_SPLIT)                 # each branch sees arguments in its own range
    t = small_a * small_a * 0.25
    p = _const(cx, t, 1.0)
    for k in range(30, 0, -1):                  # sum t^k / (k! (k+1)!), nested so no constant underflows
        p = p * t * (1.0 / (k * (k + 1))) + 1.0
    series = (-1 * small_a).exp() * small_a * 0.5 * p
    big_a = a.max(_I1E_SPLIT)
    hankel = _poly(1 / big_a, _hankel_coeffs(10)) * (big_a * (2 * math.pi)).rsqrt()
    mag = series.where(a.cmp("LE", _I1E_SPLIT), hankel)
    return mag * x.sign()


@register("chlo.bessel_i1e")
def _bessel_i1e(cx, ins):
    return _in_f32(cx, ins, lambda x: bessel_i1e(cx, x))


# ----------------------------------------------------------------- zeta and polygamma

_BERNOULLI = [1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510]   # B2, B4, ..., B16
_DIRECT = 8


def zeta(cx, s: Ex, q: Ex) -> Ex:
    """Hurwitz zeta sum_k (q + k)^-s by Euler-Maclaurin; s must be > 1."""
    def pw(b: Ex, e: Ex) -> Ex:
        return Ex(cx, cx.add("pow", b.v, e.v))

    total = pw(q, -1 * s)
    for k in range(1, _DIRECT):
        total = total + pw(q + float(k), -1 * s)
    w = q + float(_DIRECT)
    w_s = pw(w, -1 * s)
    total = total + w * w_s / (s - 1.0) + 0.5 * w_s
    rising = s                                  # s (s+1) ... (s + 2j - 2)
    w_pow = w_s / w                             # w^-(s + 2j - 1)
    inv_w2 = 1 / (w * w)
    for j, b in enumerate(_BERNOULLI, start=1):
        total = total + rising * w_pow * (b / math.factorial(2 * j))
        rising = rising * (s + float(2 * j - 1)) * (s + float(2 * j))
        w_pow = w_pow * inv_w2
    # poles at q = 0, -1, -2, ...: inf for an even integer s, NaN otherwise (the sign of the term
    # that blows up is unknown); a negative q needs an integer s (a real power of a negative number)
    q_pole = _and(cx, q.cmp("LE", 0.0), q.cmp("EQ", q.floor()))
    s_int = s.cmp("EQ", s.floor())
    s_even = (s * 0.5).cmp("EQ", (s * 0.5).floor())
    out = _const(cx, s, _NAN).where(_and(cx, q.cmp("LT", 0.0), cx.add("not", s_int)), total)
    out = _const(cx, s, _INF).where(s_even, _NAN).where(q_pole, out)
    out = _const(cx, s, _INF).where(s.cmp("EQ", 1.0), out)
    return _const(cx, s, _NAN).where(s.cmp("LT", 1.0), out)


@register("chlo.zeta")
def _zeta(cx, ins):
    return _in_f32(cx, ins, lambda s, q: zeta(cx, s, q))


def polygamma(cx, n: Ex, x: Ex) -> Ex:
    n1 = n + 1.0
    fact = lgamma(cx, n1).exp()
    odd = (n - 2.0 * (n * 0.5).floor()).cmp("EQ", 1.0)
    sign = _const(cx, n, 1.0).where(odd, -1.0)
    higher = sign * fact * zeta(cx, n1, x)
    out = digamma(cx, x).where(n.cmp("EQ", 0.0), higher)
    valid = _and(cx, n.cmp("EQ", n.floor()), n.cmp("GE", 0.0))
    return out.where(valid, _NAN)


@register("chlo.polygamma")
def _polygamma(cx, ins):
    return _in_f32(cx, ins, lambda n, x: polygamma(cx, n, x))
