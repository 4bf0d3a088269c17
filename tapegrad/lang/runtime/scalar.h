// tapegrad runtime: scalar math and its adjoints.
// Convention for every adjoint: adj_f(args..., adj_args&..., adj_ret) accumulates
// d(out)/d(arg) * adj_ret into adj_arg; it recomputes what it needs from the inputs.
#pragma once

namespace tg {

// scalar-only templates: keeps them out of overload resolution for vec/mat arguments
template <bool B, typename T = void> struct enable_if {};
template <typename T> struct enable_if<true, T> { typedef T type; };
template <typename T> struct is_scalar { enum { value = 0 }; };
#define TG_IS_SCALAR(T) template <> struct is_scalar<T> { enum { value = 1 }; };
TG_IS_SCALAR(bool) TG_IS_SCALAR(char) TG_IS_SCALAR(signed char) TG_IS_SCALAR(short) TG_IS_SCALAR(int)
TG_IS_SCALAR(long) TG_IS_SCALAR(long long) TG_IS_SCALAR(unsigned char) TG_IS_SCALAR(unsigned short)
TG_IS_SCALAR(unsigned int) TG_IS_SCALAR(unsigned long) TG_IS_SCALAR(unsigned long long)
TG_IS_SCALAR(float) TG_IS_SCALAR(double) TG_IS_SCALAR(half) TG_IS_SCALAR(bfloat16_t)
#undef TG_IS_SCALAR
#define TG_S typename enable_if<is_scalar<T>::value, int>::type = 0

#define TG_UNARY(NAME, FF, DF)                                            \
    TG_FUNC float NAME(float x) { return FF(x); }                        \
    TG_FUNC double NAME(double x) { return DF(x); }                      \
    template <typename K> TG_FUNC f16_t<K> NAME(f16_t<K> x) { return f16_t<K>(FF(float(x))); }

TG_UNARY(sin, ::sinf, ::sin)
TG_UNARY(cos, ::cosf, ::cos)
TG_UNARY(tan, ::tanf, ::tan)
TG_UNARY(atan, ::atanf, ::atan)
TG_UNARY(sinh, ::sinhf, ::sinh)
TG_UNARY(cosh, ::coshf, ::cosh)
TG_UNARY(tanh, ::tanhf, ::tanh)
TG_UNARY(exp, ::expf, ::exp)
TG_UNARY(log, ::logf, ::log)
TG_UNARY(log2, ::log2f, ::log2)
TG_UNARY(log10, ::log10f, ::log10)
TG_UNARY(sqrt, ::sqrtf, ::sqrt)
TG_UNARY(cbrt, ::cbrtf, ::cbrt)
TG_UNARY(floor, ::floorf, ::floor)
TG_UNARY(ceil, ::ceilf, ::ceil)
TG_UNARY(round, ::roundf, ::round)
TG_UNARY(trunc, ::truncf, ::trunc)
#undef TG_UNARY

TG_FUNC float atan2(float y, float x) { return ::atan2f(y, x); }
TG_FUNC double atan2(double y, double x) { return ::atan2(y, x); }
template <typename K> TG_FUNC f16_t<K> atan2(f16_t<K> y, f16_t<K> x) { return f16_t<K>(::atan2f(float(y), float(x))); }
TG_FUNC float pow(float x, float y) { return ::powf(x, y); }
TG_FUNC double pow(double x, double y) { return ::pow(x, y); }
template <typename K> TG_FUNC f16_t<K> pow(f16_t<K> x, f16_t<K> y) { return f16_t<K>(::powf(float(x), float(y))); }
TG_FUNC float fmod_(float x, float y) { return ::fmodf(x, y); }
TG_FUNC double fmod_(double x, double y) { return ::fmod(x, y); }

// abs/sign/min/max for every scalar type
template <typename T, TG_S> TG_FUNC T abs(T x) { return x < T(0) ? T(-x) : x; }
// floats clear the sign bit: abs(-0.0) is +0.0 (as Warp, and as fabs)
TG_FUNC float abs(float x) { return ::fabsf(x); }
TG_FUNC double abs(double x) { return ::fabs(x); }
template <typename K> TG_FUNC f16_t<K> abs(f16_t<K> x) { f16_t<K> r; r.bits = uint16_t(x.bits & 0x7fffu); return r; }
template <typename T, TG_S> TG_FUNC T sign(T x) { return x < T(0) ? T(-1) : T(1); }
// min/max/clamp follow C fmin/fmax as Warp 1.19 does (its host form, bit for bit): a NaN operand is
// "missing", so the other one is returned (NaN only when both are); ties return the first operand.
// For integers this is the plain a<=b?a:b.  clamp(x, lo, hi) = fmin(fmax(lo, x), hi), so clamp(NaN,
// lo, hi) is lo and lo > hi gives hi, as Warp.
template <typename T, TG_S> TG_FUNC T min(T a, T b) { return (a < b || a == b) ? a : ((b == b) ? b : a); }
template <typename T, TG_S> TG_FUNC T max(T a, T b) { return (b < a || a == b) ? a : ((b == b) ? b : a); }
template <typename T, TG_S> TG_FUNC T clamp(T x, T lo, T hi) { return min(max(lo, x), hi); }
// asin/acos clamp their input into [-1, 1] first (Warp's documented behaviour: acos(1.0000001) is 0,
// not NaN; with fmin/fmax semantics a NaN input clamps to -1, as in Warp)
TG_FUNC float asin(float x) { return ::asinf(min(max(x, -1.0f), 1.0f)); }
TG_FUNC double asin(double x) { return ::asin(min(max(x, -1.0), 1.0)); }
template <typename K> TG_FUNC f16_t<K> asin(f16_t<K> x) { return f16_t<K>(asin(float(x))); }
TG_FUNC float acos(float x) { return ::acosf(min(max(x, -1.0f), 1.0f)); }
TG_FUNC double acos(double x) { return ::acos(min(max(x, -1.0), 1.0)); }
template <typename K> TG_FUNC f16_t<K> acos(f16_t<K> x) { return f16_t<K>(acos(float(x))); }
template <typename T> TG_FUNC T select(bool c, T a, T b) { return c ? b : a; }   // Warp's order
template <typename T> TG_FUNC T where(bool c, T a, T b) { return c ? a : b; }

#define TG_C typedef typename compute<T>::type C

// unary adjoints; d is the derivative evaluated in compute precision
#define TG_ADJ_UNARY(NAME, DERIV)                                          \
    template <typename T, TG_S> TG_FUNC void adj_##NAME(T x_, T& adj_x, T adj_ret) { \
        TG_C; C x = C(x_); C d = (DERIV); accum(adj_x, T(d * C(adj_ret)));   \
    }

