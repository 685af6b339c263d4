/* Packed documents: positions and document starts of each microbatch (train/trainer_docs.h). */
#include "train/trainer_docs.h"

#include "core/log.h"
#include "train/trainer_loss.h"

#include <stdlib.h>

void mg_docs_compute(const int32_t *tokens, int B, int S, int32_t eod, int32_t *pos,
                     int32_t *doc_start) {
    for (int b = 0; b < B; b++) {
        const int32_t *tok = tokens + (size_t)b * S;
        int start = 0; /* the current document's first index */
        for (int j = 0; j < S; j++) {
            size_t i = (size_t)b * S + (size_t)j;
            if (pos) pos[i] = j - start;
            if (doc_start) doc_start[i] = start;
            if (tok[j] == eod) start = j + 1; /* the eod ends its own document */
        }
    }
}

bool mg_trainer_docs_on(const mg_trainer *t) {
    return t->cfg.reset_position_ids || t->cfg.reset_attention_mask;
}

mg_status mg_trainer_docs_init(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    t->docs_eod = -1;
    if (!mg_trainer_docs_on(t)) return MG_OK;
    const char *flag = c->reset_position_ids ? "--reset-position-ids" : "--reset-attention-mask";
    MG_CHECK(mg_trainer_eod_for(c, flag, &t->docs_eod));
    size_t N = (size_t)t->model.blk.N;
    t->mem.host_docs = malloc(2 * N * sizeof *t->mem.host_docs);
    if (!t->mem.host_docs) return MG_FAIL(MG_ERR_NOMEM, "out of memory (document positions)");
    for (int s = 0; s < t->model.n_slots; s++)
        mg_gpt_set_documents(&t->model, s,
                             t->mem.positions ? t->mem.positions + (size_t)s * N : NULL,
                             t->mem.doc_starts ? t->mem.doc_starts + (size_t)s * N : NULL);
    const bool pos = c->reset_position_ids, mask = c->reset_attention_mask;
    mg_log_info("> packed documents split at token %d (end of document):%s%s%s", (int)t->docs_eod,
                pos ? " positions restart at 0 (--reset-position-ids)" : "", pos && mask ? ";" : "",
                mask ? " attention stays within a document (--reset-attention-mask)" : "");
    return MG_OK;
}

mg_status mg_trainer_docs_microbatch(mg_trainer *t, int slot) {
    if (t->docs_eod < 0) return MG_OK;
    mg_backend *be = t->be;
    size_t N = (size_t)t->model.blk.N;
    int32_t *pos = t->mem.positions ? t->mem.host_docs : NULL,
            *doc = t->mem.doc_starts ? t->mem.host_docs + N : NULL;
    mg_docs_compute(t->mem.host_tokens, t->model.blk.B, t->model.cfg.S, t->docs_eod, pos, doc);
    if (pos) MG_CHECK(be->copy_h2d(be, t->mem.positions + (size_t)slot * N, pos, N * sizeof *pos));
    if (doc) MG_CHECK(be->copy_h2d(be, t->mem.doc_starts + (size_t)slot * N, doc, N * sizeof *doc));
    return MG_OK;
}
