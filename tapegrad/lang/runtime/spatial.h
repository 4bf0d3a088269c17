// tapegrad runtime: rigid transforms (vec_t<7,T>: position xyz, then rotation quaternion xyzw)
// and spatial vectors/matrices (vec_t<6,T>: top = angular, bottom = linear; mat_t<6,6,T>), as
// Warp's transform_* and spatial_* builtins. Inlined only into units that call a tg::sp_ name.
// Convention as elsewhere: adj_f(args..., adj_args&..., adj_ret) accumulates.
#pragma once

namespace tg {

template <typename T> TG_FUNC vec_t<3, T> sp_pos(const vec_t<7, T>& t) { return make_vec<3, T>(t.c[0], t.c[1], t.c[2]); }
template <typename T> TG_FUNC vec_t<4, T> sp_rot(const vec_t<7, T>& t) { return make_vec<4, T>(t.c[3], t.c[4], t.c[5], t.c[6]); }
template <typename T> TG_FUNC void sp_add_pos(vec_t<7, T>& at, const vec_t<3, T>& g) { for (int i = 0; i < 3; ++i) at.c[i] += g.c[i]; }
template <typename T> TG_FUNC void sp_add_rot(vec_t<7, T>& at, const vec_t<4, T>& g) { for (int i = 0; i < 4; ++i) at.c[3 + i] += g.c[i]; }

template <typename T> TG_FUNC vec_t<7, T> sp_transform(const vec_t<3, T>& p, const vec_t<4, T>& q) {
    return make_vec<7, T>(p.c[0], p.c[1], p.c[2], q.c[0], q.c[1], q.c[2], q.c[3]);
}
template <typename T> TG_FUNC void adj_sp_transform(const vec_t<3, T>&, const vec_t<4, T>&, vec_t<3, T>& ap, vec_t<4, T>& aq, const vec_t<7, T>& g) {
    ap += sp_pos(g); aq += sp_rot(g);
}
template <typename T> TG_FUNC vec_t<7, T> sp_transform_identity() { return make_vec<7, T>(0, 0, 0, 0, 0, 0, 1); }

template <typename T> TG_FUNC vec_t<3, T> sp_get_translation(const vec_t<7, T>& t) { return sp_pos(t); }
template <typename T> TG_FUNC void adj_sp_get_translation(const vec_t<7, T>&, vec_t<7, T>& at, const vec_t<3, T>& g) { sp_add_pos(at, g); }
template <typename T> TG_FUNC vec_t<4, T> sp_get_rotation(const vec_t<7, T>& t) { return sp_rot(t); }
template <typename T> TG_FUNC void adj_sp_get_rotation(const vec_t<7, T>&, vec_t<7, T>& at, const vec_t<4, T>& g) { sp_add_rot(at, g); }
// t with its translation / rotation replaced (Warp's transform_set_translation / _rotation write t)
template <typename T> TG_FUNC vec_t<7, T> sp_with_translation(const vec_t<7, T>& t, const vec_t<3, T>& p) {
    vec_t<7, T> r = t; for (int i = 0; i < 3; ++i) r.c[i] = p.c[i]; return r;
}
template <typename T> TG_FUNC void adj_sp_with_translation(const vec_t<7, T>&, const vec_t<3, T>&, vec_t<7, T>& at, vec_t<3, T>& ap, const vec_t<7, T>& g) {
    for (int i = 0; i < 3; ++i) ap.c[i] += g.c[i];
    for (int i = 3; i < 7; ++i) at.c[i] += g.c[i];
}
template <typename T> TG_FUNC vec_t<7, T> sp_with_rotation(const vec_t<7, T>& t, const vec_t<4, T>& q) {
    vec_t<7, T> r = t; for (int i = 0; i < 4; ++i) r.c[3 + i] = q.c[i]; return r;
}
template <typename T> TG_FUNC void adj_sp_with_rotation(const vec_t<7, T>&, const vec_t<4, T>&, vec_t<7, T>& at, vec_t<4, T>& aq, const vec_t<7, T>& g) {
    for (int i = 0; i < 3; ++i) at.c[i] += g.c[i];
    for (int i = 0; i < 4; ++i) aq.c[i] += g.c[3 + i];
}

// x' = rotate(q, x) + p (a point); rotate(q, x) (a direction)
template <typename T> TG_FUNC vec_t<3, T> sp_transform_point(const vec_t<7, T>& t, const vec_t<3, T>& x) {
    return quat_rotate(sp_rot(t), x) + sp_pos(t);
}
template <typename T> TG_FUNC void adj_sp_transform_point(const vec_t<7, T>& t, const vec_t<3, T>& x, vec_t<7, T>& at, vec_t<3, T>& ax, const vec_t<3, T>& g) {
    vec_t<4, T> aq; adj_quat_rotate(sp_rot(t), x, aq, ax, g); sp_add_rot(at, aq); sp_add_pos(at, g);
}
template <typename T> TG_FUNC vec_t<3, T> sp_transform_vector(const vec_t<7, T>& t, const vec_t<3, T>& x) { return quat_rotate(sp_rot(t), x); }
template <typename T> TG_FUNC void adj_sp_transform_vector(const vec_t<7, T>& t, const vec_t<3, T>& x, vec_t<7, T>& at, vec_t<3, T>& ax, const vec_t<3, T>& g) {
    vec_t<4, T> aq; adj_quat_rotate(sp_rot(t), x, aq, ax, g); sp_add_rot(at, aq);
}

// a * b = (rotate(qa, pb) + pa, qa * qb)
template <typename T> TG_FUNC vec_t<7, T> sp_transform_multiply(const vec_t<7, T>& a, const vec_t<7, T>& b) {
    return sp_transform(quat_rotate(sp_rot(a), sp_pos(b)) + sp_pos(a), quat_mul(sp_rot(a), sp_rot(b)));
}
template <typename T> TG_FUNC void adj_sp_transform_multiply(const vec_t<7, T>& a, const vec_t<7, T>& b, vec_t<7, T>& aa, vec_t<7, T>& ab, const vec_t<7, T>& g) {
    vec_t<4, T> aqa, aqb; vec_t<3, T> apb;
    adj_quat_rotate(sp_rot(a), sp_pos(b), aqa, apb, sp_pos(g));
    adj_quat_mul(sp_rot(a), sp_rot(b), aqa, aqb, sp_rot(g));
    sp_add_pos(aa, sp_pos(g)); sp_add_rot(aa, aqa); sp_add_pos(ab, apb); sp_add_rot(ab, aqb);
}

// inverse(t) = (-rotate(conj(q), p), conj(q))
template <typename T> TG_FUNC vec_t<7, T> sp_transform_inverse(const vec_t<7, T>& t) {
    vec_t<4, T> qi = quat_conj(sp_rot(t));
    return sp_transform(-quat_rotate(qi, sp_pos(t)), qi);
}
template <typename T> TG_FUNC void adj_sp_transform_inverse(const vec_t<7, T>& t, vec_t<7, T>& at, const vec_t<7, T>& g) {
    vec_t<4, T> qi = quat_conj(sp_rot(t)), aqi; vec_t<3, T> ap;
    adj_quat_rotate(qi, sp_pos(t), aqi, ap, -sp_pos(g));
    aqi += sp_rot(g);
    sp_add_pos(at, ap); sp_add_rot(at, quat_conj(aqi));
}

// ---- spatial vectors (top: angular w, bottom: linear v)
template <typename T> TG_FUNC vec_t<3, T> sp_top(const vec_t<6, T>& a) { return make_vec<3, T>(a.c[0], a.c[1], a.c[2]); }
template <typename T> TG_FUNC vec_t<3, T> sp_bottom(const vec_t<6, T>& a) { return make_vec<3, T>(a.c[3], a.c[4], a.c[5]); }
template <typename T> TG_FUNC void adj_sp_top(const vec_t<6, T>&, vec_t<6, T>& aa, const vec_t<3, T>& g) { for (int i = 0; i < 3; ++i) aa.c[i] += g.c[i]; }
template <typename T> TG_FUNC void adj_sp_bottom(const vec_t<6, T>&, vec_t<6, T>& aa, const vec_t<3, T>& g) { for (int i = 0; i < 3; ++i) aa.c[3 + i] += g.c[i]; }
template <typename T> TG_FUNC vec_t<6, T> sp_vector(const vec_t<3, T>& w, const vec_t<3, T>& v) {
    return make_vec<6, T>(w.c[0], w.c[1], w.c[2], v.c[0], v.c[1], v.c[2]);
}
template <typename T> TG_FUNC void adj_sp_vector(const vec_t<3, T>&, const vec_t<3, T>&, vec_t<3, T>& aw, vec_t<3, T>& av, const vec_t<6, T>& g) {
    aw += sp_top(g); av += sp_bottom(g);
}
template <typename T> TG_FUNC T sp_dot(const vec_t<6, T>& a, const vec_t<6, T>& b) { return dot(a, b); }
template <typename T> TG_FUNC void adj_sp_dot(const vec_t<6, T>& a, const vec_t<6, T>& b, vec_t<6, T>& aa, vec_t<6, T>& ab, const T& g) {
    aa += scale(b, g); ab += scale(a, g);
}
// motion cross product: (wa x wb, wa x vb + va x wb)
template <typename T> TG_FUNC vec_t<6, T> sp_cross(const vec_t<6, T>& a, const vec_t<6, T>& b) {
    return sp_vector(cross(sp_top(a), sp_top(b)), cross(sp_top(a), sp_bottom(b)) + cross(sp_bottom(a), sp_top(b)));
}
template <typename T> TG_FUNC void adj_sp_cross(const vec_t<6, T>& a, const vec_t<6, T>& b, vec_t<6, T>& aa, vec_t<6, T>& ab, const vec_t<6, T>& g) {
    vec_t<3, T> awa, ava, awb, avb, gt = sp_top(g), gb = sp_bottom(g);
    adj_cross(sp_top(a), sp_top(b), awa, awb, gt);
    adj_cross(sp_top(a), sp_bottom(b), awa, avb, gb);
    adj_cross(sp_bottom(a), sp_top(b), ava, awb, gb);
    aa += sp_vector(awa, ava); ab += sp_vector(awb, avb);
}
// force cross product: (wa x wb + va x vb, wa x vb)
template <typename T> TG_FUNC vec_t<6, T> sp_cross_dual(const vec_t<6, T>& a, const vec_t<6, T>& b) {
    return sp_vector(cross(sp_top(a), sp_top(b)) + cross(sp_bottom(a), sp_bottom(b)), cross(sp_top(a), sp_bottom(b)));
}
template <typename T> TG_FUNC void adj_sp_cross_dual(const vec_t<6, T>& a, const vec_t<6, T>& b, vec_t<6, T>& aa, vec_t<6, T>& ab, const vec_t<6, T>& g) {
    vec_t<3, T> awa, ava, awb, avb, gt = sp_top(g), gb = sp_bottom(g);
    adj_cross(sp_top(a), sp_top(b), awa, awb, gt);
    adj_cross(sp_bottom(a), sp_bottom(b), ava, avb, gt);
    adj_cross(sp_top(a), sp_bottom(b), awa, avb, gb);
    aa += sp_vector(awa, ava); ab += sp_vector(awb, avb);
}
// spatial_adjoint(R, S) = [[R, 0], [S, R]]
template <typename T> TG_FUNC mat_t<6, 6, T> sp_adjoint(const mat_t<3, 3, T>& r, const mat_t<3, 3, T>& s) {
    mat_t<6, 6, T> m;
    for (int i = 0; i < 3; ++i) for (int j = 0; j < 3; ++j) {
        m.data[i][j] = r.data[i][j]; m.data[3 + i][3 + j] = r.data[i][j]; m.data[3 + i][j] = s.data[i][j];
    }
    return m;
}
template <typename T> TG_FUNC void adj_sp_adjoint(const mat_t<3, 3, T>&, const mat_t<3, 3, T>&, mat_t<3, 3, T>& ar, mat_t<3, 3, T>& as, const mat_t<6, 6, T>& g) {
    for (int i = 0; i < 3; ++i) for (int j = 0; j < 3; ++j) {
        ar.data[i][j] += g.data[i][j] + g.data[3 + i][3 + j]; as.data[i][j] += g.data[3 + i][j];
    }
}

// ---- quaternion from roll (x), pitch (y), yaw (z), as Warp's quat_rpy
template <typename T> TG_FUNC vec_t<4, T> sp_quat_rpy(T roll, T pitch, T yaw) {
    typedef typename compute<T>::type C;
    C cr = cos(C(roll) / 2), sr = sin(C(roll) / 2), cp = cos(C(pitch) / 2), sp = sin(C(pitch) / 2);
    C cy = cos(C(yaw) / 2), sy = sin(C(yaw) / 2);
    return make_vec<4, T>(T(sr * cp * cy - cr * sp * sy), T(cr * sp * cy + sr * cp * sy),
                          T(cr * cp * sy - sr * sp * cy), T(cr * cp * cy + sr * sp * sy));
}
template <typename T> TG_FUNC void adj_sp_quat_rpy(T roll, T pitch, T yaw, T& ar, T& ap, T& ay, const vec_t<4, T>& g) {
    typedef typename compute<T>::type C;
    C cr = cos(C(roll) / 2), sr = sin(C(roll) / 2), cp = cos(C(pitch) / 2), sp = sin(C(pitch) / 2);
    C cy = cos(C(yaw) / 2), sy = sin(C(yaw) / 2);
    C gx = C(g.c[0]), gy = C(g.c[1]), gz = C(g.c[2]), gw = C(g.c[3]);
    // d/d(angle) of (c, s) at half angle is (-s/2, c/2)
    C dr = gx * (cr * cp * cy + sr * sp * sy) + gy * (-sr * sp * cy + cr * cp * sy)
         + gz * (-sr * cp * sy - cr * sp * cy) + gw * (-sr * cp * cy + cr * sp * sy);
    C dp = gx * (-sr * sp * cy - cr * cp * sy) + gy * (cr * cp * cy - sr * sp * sy)
         + gz * (-cr * sp * sy - sr * cp * cy) + gw * (-cr * sp * cy + sr * cp * sy);
    C dy = gx * (-sr * cp * sy - cr * sp * cy) + gy * (-cr * sp * sy + sr * cp * cy)
         + gz * (cr * cp * cy + sr * sp * sy) + gw * (-cr * cp * sy + sr * sp * cy);
    ar += T(dr / 2); ap += T(dp / 2); ay += T(dy / 2);
}

// ---- rotation matrices: column k is the rotation of the basis vector e_k
template <typename T> TG_FUNC mat_t<3, 3, T> sp_quat_to_matrix(const vec_t<4, T>& q) {
    mat_t<3, 3, T> m;
    for (int k = 0; k < 3; ++k) {
        vec_t<3, T> e; e.c[k] = T(1);
        vec_t<3, T> c = quat_rotate(q, e);
        for (int i = 0; i < 3; ++i) m.data[i][k] = c.c[i];
    }
    return m;
}
template <typename T> TG_FUNC void adj_sp_quat_to_matrix(const vec_t<4, T>& q, vec_t<4, T>& aq, const mat_t<3, 3, T>& g) {
    for (int k = 0; k < 3; ++k) {
        vec_t<3, T> e, ae, gc; e.c[k] = T(1);
        for (int i = 0; i < 3; ++i) gc.c[i] = g.data[i][k];
        adj_quat_rotate(q, e, aq, ae, gc);
    }
}
// the 4x4 homogeneous matrix [[R, p], [0, 1]] of a transform
template <typename T> TG_FUNC mat_t<4, 4, T> sp_transform_to_matrix(const vec_t<7, T>& t) {
    mat_t<3, 3, T> r = sp_quat_to_matrix(sp_rot(t));
    mat_t<4, 4, T> m;
    for (int i = 0; i < 3; ++i) { for (int j = 0; j < 3; ++j) m.data[i][j] = r.data[i][j]; m.data[i][3] = t.c[i]; }
    m.data[3][3] = T(1);
    return m;
}
template <typename T> TG_FUNC void adj_sp_transform_to_matrix(const vec_t<7, T>& t, vec_t<7, T>& at, const mat_t<4, 4, T>& g) {
    mat_t<3, 3, T> gr; vec_t<4, T> aq;
    for (int i = 0; i < 3; ++i) { for (int j = 0; j < 3; ++j) gr.data[i][j] = g.data[i][j]; at.c[i] += g.data[i][3]; }
    adj_sp_quat_to_matrix(sp_rot(t), aq, gr);
    sp_add_rot(at, aq);
}

// ---- quaternion of a rotation matrix (top-left 3x3 block), Warp's branches: the trace when it
// is >= 0, else the largest diagonal entry. In a branch, with s = 2 sqrt(1 + sum_k sgn_k m_kk),
// the main component is s/4 and each other one (m[a][b] + sgn m[b][a]) / s; then normalized.
struct sp_qm_branch { int main; int sgn[3]; int comp[3], a[3], b[3], pm[3]; };
template <int R, typename T> TG_FUNC sp_qm_branch sp_qm_pick(const mat_t<R, R, T>& m) {
    typedef typename compute<T>::type C;
    C d0 = C(m.data[0][0]), d1 = C(m.data[1][1]), d2 = C(m.data[2][2]);
    if (d0 + d1 + d2 >= C(0)) return sp_qm_branch{3, {1, 1, 1}, {0, 1, 2}, {2, 0, 1}, {1, 2, 0}, {-1, -1, -1}};
    int k = d1 > d0 ? 1 : 0;
    if (d2 > (k ? d1 : d0)) k = 2;
    if (k == 0) return sp_qm_branch{0, {1, -1, -1}, {1, 2, 3}, {0, 2, 2}, {1, 0, 1}, {1, 1, -1}};
    if (k == 1) return sp_qm_branch{1, {-1, 1, -1}, {2, 0, 3}, {1, 0, 0}, {2, 1, 2}, {1, 1, -1}};
    return sp_qm_branch{2, {-1, -1, 1}, {0, 1, 3}, {2, 1, 1}, {0, 2, 0}, {1, 1, -1}};
}
template <int R, typename T> TG_FUNC vec_t<4, T> sp_qm_raw(const mat_t<R, R, T>& m, const sp_qm_branch& br) {
    typedef typename compute<T>::type C;
    C arg = C(1);
    for (int k = 0; k < 3; ++k) arg += C(br.sgn[k]) * C(m.data[k][k]);
    C s = C(2) * sqrt(arg);
    vec_t<4, T> q;
    q.c[br.main] = T(s / C(4));
    for (int j = 0; j < 3; ++j)
        q.c[br.comp[j]] = T((C(m.data[br.a[j]][br.b[j]]) + C(br.pm[j]) * C(m.data[br.b[j]][br.a[j]])) / s);
    return q;
}
template <int R, typename T> TG_FUNC vec_t<4, T> sp_quat_from_matrix(const mat_t<R, R, T>& m) {
    return normalize(sp_qm_raw(m, sp_qm_pick(m)));
}
template <int R, typename T> TG_FUNC void adj_sp_quat_from_matrix(const mat_t<R, R, T>& m, mat_t<R, R, T>& am, const vec_t<4, T>& g) {
    typedef typename compute<T>::type C;
    sp_qm_branch br = sp_qm_pick(m);
    vec_t<4, T> raw = sp_qm_raw(m, br), graw;
    adj_normalize(raw, graw, g);
    C arg = C(1);
    for (int k = 0; k < 3; ++k) arg += C(br.sgn[k]) * C(m.data[k][k]);
    C s = C(2) * sqrt(arg);
    C gs = C(graw.c[br.main]) / C(4);       // d(loss)/ds
    for (int j = 0; j < 3; ++j) {
        C gj = C(graw.c[br.comp[j]]);
        C e = C(m.data[br.a[j]][br.b[j]]) + C(br.pm[j]) * C(m.data[br.b[j]][br.a[j]]);
        am.data[br.a[j]][br.b[j]] += T(gj / s);
        am.data[br.b[j]][br.a[j]] += T(C(br.pm[j]) * gj / s);
        gs -= gj * e / (s * s);
    }
    for (int k = 0; k < 3; ++k) am.data[k][k] += T(gs * C(br.sgn[k]) * C(2) / s);   // ds/dm_kk = 2 sgn_k / s
}
// the transform of a 4x4 homogeneous matrix: translation column, rotation of the 3x3 block
template <typename T> TG_FUNC vec_t<7, T> sp_transform_from_matrix(const mat_t<4, 4, T>& m) {
    return sp_transform(make_vec<3, T>(m.data[0][3], m.data[1][3], m.data[2][3]), sp_quat_from_matrix(m));
}
template <typename T> TG_FUNC void adj_sp_transform_from_matrix(const mat_t<4, 4, T>& m, mat_t<4, 4, T>& am, const vec_t<7, T>& g) {
    for (int i = 0; i < 3; ++i) am.data[i][3] += g.c[i];
    adj_sp_quat_from_matrix(m, am, sp_rot(g));
}

// ---- shortest-arc rotation of direction a onto direction b (Warp: opposite directions unhandled)
template <typename T> TG_FUNC vec_t<4, T> sp_qbv_raw(const vec_t<3, T>& an, const vec_t<3, T>& bn) {
    vec_t<3, T> c = cross(an, bn);
    return make_vec<4, T>(c.c[0], c.c[1], c.c[2], T(1) + dot(an, bn));
}
template <typename T> TG_FUNC vec_t<4, T> sp_quat_between_vectors(const vec_t<3, T>& a, const vec_t<3, T>& b) {
    return normalize(sp_qbv_raw(normalize(a), normalize(b)));
}
template <typename T> TG_FUNC void adj_sp_quat_between_vectors(const vec_t<3, T>& a, const vec_t<3, T>& b, vec_t<3, T>& aa, vec_t<3, T>& ab, const vec_t<4, T>& g) {
    vec_t<3, T> an = normalize(a), bn = normalize(b), gan, gbn;
    vec_t<4, T> gq; adj_normalize(sp_qbv_raw(an, bn), gq, g);
    adj_cross(an, bn, gan, gbn, make_vec<3, T>(gq.c[0], gq.c[1], gq.c[2]));
    gan += scale(bn, gq.c[3]); gbn += scale(an, gq.c[3]);
    adj_normalize(a, aa, gan); adj_normalize(b, ab, gbn);
}

// ---- (roll, pitch, yaw) of a unit quaternion, the inverse of quat_rpy (pitch clamped as Warp)
template <typename T> TG_FUNC vec_t<3, T> sp_quat_to_rpy(const vec_t<4, T>& q) {
    typedef typename compute<T>::type C;
    C x = C(q.c[0]), y = C(q.c[1]), z = C(q.c[2]), w = C(q.c[3]);
    C t2 = C(2) * (w * y - z * x);
    t2 = t2 > C(1) ? C(1) : (t2 < C(-1) ? C(-1) : t2);
    return make_vec<3, T>(T(atan2(C(2) * (w * x + y * z), C(1) - C(2) * (x * x + y * y))), T(asin(t2)),
                          T(atan2(C(2) * (w * z + x * y), C(1) - C(2) * (y * y + z * z))));
}
template <typename T> TG_FUNC void adj_sp_quat_to_rpy(const vec_t<4, T>& q, vec_t<4, T>& aq, const vec_t<3, T>& g) {
    typedef typename compute<T>::type C;
    C x = C(q.c[0]), y = C(q.c[1]), z = C(q.c[2]), w = C(q.c[3]);
    C t0 = C(2) * (w * x + y * z), t1 = C(1) - C(2) * (x * x + y * y);
    C t3 = C(2) * (w * z + x * y), t4 = C(1) - C(2) * (y * y + z * z), t2 = C(2) * (w * y - z * x);
    C a0 = C(0), a1 = C(0), a3 = C(0), a4 = C(0);
    adj_atan2(t0, t1, a0, a1, C(g.c[0]));
    adj_atan2(t3, t4, a3, a4, C(g.c[2]));
    C a2 = (t2 > C(-1) && t2 < C(1)) ? C(g.c[1]) / sqrt(C(1) - t2 * t2) : C(0);
    C dx = C(2) * (a0 * w + a3 * y - a2 * z) - C(4) * a1 * x;
    C dy = C(2) * (a0 * z + a3 * x + a2 * w) - C(4) * (a1 * y + a4 * y);
    C dz = C(2) * (a0 * y + a3 * w - a2 * x) - C(4) * a4 * z;
    C dw = C(2) * (a0 * x + a3 * z + a2 * y);
    aq.c[0] += T(dx); aq.c[1] += T(dy); aq.c[2] += T(dz); aq.c[3] += T(dw);
}

// ---- slerp as Warp: a * from_axis_angle(axis, t * angle) of the rotation inv(a) * b; the axis sign
// follows w, so the arc is the shortest one
template <typename T> TG_FUNC void sp_axis_angle(const vec_t<4, T>& q, vec_t<3, T>& axis, T& angle) {
    vec_t<3, T> v = make_vec<3, T>(q.c[0], q.c[1], q.c[2]);
    axis = q.c[3] < T(0) ? -normalize(v) : normalize(v);
    angle = T(2 * atan2(typename compute<T>::type(length(v)), typename compute<T>::type(abs(q.c[3]))));
}
template <typename T> TG_FUNC void adj_sp_axis_angle(const vec_t<4, T>& q, vec_t<4, T>& aq, const vec_t<3, T>& gaxis, T gangle) {
    typedef typename compute<T>::type C;
    vec_t<3, T> v = make_vec<3, T>(q.c[0], q.c[1], q.c[2]), av;
    C sw = q.c[3] < T(0) ? C(-1) : C(1), lv = C(length(v)), alv = C(0), aw = C(0);
    adj_normalize(v, av, scale(gaxis, T(sw)));
    adj_atan2(lv, C(sw * C(q.c[3])), alv, aw, C(2) * C(gangle));
    if (lv > C(0)) av += scale(v, T(alv / lv));
    aq.c[0] += av.c[0]; aq.c[1] += av.c[1]; aq.c[2] += av.c[2]; aq.c[3] += T(aw * sw);
}
// the two results of Warp's quat_to_axis_angle(q, axis, angle) (its out-parameters), one builtin each
template <typename T> TG_FUNC vec_t<3, T> sp_quat_axis(const vec_t<4, T>& q) {
    vec_t<3, T> axis; T angle; sp_axis_angle(q, axis, angle); return axis;
}
template <typename T> TG_FUNC void adj_sp_quat_axis(const vec_t<4, T>& q, vec_t<4, T>& aq, const vec_t<3, T>& g) {
    adj_sp_axis_angle(q, aq, g, T(0));
}
template <typename T> TG_FUNC T sp_quat_angle(const vec_t<4, T>& q) {
    vec_t<3, T> axis; T angle; sp_axis_angle(q, axis, angle); return angle;
}
template <typename T> TG_FUNC void adj_sp_quat_angle(const vec_t<4, T>& q, vec_t<4, T>& aq, T g) {
    adj_sp_axis_angle(q, aq, vec_t<3, T>(), g);
}
template <typename T> TG_FUNC vec_t<4, T> sp_quat_slerp(const vec_t<4, T>& a, const vec_t<4, T>& b, T t) {
    vec_t<3, T> axis; T angle;
    sp_axis_angle(quat_mul(quat_conj(a), b), axis, angle);
    return quat_mul(a, quat_from_axis_angle(axis, T(t * angle)));
}
template <typename T> TG_FUNC void adj_sp_quat_slerp(const vec_t<4, T>& a, const vec_t<4, T>& b, T t, vec_t<4, T>& aa, vec_t<4, T>& ab, T& at, const vec_t<4, T>& g) {
    vec_t<4, T> qi = quat_conj(a), inc = quat_mul(qi, b), aqt, ainc, aqi;
    vec_t<3, T> axis, aaxis; T angle, ata = T(0);
    sp_axis_angle(inc, axis, angle);
    adj_quat_mul(a, quat_from_axis_angle(axis, T(t * angle)), aa, aqt, g);
    adj_quat_from_axis_angle(axis, T(t * angle), aaxis, ata, aqt);
    at += T(ata * angle);
    adj_sp_axis_angle(inc, ainc, aaxis, T(ata * t));
    adj_quat_mul(qi, b, aqi, ab, ainc);
    aa += quat_conj(aqi);
}

// ---- rotation by the inverse of q
template <typename T> TG_FUNC vec_t<3, T> sp_quat_rotate_inv(const vec_t<4, T>& q, const vec_t<3, T>& v) { return quat_rotate(quat_conj(q), v); }
template <typename T> TG_FUNC void adj_sp_quat_rotate_inv(const vec_t<4, T>& q, const vec_t<3, T>& v, vec_t<4, T>& aq, vec_t<3, T>& av, const vec_t<3, T>& g) {
    vec_t<4, T> aqc; adj_quat_rotate(quat_conj(q), v, aqc, av, g); aq += quat_conj(aqc);
}

// ---- Euler angles about fixed axes i, then j, then k (extrinsic; e indexed by axis): qk * qj * qi
// axis indices arrive as integers, or as the float a literal adapted to (clamped to 0..2)
template <typename I> TG_FUNC int sp_axis_index(I i) { int a = int(i); return a < 0 ? 0 : (a > 2 ? 2 : a); }
template <typename T> TG_FUNC vec_t<3, T> sp_unit_axis(int i) { vec_t<3, T> a; a.c[i] = T(1); return a; }
template <typename T, typename I, typename J, typename K> TG_FUNC vec_t<4, T> sp_quat_from_euler(const vec_t<3, T>& e, I i, J j, K k) {
    int ii = sp_axis_index(i), jj = sp_axis_index(j), kk = sp_axis_index(k);
    vec_t<4, T> qi = quat_from_axis_angle(sp_unit_axis<T>(ii), e.c[ii]), qj = quat_from_axis_angle(sp_unit_axis<T>(jj), e.c[jj]);
    return quat_mul(quat_from_axis_angle(sp_unit_axis<T>(kk), e.c[kk]), quat_mul(qj, qi));
}
template <typename T, typename I, typename J, typename K> TG_FUNC void adj_sp_quat_from_euler(const vec_t<3, T>& e, I i_, J j_, K k_, vec_t<3, T>& ae, I&, J&, K&, const vec_t<4, T>& g) {
    int i = sp_axis_index(i_), j = sp_axis_index(j_), k = sp_axis_index(k_);
    vec_t<3, T> ai = sp_unit_axis<T>(i), aj = sp_unit_axis<T>(j), ak = sp_unit_axis<T>(k), unused;
    vec_t<4, T> qi = quat_from_axis_angle(ai, e.c[i]), qj = quat_from_axis_angle(aj, e.c[j]), qk = quat_from_axis_angle(ak, e.c[k]);
    vec_t<4, T> aqk, aqji, aqj, aqi;
    adj_quat_mul(qk, quat_mul(qj, qi), aqk, aqji, g);
    adj_quat_mul(qj, qi, aqj, aqi, aqji);
    adj_quat_from_axis_angle(ai, e.c[i], unused, ae.c[i], aqi);
    adj_quat_from_axis_angle(aj, e.c[j], unused, ae.c[j], aqj);
    adj_quat_from_axis_angle(ak, e.c[k], unused, ae.c[k], aqk);
}

// ---- transform_compose(p, q, s) = [[R(q) diag(s), p], [0, 1]]
// ---- Warp's transform_decompose(m) -> (position, rotation, scale): one builtin per result. The
// scale is the norm of each column of the 3x3 block; the rotation is the quaternion of the block
// with each nonzero column divided by its scale (as Warp's)
template <typename T> TG_FUNC vec_t<3, T> sp_decompose_position(const mat_t<4, 4, T>& m) {
    return make_vec<3, T>(m.data[0][3], m.data[1][3], m.data[2][3]);
}
template <typename T> TG_FUNC void adj_sp_decompose_position(const mat_t<4, 4, T>& m, mat_t<4, 4, T>& am, const vec_t<3, T>& g) {
    for (int i = 0; i < 3; ++i) am.data[i][3] += g.c[i];
}
template <typename T> TG_FUNC typename compute<T>::type sp_column_norm(const mat_t<4, 4, T>& m, int j) {
    typedef typename compute<T>::type C;
    return sqrt(C(m.data[0][j]) * C(m.data[0][j]) + C(m.data[1][j]) * C(m.data[1][j]) + C(m.data[2][j]) * C(m.data[2][j]));
}
template <typename T> TG_FUNC vec_t<3, T> sp_decompose_scale(const mat_t<4, 4, T>& m) {
    return make_vec<3, T>(T(sp_column_norm(m, 0)), T(sp_column_norm(m, 1)), T(sp_column_norm(m, 2)));
}
template <typename T> TG_FUNC void adj_sp_decompose_scale(const mat_t<4, 4, T>& m, mat_t<4, 4, T>& am, const vec_t<3, T>& g) {
    typedef typename compute<T>::type C;
    for (int j = 0; j < 3; ++j) {
        C s = sp_column_norm(m, j);
        if (s > C(0)) for (int i = 0; i < 3; ++i) am.data[i][j] += T(C(m.data[i][j]) / s * C(g.c[j]));
    }
}
template <typename T> TG_FUNC mat_t<3, 3, T> sp_decompose_block(const mat_t<4, 4, T>& m) {
    typedef typename compute<T>::type C;
    mat_t<3, 3, T> r;
    for (int j = 0; j < 3; ++j) {
        C s = sp_column_norm(m, j);
        for (int i = 0; i < 3; ++i) r.data[i][j] = s != C(0) ? T(C(m.data[i][j]) / s) : m.data[i][j];
    }
    return r;
}
template <typename T> TG_FUNC vec_t<4, T> sp_decompose_rotation(const mat_t<4, 4, T>& m) {
    return sp_quat_from_matrix(sp_decompose_block(m));
}
template <typename T> TG_FUNC void adj_sp_decompose_rotation(const mat_t<4, 4, T>& m, mat_t<4, 4, T>& am, const vec_t<4, T>& g) {
    typedef typename compute<T>::type C;
    mat_t<3, 3, T> ar;
    adj_sp_quat_from_matrix(sp_decompose_block(m), ar, g);
    for (int j = 0; j < 3; ++j) {
        C s = sp_column_norm(m, j);
        if (s == C(0)) {
            for (int k = 0; k < 3; ++k) am.data[k][j] += ar.data[k][j];
            continue;
        }
        // r_ij = m_ij / s_j: d r_ij / d m_kj = delta_ik / s_j - m_ij m_kj / s_j^3
        C d = C(0);
        for (int i = 0; i < 3; ++i) d += C(ar.data[i][j]) * C(m.data[i][j]);
        for (int k = 0; k < 3; ++k) am.data[k][j] += T(C(ar.data[k][j]) / s - C(m.data[k][j]) * d / (s * s * s));
    }
}

template <typename T> TG_FUNC mat_t<4, 4, T> sp_transform_compose(const vec_t<3, T>& p, const vec_t<4, T>& q, const vec_t<3, T>& sc) {
    mat_t<3, 3, T> r = sp_quat_to_matrix(q);
    mat_t<4, 4, T> m;
    for (int i = 0; i < 3; ++i) { for (int j = 0; j < 3; ++j) m.data[i][j] = T(r.data[i][j] * sc.c[j]); m.data[i][3] = p.c[i]; }
    m.data[3][3] = T(1);
    return m;
}
template <typename T> TG_FUNC void adj_sp_transform_compose(const vec_t<3, T>& p, const vec_t<4, T>& q, const vec_t<3, T>& sc, vec_t<3, T>& ap, vec_t<4, T>& aq, vec_t<3, T>& as, const mat_t<4, 4, T>& g) {
    mat_t<3, 3, T> r = sp_quat_to_matrix(q), gr;
    for (int i = 0; i < 3; ++i) {
        ap.c[i] += g.data[i][3];
        for (int j = 0; j < 3; ++j) { gr.data[i][j] = T(g.data[i][j] * sc.c[j]); as.c[j] += T(g.data[i][j] * r.data[i][j]); }
    }
    adj_sp_quat_to_matrix(q, aq, gr);
}

// ---- Euler angles of a rotation for axes i, j, k (Warp's quat_to_euler: Bernardes & Viollet's
// general formula, scalar-first q_s = (w, x, y, z), gimbal-lock branches at 1e-6)
struct sp_euler_plan { int i, j, k; int np; double e; };
template <typename I, typename J, typename K> TG_FUNC sp_euler_plan sp_euler_setup(I i_, J j_, K k_) {
    sp_euler_plan p;
    p.i = sp_axis_index(i_) + 1; p.j = sp_axis_index(j_) + 1; p.k = sp_axis_index(k_) + 1;
    p.np = 1;
    if (p.i == p.k) { p.np = 0; p.k = 6 - p.i - p.j; }
    p.e = double((p.i - p.j) * (p.j - p.k) * (p.k - p.i)) / 2.0;
    return p;
}
TG_FUNC int sp_qs(int s) { return s == 0 ? 3 : s - 1; }   // scalar-first index -> xyzw index
template <typename T> TG_FUNC vec_t<3, T> sp_quat_to_euler_impl(const vec_t<4, T>& q, const sp_euler_plan& p, vec_t<4, T>* aq, const vec_t<3, T>* g) {
    typedef typename compute<T>::type C;
    C qs[4] = {C(q.c[3]), C(q.c[0]), C(q.c[1]), C(q.c[2])}, e = C(p.e), np = C(p.np);
    C a = qs[0] - np * qs[p.j], b = qs[p.i] + np * e * qs[p.k], c = qs[p.j] + np * qs[0], d = e * qs[p.k] - np * qs[p.i];
    C S = a * a + b * b, N = S + c * c + d * d, u = C(2) * S / N - C(1);
    C t2 = acos(u), tp = atan2(b, a), tm = atan2(d, c), t1 = C(0), t3;
    int branch = abs(t2) < C(1e-6) ? 1 : (abs(t2 - C(3.14159265358979323846)) < C(1e-6) ? 2 : 0);
    if (branch == 1) t3 = C(2) * tp; else if (branch == 2) t3 = C(2) * tm; else { t1 = tp - tm; t3 = tp + tm; }
    if (p.np) { t2 -= C(1.57079632679489661923); t3 *= e; }
    vec_t<3, T> r;
    r.c[p.i - 1] = T(t1); r.c[p.j - 1] = T(t2); r.c[p.k - 1] = T(t3);
    if (aq) {
        C g1 = C(g->c[p.i - 1]), g2 = C(g->c[p.j - 1]), g3 = C(g->c[p.k - 1]) * (p.np ? e : C(1));
        C gtp = branch == 1 ? C(2) * g3 : (branch == 0 ? g1 + g3 : C(0));
        C gtm = branch == 2 ? C(2) * g3 : (branch == 0 ? g3 - g1 : C(0));
        C ga = C(0), gb = C(0), gc = C(0), gd = C(0);
        adj_atan2(b, a, gb, ga, gtp);
        adj_atan2(d, c, gd, gc, gtm);
        if (u > C(-1) && u < C(1)) {
            C gu = -g2 / sqrt(C(1) - u * u), k2 = C(4) / (N * N);
            ga += gu * k2 * a * (N - S); gb += gu * k2 * b * (N - S); gc -= gu * k2 * c * S; gd -= gu * k2 * d * S;
        }
        C gs[4] = {C(0), C(0), C(0), C(0)};
        gs[0] += ga + np * gc; gs[p.j] += gc - np * ga; gs[p.i] += gb - np * gd; gs[p.k] += np * e * gb + e * gd;
        for (int s = 0; s < 4; ++s) aq->c[sp_qs(s)] += T(gs[s]);
    }
    return r;
}
template <typename T, typename I, typename J, typename K> TG_FUNC vec_t<3, T> sp_quat_to_euler(const vec_t<4, T>& q, I i, J j, K k) {
    return sp_quat_to_euler_impl<T>(q, sp_euler_setup(i, j, k), (vec_t<4, T>*)0, (const vec_t<3, T>*)0);
}
template <typename T, typename I, typename J, typename K> TG_FUNC void adj_sp_quat_to_euler(const vec_t<4, T>& q, I i, J j, K k, vec_t<4, T>& aq, I&, J&, K&, const vec_t<3, T>& g) {
    sp_quat_to_euler_impl<T>(q, sp_euler_setup(i, j, k), &aq, &g);
}

// ---- Warp's twist/wrench helpers (spatial vectors: top angular, bottom linear), quaternion twist
template <typename T> TG_FUNC vec_t<6, T> sp_join(const vec_t<3, T>& a, const vec_t<3, T>& b) {
    return make_vec<6, T>(a.c[0], a.c[1], a.c[2], b.c[0], b.c[1], b.c[2]);
}
template <typename T> TG_FUNC void sp_add_top(vec_t<6, T>& a, const vec_t<3, T>& g) { for (int i = 0; i < 3; ++i) a.c[i] += g.c[i]; }
template <typename T> TG_FUNC void sp_add_bottom(vec_t<6, T>& a, const vec_t<3, T>& g) { for (int i = 0; i < 3; ++i) a.c[3 + i] += g.c[i]; }
// the linear velocity v + w x r of a point at offset r on a body moving with twist (w, v)
template <typename T> TG_FUNC vec_t<3, T> sp_velocity_at_point(const vec_t<6, T>& qd, const vec_t<3, T>& r) {
    return sp_bottom(qd) + cross(sp_top(qd), r);
}
template <typename T> TG_FUNC void adj_sp_velocity_at_point(const vec_t<6, T>& qd, const vec_t<3, T>& r, vec_t<6, T>& aqd,
                                                            vec_t<3, T>& ar, const vec_t<3, T>& g) {
    vec_t<3, T> aw; adj_cross(sp_top(qd), r, aw, ar, g);
    sp_add_top(aqd, aw); sp_add_bottom(aqd, g);
}
// a twist (w, v) to the frame of t = (p, R): (R w, R v + p x R w); a wrench (tau, f): (R tau + p x R f, R f).
// `moving` is the part rotated and crossed with p (w of a twist, f of a wrench), `other` the other part.
template <typename T> TG_FUNC vec_t<6, T> sp_frame_map(const vec_t<7, T>& t, const vec_t<3, T>& moving,
                                                       const vec_t<3, T>& other, bool twist) {
    vec_t<4, T> q = sp_rot(t);
    vec_t<3, T> m = quat_rotate(q, moving);
    vec_t<3, T> o = quat_rotate(q, other) + cross(sp_pos(t), m);
    return twist ? sp_join(m, o) : sp_join(o, m);
}
template <typename T> TG_FUNC void adj_sp_frame_map(const vec_t<7, T>& t, const vec_t<3, T>& moving, const vec_t<3, T>& other,
                                                    vec_t<7, T>& at, vec_t<3, T>& amoving, vec_t<3, T>& aother,
                                                    const vec_t<3, T>& gm_, const vec_t<3, T>& go) {
    vec_t<4, T> q = sp_rot(t), aq;
    vec_t<3, T> m = quat_rotate(q, moving), ap, gm = gm_;
    adj_cross(sp_pos(t), m, ap, gm, go);
    adj_quat_rotate(q, moving, aq, amoving, gm);
    adj_quat_rotate(q, other, aq, aother, go);
    sp_add_pos(at, ap); sp_add_rot(at, aq);
}
template <typename T> TG_FUNC vec_t<6, T> sp_transform_twist(const vec_t<7, T>& t, const vec_t<6, T>& x) {
    return sp_frame_map(t, sp_top(x), sp_bottom(x), true);
}
template <typename T> TG_FUNC void adj_sp_transform_twist(const vec_t<7, T>& t, const vec_t<6, T>& x, vec_t<7, T>& at,
                                                          vec_t<6, T>& ax, const vec_t<6, T>& g) {
    vec_t<3, T> aw, av;
    adj_sp_frame_map(t, sp_top(x), sp_bottom(x), at, aw, av, sp_top(g), sp_bottom(g));
    sp_add_top(ax, aw); sp_add_bottom(ax, av);
}
template <typename T> TG_FUNC vec_t<6, T> sp_transform_wrench(const vec_t<7, T>& t, const vec_t<6, T>& x) {
    return sp_frame_map(t, sp_bottom(x), sp_top(x), false);
}
template <typename T> TG_FUNC void adj_sp_transform_wrench(const vec_t<7, T>& t, const vec_t<6, T>& x, vec_t<7, T>& at,
                                                           vec_t<6, T>& ax, const vec_t<6, T>& g) {
    vec_t<3, T> af, atau;
    adj_sp_frame_map(t, sp_bottom(x), sp_top(x), at, af, atau, sp_bottom(g), sp_top(g));
    sp_add_top(ax, atau); sp_add_bottom(ax, af);
}
// the twist of q about axis: q's vector part projected on axis ((v . a) a, axis not normalized, as
// Warp's), with q's w, normalized; the identity when that is zero
template <typename T> TG_FUNC vec_t<4, T> sp_quat_twist(const vec_t<3, T>& a, const vec_t<4, T>& q) {
    typedef typename compute<T>::type C;
    C s = C(q.c[0]) * C(a.c[0]) + C(q.c[1]) * C(a.c[1]) + C(q.c[2]) * C(a.c[2]);
    C y[4] = {s * C(a.c[0]), s * C(a.c[1]), s * C(a.c[2]), C(q.c[3])};
    C n = sqrt(y[0] * y[0] + y[1] * y[1] + y[2] * y[2] + y[3] * y[3]);
    if (!(n > C(0))) return make_vec<4, T>(0, 0, 0, 1);
    return make_vec<4, T>(y[0] / n, y[1] / n, y[2] / n, y[3] / n);
}
template <typename T> TG_FUNC void adj_sp_quat_twist(const vec_t<3, T>& a, const vec_t<4, T>& q, vec_t<3, T>& aa,
                                                     vec_t<4, T>& aq, const vec_t<4, T>& g) {
    typedef typename compute<T>::type C;
    C s = C(q.c[0]) * C(a.c[0]) + C(q.c[1]) * C(a.c[1]) + C(q.c[2]) * C(a.c[2]);
    C y[4] = {s * C(a.c[0]), s * C(a.c[1]), s * C(a.c[2]), C(q.c[3])};
    C n = sqrt(y[0] * y[0] + y[1] * y[1] + y[2] * y[2] + y[3] * y[3]);
    if (!(n > C(0))) return;
    C rg = C(0);
    for (int i = 0; i < 4; ++i) rg = rg + y[i] / n * C(g.c[i]);
    C dy[4];
    for (int i = 0; i < 4; ++i) dy[i] = (C(g.c[i]) - y[i] / n * rg) / n;   // through the normalization
    C ds = dy[0] * C(a.c[0]) + dy[1] * C(a.c[1]) + dy[2] * C(a.c[2]);
    for (int i = 0; i < 3; ++i) {
        aa.c[i] += T(s * dy[i] + ds * C(q.c[i]));
        aq.c[i] += T(ds * C(a.c[i]));
    }
    aq.c[3] += T(dy[3]);
}
// the twist angle 2 atan2(v . a, w) (signed) or 2 atan2(|v . a|, w) (unsigned), as Warp's
template <typename T> TG_FUNC T sp_twist_angle(const vec_t<3, T>& a, const vec_t<4, T>& q, bool sign) {
    typedef typename compute<T>::type C;
    C s = C(q.c[0]) * C(a.c[0]) + C(q.c[1]) * C(a.c[1]) + C(q.c[2]) * C(a.c[2]);
    if (!sign && s < C(0)) s = -s;
    return T(C(2) * atan2(s, C(q.c[3])));
}
template <typename T> TG_FUNC void adj_sp_twist_angle(const vec_t<3, T>& a, const vec_t<4, T>& q, bool sign,
                                                      vec_t<3, T>& aa, vec_t<4, T>& aq, T g) {
    typedef typename compute<T>::type C;
    C s = C(q.c[0]) * C(a.c[0]) + C(q.c[1]) * C(a.c[1]) + C(q.c[2]) * C(a.c[2]), w = C(q.c[3]);
    C r = s * s + w * w;
    if (!(r > C(0))) return;
    C k = sign ? C(1) : (s > C(0) ? C(1) : (s < C(0) ? C(-1) : C(0)));   // d|s|/ds
    C ds = C(2) * w / r * k * C(g), dw = C(-2) * (sign ? s : s * k) / r * C(g);
    for (int i = 0; i < 3; ++i) { aa.c[i] += T(ds * C(q.c[i])); aq.c[i] += T(ds * C(a.c[i])); }
    aq.c[3] += T(dw);
}
template <typename T> TG_FUNC T sp_quat_twist_angle(const vec_t<3, T>& a, const vec_t<4, T>& q) { return sp_twist_angle(a, q, false); }
template <typename T> TG_FUNC void adj_sp_quat_twist_angle(const vec_t<3, T>& a, const vec_t<4, T>& q, vec_t<3, T>& aa,
                                                           vec_t<4, T>& aq, T g) { adj_sp_twist_angle(a, q, false, aa, aq, g); }
template <typename T> TG_FUNC T sp_quat_twist_angle_signed(const vec_t<3, T>& a, const vec_t<4, T>& q) { return sp_twist_angle(a, q, true); }
template <typename T> TG_FUNC void adj_sp_quat_twist_angle_signed(const vec_t<3, T>& a, const vec_t<4, T>& q, vec_t<3, T>& aa,
                                                                  vec_t<4, T>& aq, T g) { adj_sp_twist_angle(a, q, true, aa, aq, g); }

}  // namespace tg