TG_ADJ_UNARY(sin, cos(x))
TG_ADJ_UNARY(cos, -sin(x))
TG_ADJ_UNARY(tan, C(1) + tan(x) * tan(x))
TG_ADJ_UNARY(atan, C(1) / (C(1) + x * x))
TG_ADJ_UNARY(sinh, cosh(x))
TG_ADJ_UNARY(cosh, sinh(x))
TG_ADJ_UNARY(tanh, C(1) - tanh(x) * tanh(x))
TG_ADJ_UNARY(exp, exp(x))
TG_ADJ_UNARY(log, C(1) / x)
TG_ADJ_UNARY(log2, C(1) / (x * C(0.693147180559945309417)))
TG_ADJ_UNARY(log10, C(1) / (x * C(2.302585092994045684018)))
TG_ADJ_UNARY(sqrt, C(0.5) / sqrt(x))
TG_ADJ_UNARY(cbrt, C(1) / (C(3) * cbrt(x) * cbrt(x)))
TG_ADJ_UNARY(abs, x < C(0) ? C(-1) : C(1))
#undef TG_ADJ_UNARY

// asin/acos: no gradient where 1 - x*x is not positive (the clamped flat part, and the endpoints, where
// the derivative is infinite), as Warp: a NaN or inf there would poison every gradient it reaches
template <typename T, TG_S> TG_FUNC void adj_asin(T x_, T& adj_x, T adj_ret) {
    TG_C; C x = C(x_); C d = sqrt(C(1) - x * x);
    if (d > C(0)) accum(adj_x, T(C(adj_ret) / d));
}
template <typename T, TG_S> TG_FUNC void adj_acos(T x_, T& adj_x, T adj_ret) {
    TG_C; C x = C(x_); C d = sqrt(C(1) - x * x);
    if (d > C(0)) accum(adj_x, T(-C(adj_ret) / d));
}

