// tapegrad runtime: Warp's small matrix decompositions (lang/builtins_linalg.py): svd3, svd2,
// qr3, eig3, each result a function of the input matrix (la_svd_U, la_svd_s, la_svd_V, ...) with
// an analytic adjoint. Inlined only into units that name tg::la_ (emit.py's optional headers).
//
// The decompositions compute in compute<T> precision (float for half):
//   eig:  cyclic Jacobi rotations on sym(A) = (A + A^T) / 2, eigenvalues ascending, Q a rotation;
//   qr:   Givens rotations (Q a rotation, R's diagonal >= 0 but the last, as Warp's);
//   svd:  Jacobi on A^T A gives V, Givens QR of A V gives U and the singular values (sorted by
//         magnitude, descending). Signs as Warp's: svd3's U and V are rotations and the last
//         singular value carries the sign of det(A); svd2's singular values are >= 0 and V is a
//         rotation. Each of U's first N-1 columns has its component of largest magnitude >= 0.
// Adjoints (the standard formulas; Townsend 2016 for the SVD) couple two singular values or
// eigenvalues through 1 / (s_j - s_i), regularized as x / (x^2 + delta^2) with delta a few ulps
// of the largest magnitude, so (near-)equal values give large but finite gradients and exactly
// equal ones none through that pair (the decomposition is not differentiable there).
// Dual numbers: linalgd.h gives the tangents of svd and eig analytically (Jacobi's iterations
// are not differentiated); qr's Givens steps are exact with duals as they are.
#pragma once

namespace tg {

template <typename C> struct la_prec { static TG_FUNC double eps() { return 2.220446049250313e-16; } };
template <> struct la_prec<float> { static TG_FUNC double eps() { return 1.1920928955078125e-7; } };

template <typename C> TG_FUNC C la_abs(C x) { return x < C(0) ? C(-x) : x; }
// 1 / x regularized at 0 (see above)
template <typename C> TG_FUNC C la_inv(C x, C delta) { return x / (x * x + delta * delta); }

template <typename C, int R, int K, typename T> TG_FUNC mat_t<R, K, C> la_cvt(const mat_t<R, K, T>& m) {
    mat_t<R, K, C> r;
    for (int i = 0; i < R; ++i) for (int j = 0; j < K; ++j) r.data[i][j] = C(m.data[i][j]);
    return r;
}
template <typename C, int N, typename T> TG_FUNC vec_t<N, C> la_cvt(const vec_t<N, T>& v) {
    vec_t<N, C> r;
    for (int i = 0; i < N; ++i) r.c[i] = C(v.c[i]);
    return r;
}
// a b, a^T b, a b^T of square matrices
template <int N, typename C> TG_FUNC mat_t<N, N, C> la_mm(const mat_t<N, N, C>& a, const mat_t<N, N, C>& b) {
    mat_t<N, N, C> r;
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) {
        C s = C(0);
        for (int k = 0; k < N; ++k) s = s + a.data[i][k] * b.data[k][j];
        r.data[i][j] = s;
    }
    return r;
}
template <int N, typename C> TG_FUNC mat_t<N, N, C> la_tm(const mat_t<N, N, C>& a, const mat_t<N, N, C>& b) {
    mat_t<N, N, C> r;
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) {
        C s = C(0);
        for (int k = 0; k < N; ++k) s = s + a.data[k][i] * b.data[k][j];
        r.data[i][j] = s;
    }
    return r;
}
template <int N, typename C> TG_FUNC mat_t<N, N, C> la_mt(const mat_t<N, N, C>& a, const mat_t<N, N, C>& b) {
    mat_t<N, N, C> r;
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) {
        C s = C(0);
        for (int k = 0; k < N; ++k) s = s + a.data[i][k] * b.data[j][k];
        r.data[i][j] = s;
    }
    return r;
}
template <typename C> TG_FUNC C la_det(const mat_t<2, 2, C>& m) {
    return m.data[0][0] * m.data[1][1] - m.data[0][1] * m.data[1][0];
}
template <typename C> TG_FUNC C la_det(const mat_t<3, 3, C>& m) {
    return m.data[0][0] * (m.data[1][1] * m.data[2][2] - m.data[1][2] * m.data[2][1])
         - m.data[0][1] * (m.data[1][0] * m.data[2][2] - m.data[1][2] * m.data[2][0])
         + m.data[0][2] * (m.data[1][0] * m.data[2][1] - m.data[1][1] * m.data[2][0]);
}
template <int N, typename C> TG_FUNC void la_negcol(mat_t<N, N, C>& m, int j) {
    for (int i = 0; i < N; ++i) m.data[i][j] = -m.data[i][j];
}
template <int N, typename C> TG_FUNC void la_swapcol(mat_t<N, N, C>& m, int a, int b) {
    for (int i = 0; i < N; ++i) { C t = m.data[i][a]; m.data[i][a] = m.data[i][b]; m.data[i][b] = t; }
}
// the component of column j of largest magnitude (the first of equal ones)
template <int N, typename C> TG_FUNC C la_lead(const mat_t<N, N, C>& m, int j) {
    C best = m.data[0][j];
    for (int i = 1; i < N; ++i) if (la_abs(m.data[i][j]) > la_abs(best)) best = m.data[i][j];
    return best;
}
// delta of la_inv for values of largest magnitude `scale`
template <typename C> TG_FUNC C la_delta(C scale) {
    C d = C(8.0 * la_prec<C>::eps()) * scale;
    return d > C(1e-30) ? d : C(1e-30);
}

