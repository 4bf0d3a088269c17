// tapegrad runtime: dual overloads of linalg.h's svd and eig (issue 26). Inlined after linalg.h
// and dual.h into units that use both (emit.py). The values come from the plain decomposition;
// the tangents from the perturbation formulas (P = U^T dA V, resp. Q^T dS Q):
//   svd: ds_i = P_ii; dU = U Wu, dV = V Wv with, for i != j,
//        Wu_ij = (s_j P_ij + s_i P_ji) / (s_j^2 - s_i^2), Wv_ij = (s_i P_ij + s_j P_ji) / (s_j^2 - s_i^2)
//   eig: dd_i = P_ii; dQ = Q W with W_ij = P_ij / (d_j - d_i)
// (1 / x regularized as in linalg.h's adjoints, which these tangents are the transposes of).
#pragma once

namespace tg {

template <typename T> struct la_prec<dual<T> > : la_prec<T> {};

template <int N, typename T> TG_FUNC void la_split(const mat_t<N, N, dual<T> >& a, mat_t<N, N, T>& v,
                                                   mat_t<N, N, T>& t) {
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) { v.data[i][j] = a.data[i][j].v; t.data[i][j] = a.data[i][j].t; }
}
template <int N, typename T> TG_FUNC mat_t<N, N, dual<T> > la_join(const mat_t<N, N, T>& v, const mat_t<N, N, T>& t) {
    mat_t<N, N, dual<T> > r;
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) r.data[i][j] = dual<T>(v.data[i][j], t.data[i][j]);
    return r;
}

template <int N, typename T> TG_FUNC void la_svd_core(const mat_t<N, N, dual<T> >& a, mat_t<N, N, dual<T> >& u,
                                                      vec_t<N, dual<T> >& s, mat_t<N, N, dual<T> >& v) {
    mat_t<N, N, T> av, at, uv, vv;
    vec_t<N, T> sv;
    la_split(a, av, at);
    la_svd_core(av, uv, sv, vv);
    mat_t<N, N, T> P = la_mm(la_tm(uv, at), vv), Wu, Wv;
    T scale = T(0);
    for (int i = 0; i < N; ++i) if (la_abs(sv.c[i]) > scale) scale = la_abs(sv.c[i]);
    T delta = la_delta(scale);
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) {
        if (i == j) continue;
        T sym = T(0.5) * (P.data[i][j] + P.data[j][i]), asym = T(0.5) * (P.data[i][j] - P.data[j][i]);
        T dif = la_inv(sv.c[j] - sv.c[i], delta), sum = la_inv(sv.c[j] + sv.c[i], delta);
        Wu.data[i][j] = sym * dif + asym * sum;
        Wv.data[i][j] = sym * dif - asym * sum;
    }
    u = la_join(uv, la_mm(uv, Wu));
    v = la_join(vv, la_mm(vv, Wv));
    for (int i = 0; i < N; ++i) s.c[i] = dual<T>(sv.c[i], P.data[i][i]);
}

template <int N, typename T> TG_FUNC void la_eig_core(const mat_t<N, N, dual<T> >& a, mat_t<N, N, dual<T> >& q,
                                                      vec_t<N, dual<T> >& d) {
    mat_t<N, N, T> av, at, qv, st, W;
    vec_t<N, T> dv;
    la_split(a, av, at);
    la_eig_core(av, qv, dv);
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) st.data[i][j] = T(0.5) * (at.data[i][j] + at.data[j][i]);
    mat_t<N, N, T> P = la_mm(la_tm(qv, st), qv);
    T scale = T(0);
    for (int i = 0; i < N; ++i) if (la_abs(dv.c[i]) > scale) scale = la_abs(dv.c[i]);
    T delta = la_delta(scale);
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j)
        if (i != j) W.data[i][j] = P.data[i][j] * la_inv(dv.c[j] - dv.c[i], delta);
    q = la_join(qv, la_mm(qv, W));
    for (int i = 0; i < N; ++i) d.c[i] = dual<T>(dv.c[i], P.data[i][i]);
}

}  // namespace tg
