/* gated_delta — the chunk and token cores and the V-major decode reference (kernels/gated_delta.h).
 */
#include "kernels/gated_delta.h"

#include <math.h>
#include <string.h>

#include "kernels/vec.h"

static size_t gd_align(size_t b) { return (b + 63) & ~(size_t)63; }

size_t gated_delta_ws_layout(const gated_delta_shape *s, int64_t s_min_cols, char *base,
                             gated_delta_ws *ws) {
  size_t C = (size_t)s->C, G = (size_t)s->G;
  size_t Dk = (size_t)s->Dk, Dv = (size_t)s->Dv, Dg = s->per_dim ? Dk : 1;
  size_t Dm = Dk > Dv ? Dk : Dv, Ds = Dv > (size_t)s_min_cols ? Dv : (size_t)s_min_cols;
  size_t off = 0;
#define GD_CARVE(field, type, count)                                                               \
  do {                                                                                             \
    if (base) ws->field = (type *)(void *)(base + off);                                            \
    off += gd_align((count) * sizeof(type));                                                       \
  } while (0)
  GD_CARVE(S, float, Dk *Ds);
  GD_CARVE(K, float, C *Dk);
  GD_CARVE(V, float, C *Dv);
  GD_CARVE(Q, float, G *C *Dk);
  GD_CARVE(A, float, C *C);
  GD_CARVE(QK, float, G *C *C);
  GD_CARVE(beta, float, C);
  GD_CARVE(gl, float, C *Dg);
  GD_CARVE(eg, float, C *Dg);
  GD_CARVE(gam, double, C *Dg);
  GD_CARVE(t0, float, Dm);
  GD_CARVE(t1, float, Dv);
  GD_CARVE(Kt, float, Dk *C);
  GD_CARVE(O, float, G *C *Dv);
#undef GD_CARVE
  return off;
}

void gated_delta_token(const gated_delta_shape *sh, const gated_delta_ws *ws,
                       gated_delta_store_fn store, void *ctx) {
  int64_t G = sh->G, C = sh->C, Dk = sh->Dk, Dv = sh->Dv;
  float *S = ws->S, *k = ws->K, *u = ws->V, *o = ws->t1, *pred = ws->t0;
  if (sh->gated) {
    if (sh->per_dim) {
      for (int64_t r = 0; r < Dk; r++) {
        float a = expf(ws->gl[r]);
        for (int64_t c = 0; c < Dv; c++) S[r * Dv + c] *= a;
      }
    } else {
      float a = expf(ws->gl[0]);
      for (int64_t e = 0; e < Dk * Dv; e++) S[e] *= a;
    }
  }
  if (sh->delta) {
    vec_state_read(pred, S, k, Dk, Dv);
    for (int64_t c = 0; c < Dv; c++) u[c] = ws->beta[0] * (u[c] - pred[c]);
  }
  for (int64_t r = 0; r < Dk; r++) vec_axpy(S + r * Dv, k[r], u, Dv);
  for (int64_t jq = 0; jq < G; jq++) {
    vec_state_read(o, S, ws->Q + jq * C * Dk, Dk, Dv);
    for (int64_t c = 0; c < Dv; c++) o[c] *= sh->scale;
    store(ctx, jq, 0, o);
  }
}

void gated_delta_chunk_decays(const gated_delta_shape *sh, const gated_delta_ws *ws, int64_t L) {
  int64_t Dg = sh->per_dim ? sh->Dk : 1;
  for (int64_t i = 0; i < L; i++) {
    for (int64_t r = 0; r < Dg; r++) {
      double gv = ws->gl[i * Dg + r];
      if (gv < GATED_DELTA_G_FLOOR) gv = GATED_DELTA_G_FLOOR;
      ws->gam[i * Dg + r] = (i ? ws->gam[(i - 1) * Dg + r] : 0.0) + gv;
      ws->eg[i * Dg + r] = expf((float)ws->gam[i * Dg + r]);
    }
  }
}

