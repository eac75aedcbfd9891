/* act_impl — the constants of act_expf (kernels/act.h), shared by its variants only. */
#ifndef PH_KERNELS_ACT_IMPL_H
#define PH_KERNELS_ACT_IMPL_H

#define ACT_EXP_LO (-104.0f) /* x below: exp rounds to +0 */
#define ACT_EXP_HI 89.0f     /* x above: exp rounds to +inf */
#define ACT_LOG2E  1.44269504088896341f
#define ACT_LN2_HI 0.693145751953125f /* 17 significant bits */
#define ACT_LN2_LO 1.42860682030941723212e-6f
#define ACT_EXP_C7 (1.0f / 5040.0f)
#define ACT_EXP_C6 (1.0f / 720.0f)
#define ACT_EXP_C5 (1.0f / 120.0f)
#define ACT_EXP_C4 (1.0f / 24.0f)
#define ACT_EXP_C3 (1.0f / 6.0f)
#define ACT_EXP_C2 0.5f

#endif /* PH_KERNELS_ACT_IMPL_H */