template <typename T, TG_S> TG_FUNC void adj_atan2(T y_, T x_, T& adj_y, T& adj_x, T adj_ret) {
    TG_C; C y = C(y_), x = C(x_), d = x * x + y * y;
    if (!(d > C(0))) return;   // atan2 has no derivative at the origin: zero, as Warp (not NaN)
    C r = C(adj_ret) / d;
    accum(adj_y, T(x * r));
    accum(adj_x, T(-y * r));
}
template <typename T, TG_S> TG_FUNC void adj_pow(T x_, T y_, T& adj_x, T& adj_y, T adj_ret) {
    TG_C; C x = C(x_), y = C(y_), g = C(adj_ret);
    accum(adj_x, T(y * pow(x, y - C(1)) * g));
    if (x > C(0)) accum(adj_y, T(log(x) * pow(x, y) * g));
}
// the gradient goes to the operand the forward picked (the non-NaN one); a tie goes to the second
// operand, as Warp routes it (either is a subgradient)
template <typename T, TG_S> TG_FUNC void adj_min(T a, T b, T& adj_a, T& adj_b, T adj_ret) {
    if (!(a == a)) accum(adj_b, adj_ret);
    else if (!(b == b)) accum(adj_a, adj_ret);
    else if (a < b) accum(adj_a, adj_ret);
    else accum(adj_b, adj_ret);
}
template <typename T, TG_S> TG_FUNC void adj_max(T a, T b, T& adj_a, T& adj_b, T adj_ret) {
    if (!(a == a)) accum(adj_b, adj_ret);
    else if (!(b == b)) accum(adj_a, adj_ret);
    else if (b < a) accum(adj_a, adj_ret);
    else accum(adj_b, adj_ret);
}
// clamp is min(max(lo, x), hi): the chain rule through the two (x == lo goes to x, x == hi to hi)
template <typename T, TG_S> TG_FUNC void adj_clamp(T x, T lo, T hi, T& adj_x, T& adj_lo, T& adj_hi, T adj_ret) {
    T m = max(lo, x);
    T adj_m = T(0);
    adj_min(m, hi, adj_m, adj_hi, adj_ret);
    adj_max(lo, x, adj_lo, adj_x, adj_m);
}
template <typename T, typename B> TG_FUNC void adj_select(bool c, T, T, B&, T& adj_a, T& adj_b, const T& adj_ret) {
    if (c) accum(adj_b, adj_ret); else accum(adj_a, adj_ret);
}
template <typename T, typename B> TG_FUNC void adj_where(bool c, T, T, B&, T& adj_a, T& adj_b, const T& adj_ret) {
    if (c) accum(adj_a, adj_ret); else accum(adj_b, adj_ret);
}

// ---- arithmetic (scalars; vec/mat overloads live in vec.h)
template <typename T, TG_S> TG_FUNC T add(T a, T b) { return T(a + b); }
template <typename T, TG_S> TG_FUNC T sub(T a, T b) { return T(a - b); }
template <typename T, TG_S> TG_FUNC T mul(T a, T b) { return T(a * b); }
template <typename T, TG_S> TG_FUNC T neg(T a) { return T(-a); }
template <typename T, TG_S> TG_FUNC T pos(T a) { return a; }
template <typename T, TG_S> TG_FUNC T div(T a, T b) { return T(a / b); }
// integer division by zero traps on the CPU: give 0 instead of killing the process
TG_FUNC int8_t div(int8_t a, int8_t b) { return b ? int8_t(a / b) : int8_t(0); }
TG_FUNC int16_t div(int16_t a, int16_t b) { return b ? int16_t(a / b) : int16_t(0); }
// INT_MIN / -1 traps too (SIGFPE: Warp's CPU build dies on it): give the two's-complement wrap,
// INT_MIN, as INT_MIN * -1 does (int8/int16 are computed in int and do not trap)
TG_FUNC int32_t div(int32_t a, int32_t b) { return b == -1 ? int32_t(0u - uint32_t(a)) : (b ? a / b : 0); }
TG_FUNC int64_t div(int64_t a, int64_t b) { return b == -1 ? int64_t(0ull - uint64_t(a)) : (b ? a / b : 0); }
TG_FUNC uint8_t div(uint8_t a, uint8_t b) { return b ? uint8_t(a / b) : uint8_t(0); }
TG_FUNC uint16_t div(uint16_t a, uint16_t b) { return b ? uint16_t(a / b) : uint16_t(0); }
TG_FUNC uint32_t div(uint32_t a, uint32_t b) { return b ? a / b : 0u; }
TG_FUNC uint64_t div(uint64_t a, uint64_t b) { return b ? a / b : 0ull; }