// Cyclic Jacobi on a symmetric a: a becomes diagonal (the eigenvalues), v the rotation whose
// columns are the eigenvectors (a_in = v a_out v^T).
template <int N, typename C> TG_FUNC void la_jacobi(mat_t<N, N, C>& a, mat_t<N, N, C>& v) {
    v = identity<N, C>();
    C tol = C(la_prec<C>::eps() * la_prec<C>::eps());
    for (int sweep = 0; sweep < 20; ++sweep) {
        C off = C(0), tot = C(0);
        for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) {
            C x = a.data[i][j] * a.data[i][j];
            tot = tot + x;
            if (i != j) off = off + x;
        }
        if (!(off > tol * tot)) break;   // converged (or all zero, or NaN)
        for (int p = 0; p < N - 1; ++p) for (int q = p + 1; q < N; ++q) {
            C apq = a.data[p][q];
            if (apq == C(0)) continue;
            // the rotation zeroing a_pq: t = tan(theta), the smaller root of t^2 + 2 tau t - 1 = 0
            C tau = (a.data[q][q] - a.data[p][p]) / (C(2) * apq);
            C t = C(1) / (la_abs(tau) + sqrt(C(1) + tau * tau));
            if (tau < C(0)) t = -t;
            C c = C(1) / sqrt(C(1) + t * t), s = t * c;
            for (int k = 0; k < N; ++k) {
                C x = a.data[k][p], y = a.data[k][q];
                a.data[k][p] = c * x - s * y; a.data[k][q] = s * x + c * y;
            }
            for (int k = 0; k < N; ++k) {
                C x = a.data[p][k], y = a.data[q][k];
                a.data[p][k] = c * x - s * y; a.data[q][k] = s * x + c * y;
            }
            for (int k = 0; k < N; ++k) {
                C x = v.data[k][p], y = v.data[k][q];
                v.data[k][p] = c * x - s * y; v.data[k][q] = s * x + c * y;
            }
            a.data[p][q] = C(0); a.data[q][p] = C(0);
        }
    }
}

// QR by Givens rotations: a = q r, q a rotation, r upper triangular with r_jj >= 0 for j < N-1
template <int N, typename C> TG_FUNC void la_qr_core(const mat_t<N, N, C>& a, mat_t<N, N, C>& q, mat_t<N, N, C>& r) {
    q = identity<N, C>();
    r = a;
    for (int j = 0; j < N - 1; ++j) for (int i = j + 1; i < N; ++i) {
        C x = r.data[j][j], y = r.data[i][j];
        C m = la_abs(x) > la_abs(y) ? la_abs(x) : la_abs(y);
        if (!(m > C(0))) continue;
        C xs = x / m, ys = y / m, h = sqrt(xs * xs + ys * ys);
        C c = xs / h, s = ys / h;
        for (int k = 0; k < N; ++k) {
            C u = r.data[j][k], w = r.data[i][k];
            r.data[j][k] = c * u + s * w; r.data[i][k] = c * w - s * u;
        }
        r.data[i][j] = C(0);
        for (int k = 0; k < N; ++k) {
            C u = q.data[k][j], w = q.data[k][i];
            q.data[k][j] = c * u + s * w; q.data[k][i] = c * w - s * u;
        }
    }
}