void gated_delta_chunk(const gated_delta_shape *sh, const gated_delta_ws *ws, int64_t L,
                       gated_delta_store_fn store, void *ctx) {
  int64_t G = sh->G, C = sh->C, Dk = sh->Dk, Dv = sh->Dv;
  int per_dim = sh->per_dim;
  int64_t Dg = per_dim ? Dk : 1;
  float *S = ws->S, *K = ws->K, *U = ws->V, *tmp = ws->t0, *o = ws->t1;

  gated_delta_chunk_decays(sh, ws, L);

  /* Pairwise products within the chunk. Per key dim the decay sits inside the dot product, so
   * the decayed key e^{γ_t−γ_s}⊙k_s is formed once per pair and shared by A and every query. */
  for (int64_t t = 0; t < L; t++) {
    const float *kt = K + t * Dk;
    for (int64_t s = 0; s <= t; s++) {
      const float *ks = K + s * Dk;
      if (per_dim) {
        const double *gt = ws->gam + t * Dk, *gs = ws->gam + s * Dk;
        for (int64_t r = 0; r < Dk; r++) tmp[r] = expf((float)(gt[r] - gs[r])) * ks[r];
        if (sh->delta && s < t) ws->A[t * C + s] = ws->beta[t] * vec_dot(kt, tmp, Dk);
        for (int64_t jq = 0; jq < G; jq++)
          ws->QK[(jq * C + t) * C + s] = vec_dot(ws->Q + (jq * C + t) * Dk, tmp, Dk);
      } else {
        float e = expf((float)(ws->gam[t] - ws->gam[s]));
        if (sh->delta && s < t) ws->A[t * C + s] = ws->beta[t] * e * vec_dot(kt, ks, Dk);
        for (int64_t jq = 0; jq < G; jq++)
          ws->QK[(jq * C + t) * C + s] = e * vec_dot(ws->Q + (jq * C + t) * Dk, ks, Dk);
      }
    }
  }

  /* U by forward substitution; row t needs only rows s < t, which are final by then. For the
   * non-delta rules U = V (β = 1, no retrieval). */
  if (sh->delta) {
    for (int64_t t = 0; t < L; t++) {
      const float *eg = ws->eg + t * Dg;
      for (int64_t r = 0; r < Dk; r++) tmp[r] = eg[per_dim ? r : 0] * K[t * Dk + r];
      vec_state_read(o, S, tmp, Dk, Dv);
      float *ut = U + t * Dv;
      for (int64_t c = 0; c < Dv; c++) ut[c] = ws->beta[t] * (ut[c] - o[c]);
      for (int64_t s = 0; s < t; s++) vec_axpy(ut, -ws->A[t * C + s], U + s * Dv, Dv);
    }
  }

  for (int64_t jq = 0; jq < G; jq++) {
    for (int64_t t = 0; t < L; t++) {
      const float *qt = ws->Q + (jq * C + t) * Dk, *eg = ws->eg + t * Dg;
      for (int64_t r = 0; r < Dk; r++) tmp[r] = eg[per_dim ? r : 0] * qt[r];
      vec_state_read(o, S, tmp, Dk, Dv);
      const float *qk = ws->QK + (jq * C + t) * C;
      for (int64_t s = 0; s <= t; s++) vec_axpy(o, qk[s], U + s * Dv, Dv);
      for (int64_t c = 0; c < Dv; c++) o[c] *= sh->scale;
      store(ctx, jq, t, o);
    }
  }

  /* End state, in place: the keys are no longer needed, so they become e^{γ_L−γ_s}⊙k_s. */
  const double *gend = ws->gam + (L - 1) * Dg;
  for (int64_t s = 0; s < L; s++) {
    const double *gs = ws->gam + s * Dg;
    float *ks = K + s * Dk;
    if (per_dim) {
      for (int64_t r = 0; r < Dk; r++) ks[r] *= expf((float)(gend[r] - gs[r]));
    } else {
      float e = expf((float)(gend[0] - gs[0]));
      for (int64_t r = 0; r < Dk; r++) ks[r] *= e;
    }
  }
  const float *egend = ws->eg + (L - 1) * Dg;
  for (int64_t r = 0; r < Dk; r++) {
    float *sr = S + r * Dv;
    float e = egend[per_dim ? r : 0];
    for (int64_t c = 0; c < Dv; c++) sr[c] *= e;
    for (int64_t s = 0; s < L; s++) vec_axpy(sr, K[s * Dk + r], U + s * Dv, Dv);
  }
}

void gated_delta_decode_cols_ref(const gated_delta_dec *p, int64_t c0, int64_t w) {
  const int64_t Dk = p->Dk;
  float pred[8] = {0}, u[8], o[8] = {0};
  float *T = p->tile;
  for (int64_t r = 0; r < Dk; r++) {
    for (int64_t l = 0; l < w; l++) {
      float x = p->src ? p->src[(c0 + l) * Dk + r] : 0.0f;
      if (p->gated) x *= p->a;
      T[r * 8 + l] = x;
      if (p->delta) pred[l] += p->k[r] * x;
    }
  }
  for (int64_t l = 0; l < w; l++)
    u[l] = p->delta ? p->beta * (p->v[c0 + l] - pred[l]) : p->v[c0 + l];
  if (p->u)
    for (int64_t l = 0; l < w; l++) p->u[c0 + l] = u[l];
  for (int64_t r = 0; r < Dk; r++) {
    for (int64_t l = 0; l < w; l++) {
      float y = fmaf(p->k[r], u[l], T[r * 8 + l]); /* the replay rule, spec/abi.md §2.5 */
      o[l] += p->q[r] * y;
      T[r * 8 + l] = y;
    }
  }
  for (int64_t l = 0; l < w; l++) p->o[c0 + l] = o[l] * p->scale;
  if (p->dst)
    for (int64_t l = 0; l < w; l++)
      for (int64_t r = 0; r < Dk; r++) p->dst[(c0 + l) * Dk + r] = T[r * 8 + l];
}

void gated_delta_decode_ref(const gated_delta_dec *p) {
  for (int64_t c0 = 0; c0 < p->Dv; c0 += 8)
    gated_delta_decode_cols_ref(p, c0, p->Dv - c0 < 8 ? p->Dv - c0 : 8);
}
