/* Internal to model/: activation recomputation of gpt.c's slots (recompute.c). What a slot
 * entry does not keep is described in model/block.h (MG_SLOT_RC_*, the selective modules); here
 * is which positions recompute what, the buffers the slots share for it, and the two steps
 * around a chunk's layers: keeping a distributed input's share in the forward, and running a
 * recomputed group's forward again before its backward.
 * Exports: mg_recompute_plan, mg_recompute_keep_share, mg_recompute_group. Needs: model/gpt,
 * model/gpt_slots. */
#ifndef MG_MODEL_RECOMPUTE_H
#define MG_MODEL_RECOMPUTE_H

#include "model/gpt.h"

/* At plan, before the slots: each position's recomputation (g->rc_pos) and the shared buffers
 * (g->rc_scratch, g->rc_groups, g->rc_bytes) in the activation arena. */
mg_status mg_recompute_plan(mg_gpt *g);
/* Before local layer i's forward in slot s of chunk c (--distribute-saved-activations). */
mg_status mg_recompute_keep_share(mg_gpt *g, int c, int s, int i);
/* Before local layer i's backward in slot s of chunk c (full recomputation). */
mg_status mg_recompute_group(mg_gpt *g, int c, int s, int i);

#endif