// eigen-decomposition of sym(a): sym(a) = q diag(d) q^T, d ascending, q a rotation
template <int N, typename C> TG_FUNC void la_eig_core(const mat_t<N, N, C>& a, mat_t<N, N, C>& q, vec_t<N, C>& d) {
    mat_t<N, N, C> s;
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) s.data[i][j] = C(0.5) * (a.data[i][j] + a.data[j][i]);
    la_jacobi(s, q);
    for (int i = 0; i < N; ++i) d.c[i] = s.data[i][i];
    for (int i = 0; i < N - 1; ++i) {
        int m = i;
        for (int j = i + 1; j < N; ++j) if (d.c[j] < d.c[m]) m = j;
        if (m != i) { C t = d.c[i]; d.c[i] = d.c[m]; d.c[m] = t; la_swapcol(q, i, m); }
    }
    for (int j = 0; j < N - 1; ++j) if (la_lead(q, j) < C(0)) la_negcol(q, j);
    if (la_det(q) < C(0)) la_negcol(q, N - 1);
}

// a = u diag(s) v^T with Warp's signs (see the top of the file)
template <int N, typename C> TG_FUNC void la_svd_core(const mat_t<N, N, C>& a, mat_t<N, N, C>& u, vec_t<N, C>& s,
                                                      mat_t<N, N, C>& v) {
    mat_t<N, N, C> b = la_tm(a, a);
    la_jacobi(b, v);
    vec_t<N, C> lam;
    for (int i = 0; i < N; ++i) lam.c[i] = b.data[i][i];
    for (int i = 0; i < N - 1; ++i) {
        int m = i;
        for (int j = i + 1; j < N; ++j) if (lam.c[j] > lam.c[m]) m = j;
        if (m != i) { C t = lam.c[i]; lam.c[i] = lam.c[m]; lam.c[m] = t; la_swapcol(v, i, m); }
    }
    mat_t<N, N, C> r;
    la_qr_core(la_mm(a, v), u, r);   // a v = u r, r diagonal up to rounding
    for (int i = 0; i < N; ++i) s.c[i] = r.data[i][i];
    for (int j = 0; j < N - 1; ++j) if (la_lead(u, j) < C(0)) { la_negcol(u, j); la_negcol(v, j); }
    if (N == 2) {
        if (s.c[1] < C(0)) { s.c[1] = -s.c[1]; la_negcol(u, 1); }
        if (la_det(v) < C(0)) { la_negcol(v, 1); la_negcol(u, 1); }
    } else {
        if (la_det(u) < C(0)) { la_negcol(u, N - 1); s.c[N - 1] = -s.c[N - 1]; }
        if (la_det(v) < C(0)) { la_negcol(v, N - 1); s.c[N - 1] = -s.c[N - 1]; }
    }
}

// ---- results (T: the matrix's scalar type)
#define TG_LA_C typedef typename compute<T>::type C
template <int N, typename T> TG_FUNC mat_t<N, N, T> la_svd_U(const mat_t<N, N, T>& a) {
    TG_LA_C; mat_t<N, N, C> u, v; vec_t<N, C> s; la_svd_core(la_cvt<C>(a), u, s, v); return la_cvt<T>(u);
}
template <int N, typename T> TG_FUNC vec_t<N, T> la_svd_s(const mat_t<N, N, T>& a) {
    TG_LA_C; mat_t<N, N, C> u, v; vec_t<N, C> s; la_svd_core(la_cvt<C>(a), u, s, v); return la_cvt<T>(s);
}
template <int N, typename T> TG_FUNC mat_t<N, N, T> la_svd_V(const mat_t<N, N, T>& a) {
    TG_LA_C; mat_t<N, N, C> u, v; vec_t<N, C> s; la_svd_core(la_cvt<C>(a), u, s, v); return la_cvt<T>(v);
}
template <int N, typename T> TG_FUNC mat_t<N, N, T> la_qr_Q(const mat_t<N, N, T>& a) {
    TG_LA_C; mat_t<N, N, C> q, r; la_qr_core(la_cvt<C>(a), q, r); return la_cvt<T>(q);
}
template <int N, typename T> TG_FUNC mat_t<N, N, T> la_qr_R(const mat_t<N, N, T>& a) {
    TG_LA_C; mat_t<N, N, C> q, r; la_qr_core(la_cvt<C>(a), q, r); return la_cvt<T>(r);
}
template <int N, typename T> TG_FUNC mat_t<N, N, T> la_eig_Q(const mat_t<N, N, T>& a) {
    TG_LA_C; mat_t<N, N, C> q; vec_t<N, C> d; la_eig_core(la_cvt<C>(a), q, d); return la_cvt<T>(q);
}
template <int N, typename T> TG_FUNC vec_t<N, T> la_eig_d(const mat_t<N, N, T>& a) {
    TG_LA_C; mat_t<N, N, C> q; vec_t<N, C> d; la_eig_core(la_cvt<C>(a), q, d); return la_cvt<T>(d);
}

