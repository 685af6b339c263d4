/* What a tokenizer implementation provides behind data/tokenizer.h: an ops table and the common
 * head of its tokenizer and worker structs (each implementation's structs start with them).
 * Not part of the module's interface. Exports: mg_tokenizer_ops, struct mg_tokenizer,
 * struct mg_tokenizer_worker, the loaders. Needs: data/tokenizer_gpt2. */
#ifndef MG_DATA_TOKENIZER_IMPL_H
#define MG_DATA_TOKENIZER_IMPL_H

#include "data/tokenizer_gpt2.h"

typedef struct {
    void (*destroy)(mg_tokenizer *t);
    mg_status (*worker_create)(const mg_tokenizer *t, mg_tokenizer_worker **out);
    void (*worker_free)(mg_tokenizer_worker *w);
    mg_status (*encode)(mg_tokenizer_worker *w, const char *text, size_t len, int32_t **ids,
                        size_t *n, size_t *cap);
    mg_status (*decode)(const mg_tokenizer *t, const int32_t *ids, size_t n, char **text,
                        size_t *len);
    /* optional: NULL when tokens have no raw-byte form */
    const char *(*id_bytes)(const mg_tokenizer *t, int32_t id, size_t *len);
} mg_tokenizer_ops;

struct mg_tokenizer {
    const mg_tokenizer_ops *ops;
    int vocab_size;
    int32_t eod, bos; /* -1: none */
    char name[1100];  /* "<type> <file>" */
};

struct mg_tokenizer_worker {
    const mg_tokenizer *t;
};

/* The loaders (each sets every field of the head; GPT-2's is in data/tokenizer_gpt2.h). */
mg_status mg_tokenizer_hf_load(mg_tokenizer **out, const char *path, bool no_special_tokens);
mg_status mg_tokenizer_spm_load(mg_tokenizer **out, const char *type, const char *model_file);

#endif