// % : C semantics (sign of the dividend), as in Warp
// (x % -1 is 0; computed as such, since INT_MIN % -1 traps like INT_MIN / -1)
template <typename T, TG_S> TG_FUNC T mod(T a, T b) { return (b && !(T(-1) < T(0) && b == T(-1))) ? T(a % b) : T(0); }
TG_FUNC float mod(float a, float b) { return fmod_(a, b); }
TG_FUNC double mod(double a, double b) { return fmod_(a, b); }
template <typename K> TG_FUNC f16_t<K> mod(f16_t<K> a, f16_t<K> b) { return f16_t<K>(fmod_(float(a), float(b))); }
// // : Python floor semantics
template <typename T, TG_S> TG_FUNC T floordiv(T a, T b) {
    if (!b) return T(0);
    if (T(-1) < T(0) && b == T(-1)) return T(0ull - (unsigned long long)(a));   // wraps, never traps
    T q = T(a / b);
    if ((a % b != 0) && ((a < 0) != (b < 0))) q = T(q - 1);
    return q;
}
TG_FUNC float floordiv(float a, float b) { return ::floorf(a / b); }
TG_FUNC double floordiv(double a, double b) { return ::floor(a / b); }
template <typename K> TG_FUNC f16_t<K> floordiv(f16_t<K> a, f16_t<K> b) { return f16_t<K>(::floorf(float(a) / float(b))); }

template <typename T, TG_S> TG_FUNC void adj_add(T, T, T& adj_a, T& adj_b, T adj_ret) {
    accum(adj_a, adj_ret); accum(adj_b, adj_ret);
}
template <typename T, TG_S> TG_FUNC void adj_sub(T, T, T& adj_a, T& adj_b, T adj_ret) {
    accum(adj_a, adj_ret); accum(adj_b, T(-adj_ret));
}
template <typename T, TG_S> TG_FUNC void adj_mul(T a, T b, T& adj_a, T& adj_b, T adj_ret) {
    accum(adj_a, T(b * adj_ret)); accum(adj_b, T(a * adj_ret));
}
template <typename T, TG_S> TG_FUNC void adj_neg(T, T& adj_a, T adj_ret) { accum(adj_a, T(-adj_ret)); }
template <typename T, TG_S> TG_FUNC void adj_pos(T, T& adj_a, T adj_ret) { accum(adj_a, adj_ret); }
template <typename T, TG_S> TG_FUNC void adj_div(T a_, T b_, T& adj_a, T& adj_b, T adj_ret) {
    TG_C; C a = C(a_), b = C(b_), g = C(adj_ret);
    accum(adj_a, T(g / b));
    accum(adj_b, T(-g * a / (b * b)));
}
template <typename T, TG_S> TG_FUNC void adj_mod(T a_, T b_, T& adj_a, T& adj_b, T adj_ret) {
    TG_C; C a = C(a_), b = C(b_), g = C(adj_ret);
    accum(adj_a, adj_ret);
    C q = a / b;
    q = q < C(0) ? C(-floor(-q)) : C(floor(q));
    accum(adj_b, T(-q * g));
}

// ---- casts
template <typename T, typename U> TG_FUNC T cast(U x) { return T(x); }
template <typename T, typename U> TG_FUNC void adj_cast(U, U& adj_x, T adj_ret) {
    accum(adj_x, U(typename compute<T>::type(adj_ret)));
}
#undef TG_C
#undef TG_S

}  // namespace tg