// ---- adjoints: the gradient of A from the gradients of the results (zero ones left out)
template <int N, typename T, typename C> TG_FUNC void la_accum(mat_t<N, N, T>& adj, const mat_t<N, N, C>& g) {
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) accum(adj.data[i][j], T(g.data[i][j]));
}

// A = U diag(s) V^T: adj_A = U X V^T, X_ii = gs_i and, for i != j, with a = J_ij - J_ji (J = U^T gU)
// and b = K_ij - K_ji (K = V^T gV): X_ij = (a s_j + b s_i) / (s_j^2 - s_i^2)
//                                        = (a + b) / 2 / (s_j - s_i) + (a - b) / 2 / (s_j + s_i)
// (the second form keeps what stays finite when two singular values are equal)
template <int N, typename C> TG_FUNC mat_t<N, N, C> la_svd_grad(const mat_t<N, N, C>& u, const vec_t<N, C>& s,
        const mat_t<N, N, C>& v, const mat_t<N, N, C>& gu, const vec_t<N, C>& gs, const mat_t<N, N, C>& gv) {
    mat_t<N, N, C> J = la_tm(u, gu), K = la_tm(v, gv), X;
    C scale = C(0);
    for (int i = 0; i < N; ++i) if (la_abs(s.c[i]) > scale) scale = la_abs(s.c[i]);
    C delta = la_delta(scale);
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) {
        if (i == j) { X.data[i][i] = gs.c[i]; continue; }
        C a = J.data[i][j] - J.data[j][i], b = K.data[i][j] - K.data[j][i];
        X.data[i][j] = C(0.5) * (a + b) * la_inv(s.c[j] - s.c[i], delta)
                     + C(0.5) * (a - b) * la_inv(s.c[j] + s.c[i], delta);
    }
    return la_mt(la_mm(u, X), v);
}
template <int N, typename T> TG_FUNC void adj_la_svd_U(const mat_t<N, N, T>& a, mat_t<N, N, T>& adj_a,
                                                       const mat_t<N, N, T>& g) {
    TG_LA_C; mat_t<N, N, C> u, v; vec_t<N, C> s; la_svd_core(la_cvt<C>(a), u, s, v);
    la_accum(adj_a, la_svd_grad(u, s, v, la_cvt<C>(g), vec_t<N, C>(), mat_t<N, N, C>()));
}
template <int N, typename T> TG_FUNC void adj_la_svd_s(const mat_t<N, N, T>& a, mat_t<N, N, T>& adj_a,
                                                       const vec_t<N, T>& g) {
    TG_LA_C; mat_t<N, N, C> u, v; vec_t<N, C> s; la_svd_core(la_cvt<C>(a), u, s, v);
    la_accum(adj_a, la_svd_grad(u, s, v, mat_t<N, N, C>(), la_cvt<C>(g), mat_t<N, N, C>()));
}
template <int N, typename T> TG_FUNC void adj_la_svd_V(const mat_t<N, N, T>& a, mat_t<N, N, T>& adj_a,
                                                       const mat_t<N, N, T>& g) {
    TG_LA_C; mat_t<N, N, C> u, v; vec_t<N, C> s; la_svd_core(la_cvt<C>(a), u, s, v);
    la_accum(adj_a, la_svd_grad(u, s, v, mat_t<N, N, C>(), vec_t<N, C>(), la_cvt<C>(g)));
}

