/* The tokenizer interface: --tokenizer-type -> loader, and the calls through the ops table. */
#include "data/tokenizer_impl.h"

#include <string.h>

static const char *const k_spm_types[] = {"SentencePieceTokenizer", "GPTSentencePieceTokenizer",
                                          "Llama2Tokenizer"};

static int is_spm(const char *type) {
    for (size_t i = 0; i < sizeof k_spm_types / sizeof *k_spm_types; i++)
        if (!strcmp(type, k_spm_types[i])) return 1;
    return 0;
}

int mg_tokenizer_known_type(const char *type) {
    return type && (!strcmp(type, "GPT2BPETokenizer") || !strcmp(type, "HuggingFaceTokenizer") ||
                    is_spm(type));
}

int mg_tokenizer_type_uses_model(const char *type) {
    return mg_tokenizer_known_type(type) && strcmp(type, "GPT2BPETokenizer") != 0;
}

mg_status mg_tokenizer_load(mg_tokenizer **out, const mg_tokenizer_spec *spec) {
    *out = NULL;
    const char *type = spec->type;
    if (!type || !*type)
        return MG_FAIL(MG_ERR_USAGE, "no --tokenizer-type given; this build has %s",
                       MG_TOKENIZER_TYPES);
    if (!mg_tokenizer_known_type(type))
        return MG_FAIL(MG_ERR_USAGE, "--tokenizer-type %s cannot tokenize text; this build has %s",
                       type, MG_TOKENIZER_TYPES);
    if (!strcmp(type, "GPT2BPETokenizer")) {
        if (!spec->vocab_file || !*spec->vocab_file || !spec->merge_file || !*spec->merge_file)
            return MG_FAIL(MG_ERR_USAGE, "--tokenizer-type GPT2BPETokenizer needs --vocab-file "
                                         "(encoder.json) and --merge-file (vocab.bpe)");
        return mg_tokenizer_gpt2_load(out, spec->vocab_file, spec->merge_file);
    }
    if (!spec->model || !*spec->model)
        return MG_FAIL(MG_ERR_USAGE, "--tokenizer-type %s needs --tokenizer-model %s", type,
                       is_spm(type) ? "FILE.model (SentencePiece)"
                                    : "DIR or DIR/tokenizer.json (Hugging Face)");
    if (is_spm(type)) return mg_tokenizer_spm_load(out, type, spec->model);
    return mg_tokenizer_hf_load(out, spec->model, spec->no_special_tokens);
}

void mg_tokenizer_free(mg_tokenizer *t) {
    if (t) t->ops->destroy(t);
}

int mg_tokenizer_vocab_size(const mg_tokenizer *t) {
    return t->vocab_size;
}

int32_t mg_tokenizer_eod(const mg_tokenizer *t) {
    return t->eod;
}

int32_t mg_tokenizer_bos(const mg_tokenizer *t) {
    return t->bos;
}

const char *mg_tokenizer_name(const mg_tokenizer *t) {
    return t->name;
}

mg_status mg_tokenizer_worker_create(const mg_tokenizer *t, mg_tokenizer_worker **out) {
    return t->ops->worker_create(t, out);
}

void mg_tokenizer_worker_free(mg_tokenizer_worker *w) {
    if (w) w->t->ops->worker_free(w);
}

mg_status mg_tokenizer_encode(mg_tokenizer_worker *w, const char *text, size_t len, int32_t **ids,
                              size_t *n, size_t *cap) {
    return w->t->ops->encode(w, text, len, ids, n, cap);
}

mg_status mg_tokenizer_decode(const mg_tokenizer *t, const int32_t *ids, size_t n, char **text,
                              size_t *len) {
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return MG_FAIL(MG_ERR_FORMAT,
                           "decode: id %d at position %zu is outside the vocabulary (0..%d)",
                           ids[i], i, t->vocab_size - 1);
    return t->ops->decode(t, ids, n, text, len);
}

const char *mg_tokenizer_id_bytes(const mg_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->vocab_size || !t->ops->id_bytes) return NULL;
    return t->ops->id_bytes(t, id, len);
}
