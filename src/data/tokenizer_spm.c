/* SentencePieceTokenizer, GPTSentencePieceTokenizer and Llama2Tokenizer: a SentencePiece .model
 * through libsentencepiece (tokenizer_spm_shim.cc). Current Megatron-LM builds all three with
 * one class (megatron/core/tokenizers/text/libraries/sentencepiece_tokenizer.py, legacy off):
 * tokenize(text) = encode_as_ids(text), with no BOS or EOS added (the legacy _Llama2Tokenizer,
 * removed from Megatron-LM in February 2026, prepended BOS; the current one does not);
 * vocab_size = get_piece_size(); eod = eos_id(); bos = bos_id() (-1 when the model has none).
 * Without libsentencepiece in the build these types are refused with a line saying what to
 * install. */
#include "data/tokenizer_impl.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef MG_HAVE_SENTENCEPIECE
#include "data/tokenizer_spm_shim.h"

typedef struct {
    mg_tokenizer base;
    mg_spm *sp;
} spm_tokenizer;

static mg_status shim_status(int rc, const char *what, const char *name, const char *err) {
    if (rc == MG_SPM_NOMEM) return MG_FAIL(MG_ERR_NOMEM, "%s: out of memory (%s)", what, name);
    return MG_FAIL(MG_ERR_FORMAT, "%s: %s: libsentencepiece: %s", what, name, err);
}

static void spm_destroy(mg_tokenizer *base) {
    spm_tokenizer *t = (spm_tokenizer *)base;
    mg_spm_free(t->sp);
    free(t);
}

static mg_status spm_worker_create(const mg_tokenizer *t, mg_tokenizer_worker **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate a tokenizer worker");
    (*out)->t = t;
    return MG_OK;
}

static void spm_worker_free(mg_tokenizer_worker *w) {
    free(w);
}

static mg_status spm_encode(mg_tokenizer_worker *w, const char *text, size_t len, int32_t **ids,
                            size_t *n, size_t *cap) {
    const spm_tokenizer *t = (const spm_tokenizer *)w->t;
    char err[512] = "";
    int rc = mg_spm_encode(t->sp, text, len, ids, n, cap, err, sizeof err);
    return rc == MG_SPM_OK ? MG_OK : shim_status(rc, "encode", t->base.name, err);
}

static mg_status spm_decode(const mg_tokenizer *base, const int32_t *ids, size_t n, char **text,
                            size_t *len) {
    const spm_tokenizer *t = (const spm_tokenizer *)base;
    char err[512] = "";
    int rc = mg_spm_decode(t->sp, ids, n, text, len, err, sizeof err);
    return rc == MG_SPM_OK ? MG_OK : shim_status(rc, "decode", t->base.name, err);
}

static const mg_tokenizer_ops k_spm_ops = {
    .destroy = spm_destroy,
    .worker_create = spm_worker_create,
    .worker_free = spm_worker_free,
    .encode = spm_encode,
    .decode = spm_decode,
    .id_bytes = NULL,
};

mg_status mg_tokenizer_spm_load(mg_tokenizer **out, const char *type, const char *model_file) {
    *out = NULL;
    FILE *f = fopen(model_file, "rb");
    if (!f)
        return MG_FAIL(MG_ERR_IO, "%s: cannot open (the --tokenizer-model of %s)", model_file,
                       type);
    fclose(f);
    spm_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the tokenizer");
    t->base.ops = &k_spm_ops;
    snprintf(t->base.name, sizeof t->base.name, "%s %s", type, model_file);
    char err[512] = "";
    int rc = mg_spm_load(model_file, &t->sp, err, sizeof err);
    if (rc != MG_SPM_OK) {
        free(t);
        if (rc == MG_SPM_NOMEM) return MG_FAIL(MG_ERR_NOMEM, "%s: out of memory", model_file);
        return MG_FAIL(MG_ERR_FORMAT, "%s: not a SentencePiece model: %s", model_file, err);
    }
    int pieces, pad, unk;
    mg_spm_ids(t->sp, &pieces, &t->base.bos, &t->base.eod, &pad, &unk);
    t->base.vocab_size = pieces;
    *out = &t->base;
    return MG_OK;
}

#else

mg_status mg_tokenizer_spm_load(mg_tokenizer **out, const char *type, const char *model_file) {
    (void)model_file;
    *out = NULL;
    return MG_FAIL(MG_ERR_UNSUPPORTED,
                   "--tokenizer-type %s needs libsentencepiece, which this build lacks: install "
                   "libsentencepiece-dev (apt-get install libsentencepiece-dev) and rebuild",
                   type);
}

#endif