// A = Q R: adj_A = Q H R^-T with H = gR R^T + strictly_lower(G - G^T), G = Q^T gQ - gR R^T
template <int N, typename C> TG_FUNC mat_t<N, N, C> la_qr_grad(const mat_t<N, N, C>& q, const mat_t<N, N, C>& r,
                                                               const mat_t<N, N, C>& gq, const mat_t<N, N, C>& gr) {
    mat_t<N, N, C> rr = la_mt(gr, r), G = la_tm(q, gq), H = rr;
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) G.data[i][j] = G.data[i][j] - rr.data[i][j];
    for (int i = 1; i < N; ++i) for (int j = 0; j < i; ++j) H.data[i][j] = H.data[i][j] + G.data[i][j] - G.data[j][i];
    C scale = C(0);
    for (int i = 0; i < N; ++i) if (la_abs(r.data[i][i]) > scale) scale = la_abs(r.data[i][i]);
    C delta = la_delta(scale);
    // Y = H R^-T: each row y of Y solves R y^T = h^T (back substitution)
    mat_t<N, N, C> Y;
    for (int row = 0; row < N; ++row) for (int k = N - 1; k >= 0; --k) {
        C acc = H.data[row][k];
        for (int m = k + 1; m < N; ++m) acc = acc - r.data[k][m] * Y.data[row][m];
        Y.data[row][k] = acc * la_inv(r.data[k][k], delta);
    }
    return la_mm(q, Y);
}
template <int N, typename T> TG_FUNC void adj_la_qr_Q(const mat_t<N, N, T>& a, mat_t<N, N, T>& adj_a,
                                                      const mat_t<N, N, T>& g) {
    TG_LA_C; mat_t<N, N, C> q, r; la_qr_core(la_cvt<C>(a), q, r);
    la_accum(adj_a, la_qr_grad(q, r, la_cvt<C>(g), mat_t<N, N, C>()));
}
template <int N, typename T> TG_FUNC void adj_la_qr_R(const mat_t<N, N, T>& a, mat_t<N, N, T>& adj_a,
                                                      const mat_t<N, N, T>& g) {
    TG_LA_C; mat_t<N, N, C> q, r; la_qr_core(la_cvt<C>(a), q, r);
    la_accum(adj_a, la_qr_grad(q, r, mat_t<N, N, C>(), la_cvt<C>(g)));
}

// sym(A) = Q diag(d) Q^T: adj_A = sym(Q X Q^T), X_ii = gd_i, X_ij = J_ij / (d_j - d_i) (J = Q^T gQ)
template <int N, typename C> TG_FUNC mat_t<N, N, C> la_eig_grad(const mat_t<N, N, C>& q, const vec_t<N, C>& d,
                                                                const mat_t<N, N, C>& gq, const vec_t<N, C>& gd) {
    mat_t<N, N, C> J = la_tm(q, gq), X;
    C scale = C(0);
    for (int i = 0; i < N; ++i) if (la_abs(d.c[i]) > scale) scale = la_abs(d.c[i]);
    C delta = la_delta(scale);
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j)
        X.data[i][j] = i == j ? gd.c[i] : J.data[i][j] * la_inv(d.c[j] - d.c[i], delta);
    mat_t<N, N, C> g = la_mt(la_mm(q, X), q), out;
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) out.data[i][j] = C(0.5) * (g.data[i][j] + g.data[j][i]);
    return out;
}
template <int N, typename T> TG_FUNC void adj_la_eig_Q(const mat_t<N, N, T>& a, mat_t<N, N, T>& adj_a,
                                                       const mat_t<N, N, T>& g) {
    TG_LA_C; mat_t<N, N, C> q; vec_t<N, C> d; la_eig_core(la_cvt<C>(a), q, d);
    la_accum(adj_a, la_eig_grad(q, d, la_cvt<C>(g), vec_t<N, C>()));
}
template <int N, typename T> TG_FUNC void adj_la_eig_d(const mat_t<N, N, T>& a, mat_t<N, N, T>& adj_a,
                                                       const vec_t<N, T>& g) {
    TG_LA_C; mat_t<N, N, C> q; vec_t<N, C> d; la_eig_core(la_cvt<C>(a), q, d);
    la_accum(adj_a, la_eig_grad(q, d, mat_t<N, N, C>(), la_cvt<C>(g)));
}
#undef TG_LA_C

}  // namespace tg
